package purge

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"explorer-edge/cache"
	"explorer-edge/proxy/route"
)

var testChains = []string{"CHAINX", "TRADE_ZONE"}

// hashA and hashB are transaction hashes, in canonical (lower) case.
const (
	hashA = "0xaaaa000000000000000000000000000000000000000000000000000000000001"
	hashB = "0xbbbb000000000000000000000000000000000000000000000000000000000002"
)

func mustParse(t *testing.T, body string) *Selector {
	t.Helper()
	sel, err := Parse([]byte(body), testChains)
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return sel
}

// TestParseRefusesNamingTheField: every bad purge request is refused
// with the explorer's envelope (50014 missing, 50036 invalid) naming the
// field at fault, so an operator sees what to fix.
func TestParseRefusesNamingTheField(t *testing.T) {
	for _, c := range []struct {
		body  string
		code  string
		field string // the message starts "Parameter <field> "
		words string // and holds these
	}{
		{``, "50014", "selector", "give one of"},
		{`  `, "50014", "selector", ""},
		{`{}`, "50014", "selector", ""},
		{`{"all":false}`, "50014", "selector", ""}, // all:false selects nothing
		{`{"soft":true}`, "50014", "selector", ""},
		{`[]`, "50036", "body", "not a JSON object"},
		{`null`, "50036", "body", ""},
		{`{"all":true`, "50036", "body", ""},
		{`{"key":"x"}`, "50036", "key", "unknown field"},
		{`{"url":1}`, "50036", "url", "must be a string"},
		{`{"all":"yes"}`, "50036", "all", "true or false"},
		{`{"all":true,"soft":1}`, "50036", "soft", "true or false"},
		{`{"url":"/api/v5/chainx/block/block-list?chainShortName=CHAINX","all":true}`, "50036", "url", "not url and all"},
		{`{"hash":"` + hashA + `","chain":"CHAINX","route":"block-list"}`, "50036", "hash", "not hash and route"},
		{`{"all":true,"chain":"CHAINX"}`, "50036", "chain", "hash or route only"},
		{`{"url":""}`, "50014", "url", ""},
		{`{"url":"/api/v5/chainx/block/nope?chainShortName=CHAINX"}`, "50036", "url", "none of the six routes"},
		{`{"url":"/api/v5/chainx/block/block-list"}`, "50036", "url", "chainShortName"},
		{`{"url":"/api/v5/chainx/block/block-list?chainShortName=NOPE"}`, "50036", "url", ""},
		{`{"url":"/api/v5/chainx/block/block-list?chainShortName=CHAINX","chain":"CHAINX"}`, "50036", "chain", "the url names its chain"},
		{`{"hash":"0xzz","chain":"CHAINX"}`, "50036", "hash", ""},
		{`{"hash":"` + hashA[:40] + `","chain":"CHAINX"}`, "50036", "hash", ""},
		{`{"hash":"` + hashA + `"}`, "50014", "chain", ""},
		{`{"hash":"` + hashA + `","chain":"NOPE"}`, "50036", "chain", ""},
		{`{"heights":[1,2]}`, "50036", "heights", "must be an object"},
		{`{"heights":{"chain":"CHAINX","from":1,"to":2,"step":1}}`, "50036", "heights.step", "unknown field"},
		{`{"heights":{"chain":1,"from":1,"to":2}}`, "50036", "chain", "must be a string"},
		{`{"heights":{"from":1,"to":2}}`, "50014", "chain", ""},
		{`{"heights":{"chain":"CHAINX","to":2}}`, "50014", "from", ""},
		{`{"heights":{"chain":"CHAINX","from":1}}`, "50014", "to", ""},
		{`{"heights":{"chain":"CHAINX","from":-1,"to":2}}`, "50036", "from", "non-negative integer"},
		{`{"heights":{"chain":"CHAINX","from":1.5,"to":2}}`, "50036", "from", ""},
		{`{"heights":{"chain":"CHAINX","from":"x","to":2}}`, "50036", "from", ""},
		{`{"heights":{"chain":"CHAINX","from":5,"to":4}}`, "50036", "from", "above to"},
		{`{"heights":{"chain":"CHAINX","from":1,"to":2},"chain":"CHAINX"}`, "50036", "chain", "goes inside heights"},
		{`{"route":""}`, "50014", "route", ""},
		{`{"route":"blocks"}`, "50036", "route", "not one of position-list, block-list"},
		{`{"route":"block-list","chain":"NOPE"}`, "50036", "chain", ""},
	} {
		sel, err := Parse([]byte(c.body), testChains)
		if err == nil {
			t.Errorf("Parse(%s) = %s %s, want refused", c.body, sel.Kind(), sel.Describe())
			continue
		}
		if err.Status != 400 || err.Code != c.code || !strings.HasPrefix(err.Msg, "Parameter "+c.field+" ") || !strings.Contains(err.Msg, c.words) {
			t.Errorf("Parse(%s) = %d %s %q, want %s naming %q (%q)", c.body, err.Status, err.Code, err.Msg, c.code, c.field, c.words)
		}
	}
}

