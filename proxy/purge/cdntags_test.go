package purge

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"explorer-edge/cache"
	"explorer-edge/proxy/route"
)

var testNaming = Naming{Header: []byte("xkey"), Sep: ' ', Prefix: "ee-", Chains: []string{"CHAINX", "TRADE_ZONE"}}

func entryTags(e *cache.Entry) map[string]bool {
	out := map[string]bool{}
	for _, t := range strings.Split(string(testNaming.AppendEntryTags(nil, e)), " ") {
		out[t] = true
	}
	return out
}

// TestCDNTagsCoverEverySelector: for random answers and every kind of
// selector (hash, heights, route with and without chain, all, a
// reorganization's), whatever the selector matches at the edge carries
// one of the tags the selector is sent to the CDN as. A tag missed would
// leave a purged answer at the CDN.
func TestCDNTagsCoverEverySelector(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	chains := testNaming.Chains
	hashes := make([]string, 40)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("0x%064x", rng.Uint64())
	}
	const head = 3_000_000
	var entries []*cache.Entry
	for i := range 3000 {
		e := &cache.Entry{Key: fmt.Sprintf("/api/v5/x?n=%d", i), Stored: 1}
		e.Tags.Route = uint8(rng.IntN(int(route.Count)) + 1)
		e.Tags.Chain = uint8(rng.IntN(len(chains)) + 1)
		for range rng.IntN(4) {
			e.Tags.Hashes = append(e.Tags.Hashes, hashDigest(hashes[rng.IntN(len(hashes))]))
		}
		if rng.IntN(5) > 0 {
			// Near the head mostly, some anywhere, of every width.
			lo := int64(head - rng.IntN(600))
			if rng.IntN(3) == 0 {
				lo = rng.Int64N(head)
			}
			width := []int64{1, 1, 2, 20, 100, 5000, 2_000_000}[rng.IntN(7)]
			e.Tags.Lo, e.Tags.Hi = lo, min(lo+1+rng.Int64N(width), head+1)
		}
		entries = append(entries, e)
	}
	var sels []*Selector
	add := func(body string) {
		s, err := Parse([]byte(body), chains)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		sels = append(sels, s)
	}
	add(`{"all":true}`)
	for _, r := range route.Names() {
		add(`{"route":"` + r + `"}`)
		add(`{"route":"` + r + `","chain":"trade_zone"}`)
	}
	for _, h := range hashes[:10] {
		add(`{"hash":"0x` + strings.ToUpper(h[2:]) + `","chain":"chainx"}`)
	}
	for range 300 {
		from := int64(head - rng.IntN(700))
		if rng.IntN(4) == 0 {
			from = rng.Int64N(head)
		}
		to := from + []int64{0, 1, 15, 40, 300, 100_000}[rng.IntN(6)]
		add(fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, from, to))
	}
	for depth := int64(1); depth <= 40; depth++ {
		sels = append(sels, Replaced(chains, "CHAINX", head-depth, 2))
	}
	matched := 0
	for _, sel := range sels {
		tags := testNaming.SelectorTags(sel, headAt(head), 64)
		if len(tags) > 2*MaxTags {
			t.Errorf("%s %s: %d tags", sel.Kind(), sel.Describe(), len(tags))
		}
		for _, e := range entries {
			if !sel.match(e) {
				continue
			}
			matched++
			have := entryTags(e)
			hit := false
			for _, tag := range tags {
				hit = hit || have[tag]
			}
			if !hit {
				t.Fatalf("%s %s matches %+v at the edge, none of its tags %v at the CDN (the answer's: %v)",
					sel.Kind(), sel.Describe(), e.Tags, tags, have)
			}
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d matches: the test tests little", matched)
	}
}

// TestCDNTagsOfAReorganization: a reorganization of depth 1 to 40 near
// the head is one request's worth of tags (Cloudflare takes 100), and it
// leaves the answers well below the fork alone.
func TestCDNTagsOfAReorganization(t *testing.T) {
	const head = 12_345_678
	below := &cache.Entry{Key: "k", Tags: cache.Tags{Route: 1, Chain: 1, Lo: head - 1000, Hi: head - 999}}
	for depth := int64(1); depth <= 40; depth++ {
		tags := testNaming.SelectorTags(Replaced(testNaming.Chains, "CHAINX", head-depth, 1), headAt(head), 64)
		if len(tags) > 100 {
			t.Fatalf("depth %d: %d tags", depth, len(tags))
		}
		for _, tag := range tags {
			if entryTags(below)[tag] {
				t.Fatalf("depth %d purges the answer at height %d: %s", depth, head-1000, tag)
			}
		}
	}
}

// TestCDNTagsOfTheLargestAnswer: a per-hash route's answer of 20 hashes
// whose records span every height stays within the strictest CDN's limits
// (50 tags of 128 characters), with the longest prefix and chain.
func TestCDNTagsOfTheLargestAnswer(t *testing.T) {
	n := testNaming
	n.Prefix = strings.Repeat("p", 16)
	n.Chains = []string{strings.Repeat("C", 32)}
	e := &cache.Entry{Key: "/api/v5/chainx/tz/cross/transaction-multi?" + strings.Repeat("h", 1400),
		Tags: cache.Tags{Route: uint8(route.TransactionMulti) + 1, Chain: 1, Lo: 0, Hi: 1 << 62}}
	for i := range 20 {
		e.Tags.Hashes = append(e.Tags.Hashes, hashDigest(fmt.Sprint(i)))
	}
	tags := strings.Split(string(n.AppendEntryTags(nil, e)), " ")
	if len(tags) > MaxTags {
		t.Fatalf("%d tags", len(tags))
	}
	for _, tag := range tags {
		if len(tag) > MaxTagLen || tag == "" {
			t.Fatalf("tag %q of %d characters", tag, len(tag))
		}
	}
	t.Logf("%d tags, %d bytes", len(tags), len(strings.Join(tags, " ")))
}

// TestCDNTagsOfAURL: a url purge names the answer's key and, for a
// per-hash route, its hashes (whose items the edge purges with it).
func TestCDNTagsOfAURL(t *testing.T) {
	h := fmt.Sprintf("0x%064x", 7)
	sel, err := Parse([]byte(`{"url":"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=chainx&txId=`+h+`"}`), testNaming.Chains)
	if err != nil {
		t.Fatal(err)
	}
	e := &cache.Entry{Key: sel.keys[0]}
	e.Tags = Of(e, nil, testNaming.Chains)
	tags := testNaming.SelectorTags(sel, headAt(0), 0)
	have := entryTags(e)
	if len(tags) != 2 || !have[tags[0]] || !have[tags[1]] || !strings.HasPrefix(tags[1], "ee-h-chainx-") {
		t.Fatalf("url tags %v, the answer's %v", tags, have)
	}
}

func headAt(h int64) func(string) int64 { return func(string) int64 { return h } }