// TestParseNormalizes: a selector is written down (logged, passed to the
// fleet) as its canonical request: chain names in upper case, hashes in
// lower case, a url as its cache key, so that two nodes and two spellings
// select alike.
func TestParseNormalizes(t *testing.T) {
	a := mustParse(t, `{"url":"/api/v5/chainx/block/block-list?limit=20&chainShortName=chainx&page=1"}`)
	b := mustParse(t, `{"url":" /api/v5/chainx/block/block-list?chainShortName=CHAINX "}`)
	if a.Request().URL != b.Request().URL || !slices.Equal(a.keys, b.keys) || len(a.keys) != 1 {
		t.Errorf("two spellings of one question select different keys: %q %q", a.keys, b.keys)
	}
	if a.Kind() != "url" || a.Mode() != "hard" || a.Describe() != a.keys[0] || a.Request().Chain != "" {
		t.Errorf("url selector: kind %s mode %s describe %q", a.Kind(), a.Mode(), a.Describe())
	}
	// A per-hash route's url takes its hashes' entries with it.
	m := mustParse(t, `{"url":"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=trade_zone&txId=0x`+strings.ToUpper(hashA[2:])+`,`+hashB+`","soft":true}`)
	if len(m.keys) != 3 || m.keys[1] != route.HashKey("TRADE_ZONE", hashA) || m.keys[2] != route.HashKey("TRADE_ZONE", hashB) {
		t.Errorf("per-hash url selects %q, want its key and both hashes' entries", m.keys)
	}
	if m.Mode() != "soft" || !m.Request().Soft {
		t.Errorf("soft not kept: %s", m.Mode())
	}
	if got := m.sharedKeys(); !slices.Equal(got, m.keys) {
		t.Errorf("a url's Redis keys %q, want %q", got, m.keys)
	}

	h := mustParse(t, `{"hash":" 0x`+strings.ToUpper(hashA[2:])+` ","chain":" chainx "}`)
	if h.Request().Hash != hashA {
		t.Errorf("hash kept as %q", h.Request().Hash)
	}
	if h.Request().Chain != "CHAINX" || h.chain != 1 || h.hash != hashDigest(hashA) || h.Describe() != "CHAINX "+h.Request().Hash {
		t.Errorf("hash selector: chain %q tag %d describe %q", h.Request().Chain, h.chain, h.Describe())
	}
	if got := h.sharedKeys(); len(got) != 1 || got[0] != route.HashKey("CHAINX", hashA) {
		t.Errorf("a hash's Redis keys %q", got)
	}

	hs := mustParse(t, `{"heights":{"chain":"trade_zone","from":"100","to":120}}`)
	if hs.from != 100 || hs.to != 120 || hs.chain != 2 || hs.Describe() != "TRADE_ZONE 100..120" || hs.sharedKeys() != nil {
		t.Errorf("heights selector: %d..%d chain %d describe %q", hs.from, hs.to, hs.chain, hs.Describe())
	}

	r := mustParse(t, `{"route":" transaction-fills ","chain":"trade_zone"}`)
	if r.Describe() != "transaction-fills TRADE_ZONE" || r.routes != 1<<routeTag(&route.Table[route.TransactionFills])|1<<tagPerHash {
		t.Errorf("route selector: describe %q routes %b", r.Describe(), r.routes)
	}
	if all := mustParse(t, `{"all":true,"soft":false}`); all.Kind() != "all" || all.Describe() != "all" || all.Mode() != "hard" {
		t.Errorf("all selector: %s %q %s", all.Kind(), all.Describe(), all.Mode())
	}
}

// testEntry is an answer to url (a public request URI, or a hash entry's
// key) with body, tagged as the core tags it, stored at stored.
func testEntry(t *testing.T, url, body string, class cache.Class, stored time.Time) *cache.Entry {
	t.Helper()
	key := url
	if !strings.HasPrefix(url, "hash|") {
		key = mustParse(t, `{"url":"`+url+`"}`).keys[0]
	}
	e := cache.NewItem(key, []byte(body), class, stored, time.Minute, 0, 0)
	e.Tags = Of(e, []byte(body), testChains)
	return e
}

const (
	blockListURL = "/api/v5/chainx/block/block-list?chainShortName=CHAINX"
	txListURL    = "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=50"
	positionURL  = "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=0x1111111111111111111111111111111111111111"
	multiURL     = "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hashA + "," + hashB
	internalURL  = "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + hashA
)

// testEntries are one answer of each kind the edge holds.
func testEntries(t *testing.T, stored time.Time) map[string]*cache.Entry {
	return map[string]*cache.Entry{
		"blocks":   testEntry(t, blockListURL, `{"code":"0","msg":"","data":[{"page":"1","blockList":[{"height":"102"},{"height":"101"},{"height":"100"}]}]}`, cache.Head, stored),
		"txlist":   testEntry(t, txListURL, `{"code":"0","msg":"","data":[{"page":"1","transactionList":[]}]}`, cache.Final, stored),
		"position": testEntry(t, positionURL, `{"code":"0","msg":"","data":[]}`, cache.Volatile, stored),
		"multi":    testEntry(t, multiURL, `{"code":"0","msg":"","data":[{"txId":"`+hashA+`","chainxBlockHeight":"7000"},{"txId":"`+hashB+`","chainxBlockHeight":"7003"}]}`, cache.Final, stored),
		"itemA":    testEntry(t, route.HashKey("TRADE_ZONE", hashA), `{"txId":"`+hashA+`","chainxBlockHeight":"7000"}`, cache.Final, stored),
		"itemB":    testEntry(t, route.HashKey("TRADE_ZONE", hashB), `{"txId":"`+hashB+`","chainxBlockHeight":"7003"}`, cache.Final, stored),
		"internal": testEntry(t, internalURL, `{"code":"0","msg":"","data":[{"transactionList":[{"height":"60"}]}]}`, cache.Final, stored),
	}
}

// TestSelectorMatch: each kind of selector selects exactly the answers
// that hold what it names, by the tags read from their keys and bodies.
func TestSelectorMatch(t *testing.T) {
	stored := time.Unix(1_700_000_000, 0)
	entries := testEntries(t, stored)
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"all":true}`, []string{"blocks", "txlist", "position", "multi", "itemA", "itemB", "internal"}},
		{`{"url":"` + blockListURL + `&page=1"}`, []string{"blocks"}},
		{`{"url":"` + multiURL + `"}`, []string{"multi", "itemA", "itemB"}},
		{`{"url":"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=` + hashB + `"}`, []string{"itemB"}},
		{`{"hash":"` + hashA + `","chain":"TRADE_ZONE"}`, []string{"multi", "itemA"}},
		{`{"hash":"` + hashA + `","chain":"CHAINX"}`, []string{"internal"}},
		{`{"heights":{"chain":"CHAINX","from":101,"to":101}}`, []string{"blocks"}},
		{`{"heights":{"chain":"CHAINX","from":103,"to":1000}}`, nil},
		{`{"heights":{"chain":"CHAINX","from":0,"to":99}}`, []string{"txlist", "internal"}},
		{`{"heights":{"chain":"CHAINX","from":50,"to":50}}`, []string{"txlist"}},
		{`{"heights":{"chain":"TRADE_ZONE","from":7001,"to":7002}}`, []string{"multi"}}, // the whole answer spans them; neither item holds one
		{`{"heights":{"chain":"TRADE_ZONE","from":7003,"to":7003}}`, []string{"multi", "itemB"}},
		{`{"route":"block-list"}`, []string{"blocks"}},
		{`{"route":"block-list","chain":"TRADE_ZONE"}`, nil},
		{`{"route":"transaction-multi"}`, []string{"multi", "itemA", "itemB"}},
		{`{"route":"transaction-fills","chain":"TRADE_ZONE"}`, []string{"itemA", "itemB"}}, // both per-hash routes answer from the items
		{`{"route":"internal-transaction-multi","chain":"CHAINX"}`, []string{"internal"}},
	} {
		sel := mustParse(t, c.body)
		var got []string
		for name, e := range entries {
			if sel.match(e) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s selects %v, want %v", c.body, got, want)
		}
	}
}

// TestReplacedSparesNewerAnswers: a reorganization's selector selects
// the chain's answers holding a height from the fork up that are older
// than the answer that showed it, of every class.
func TestReplacedSparesNewerAnswers(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	older, newer := testEntries(t, at.Add(-time.Second)), testEntries(t, at)
	sel := Replaced(testChains, "CHAINX", 101, at.UnixNano())
	if sel.Kind() != "heights" || sel.Mode() != "hard" || sel.to != math.MaxInt64 || sel.Describe() != "CHAINX 101..9223372036854775807" {
		t.Errorf("Replaced: %s %s %q", sel.Kind(), sel.Mode(), sel.Describe())
	}
	if !sel.match(older["blocks"]) || sel.match(newer["blocks"]) {
		t.Errorf("blocks 100-102 stored before the reorganization: selected %v; after it: %v", sel.match(older["blocks"]), sel.match(newer["blocks"]))
	}
	for _, n := range []string{"txlist", "internal", "multi", "position"} {
		if sel.match(older[n]) {
			t.Errorf("%s (below the fork or another chain) selected", n)
		}
	}
	sel.classes = 1 << cache.Final
	if sel.match(older["blocks"]) {
		t.Errorf("a selector of final answers selected a head page")
	}
}

// TestTagsOfAnswers: Of reads the route, chain, hashes and heights a
// purge selects by; an answer of no route is untagged, and TagNames names
// the tags back.
func TestTagsOfAnswers(t *testing.T) {
	stored := time.Unix(1_700_000_000, 0)
	es := testEntries(t, stored)
	b := es["blocks"].Tags
	if b.Route != routeTag(&route.Table[route.BlockList]) || b.Chain != 1 || b.Lo != 100 || b.Hi != 103 || len(b.Hashes) != 0 {
		t.Errorf("block list tags %+v", b)
	}
	if tl := es["txlist"].Tags; tl.Lo != 50 || tl.Hi != 51 {
		t.Errorf("a transaction list is tagged by the height asked: %+v", tl)
	}
	if p := es["position"].Tags; p.Lo < p.Hi {
		t.Errorf("a position list holds no height: %+v", p)
	}
	m := es["multi"].Tags
	if m.Chain != 2 || len(m.Hashes) != 2 || !m.HasHash(hashDigest(hashA)) || !m.HasHash(hashDigest(hashB)) || m.Lo != 7000 || m.Hi != 7004 {
		t.Errorf("transaction-multi tags %+v", m)
	}
	if i := es["itemA"].Tags; i.Route != tagPerHash || i.Chain != 2 || !i.HasHash(hashDigest(strings.ToUpper(hashA))) || i.Lo != 7000 || i.Hi != 7001 {
		t.Errorf("a hash's entry: %+v", i)
	}
	for name, want := range map[string][2]string{"blocks": {"block-list", "CHAINX"}, "itemA": {"per-hash", "TRADE_ZONE"}} {
		tags := es[name].Tags
		if r, c := TagNames(&tags, testChains); r != want[0] || c != want[1] {
			t.Errorf("TagNames(%s) = %s %s, want %v", name, r, c, want)
		}
	}
	u := &cache.Entry{Key: "/not/a/route?x=1"}
	if tags := Of(u, []byte(`{"data":[]}`), testChains); tags.Route != 0 || tags.Chain != 0 {
		t.Errorf("an answer of no route is tagged %+v", tags)
	}
	if ChainTag(testChains, "chainx") != 0 || ChainTag(testChains, "TRADE_ZONE") != 2 {
		t.Errorf("ChainTag is of canonical names only")
	}
}
