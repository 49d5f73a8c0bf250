package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// testPurgeToken is the admin.purge_token of these tests.
const testPurgeToken = "purge-token-for-tests-0123456789"

func withPurgeToken(c *config.Config, _ *sim.Config) { c.Admin.PurgeToken = testPurgeToken }

// adminAddrs holds the address of each edge's admin server, by *Proxy.
var adminAddrs sync.Map

// admin serves the edge's admin handler on a free port (once per edge)
// and returns its address.
func (h *harness) admin() string {
	h.t.Helper()
	if a, ok := adminAddrs.Load(h.p); ok {
		return a.(string)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h.p.AdminHandler()}
	go srv.Serve(ln)
	p := h.p
	h.t.Cleanup(func() { srv.Shutdown(); adminAddrs.Delete(p) })
	adminAddrs.Store(h.p, ln.Addr().String())
	return ln.Addr().String()
}

// purgeAs posts body to the admin port's /purge with the Authorization
// header auth ("" = none).
func (h *harness) purgeAs(auth, body string) resp {
	h.t.Helper()
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + h.admin() + "/purge")
	req.Header.SetMethod(fasthttp.MethodPost)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.SetBodyString(body)
	if err := h.hc.DoTimeout(req, res, 10*time.Second); err != nil {
		h.t.Fatalf("POST /purge: %v", err)
	}
	r := resp{status: res.StatusCode(), header: map[string]string{}, body: bytes.Clone(res.Body())}
	for k, v := range res.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r
}

// purge posts body with the right token and returns the counts; anything
// but a 200 fails the test.
func (h *harness) purge(body string) purge.Result {
	h.t.Helper()
	r := h.purgeAs("Bearer "+testPurgeToken, body)
	var env struct {
		Code string         `json:"code"`
		Data []purge.Result `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); r.status != 200 || err != nil || env.Code != "0" || len(env.Data) != 1 {
		h.t.Fatalf("purge %s: %d %s", body, r.status, r.body)
	}
	return env.Data[0]
}

// isMiss reports whether an answer came from the upstream.
func isMiss(r resp) bool { return strings.Contains(r.header["Cache-Status"], "fwd=") }

// warm asks each target twice and fails unless the second answer is a hit.
func (h *harness) warm(targets ...string) {
	h.t.Helper()
	for _, target := range targets {
		if r := h.get(target); r.status != 200 || r.code() != "0" {
			h.t.Fatalf("%s: %d %s", target, r.status, r.body)
		}
		if r := h.get(target); isMiss(r) {
			h.t.Fatalf("%s: second request not a hit: %q", target, r.header["Cache-Status"])
		}
	}
}

// gone returns the targets whose answers the edge no longer holds.
func (h *harness) gone(targets ...string) []string {
	h.t.Helper()
	var out []string
	for _, target := range targets {
		if h.cache.GetString(cacheKey(h.t, h.p, target)) == nil {
			out = append(out, target)
		}
	}
	return out
}

// missed returns the targets whose next answer is a miss.
func (h *harness) missed(targets ...string) []string {
	h.t.Helper()
	var out []string
	for _, target := range targets {
		r := h.get(target)
		if r.status != 200 || r.code() != "0" {
			h.t.Fatalf("%s: %d %s", target, r.status, r.body)
		}
		if isMiss(r) {
			out = append(out, target)
		}
	}
	return out
}

func TestPurgeIsOffWithoutAToken(t *testing.T) {
	h := newHarness(t)
	r := h.purgeAs("Bearer anything-at-all-here", `{"all":true}`)
	if r.status != 404 || r.code() != "404" {
		t.Fatalf("purge without admin.purge_token: %d %s, want a 404 envelope", r.status, r.body)
	}
}

func TestPurgeNeedsTheToken(t *testing.T) {
	h := newHarness(t, withPurgeToken, withBlockPagesOff)
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	h.start()
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	h.warm(target)
	for _, c := range []struct {
		name, auth, code string
	}{
		{"no header", "", "50103"},
		{"wrong token", "Bearer " + strings.ToUpper(testPurgeToken), "50111"},
		{"a prefix of the token", "Bearer " + testPurgeToken[:20], "50111"},
		{"not bearer", "Basic " + testPurgeToken, "50103"},
	} {
		r := h.purgeAs(c.auth, `{"all":true}`)
		if r.status != 401 || r.code() != c.code || !strings.HasPrefix(r.header["Www-Authenticate"], "Bearer") {
			t.Errorf("%s: %d %q %s, want 401 with code %s and WWW-Authenticate: Bearer", c.name, r.status, r.header["Www-Authenticate"], r.body, c.code)
		}
	}
	if m := h.missed(target); len(m) != 0 {
		t.Fatal("a refused purge purged")
	}
	if got := h.purge(`{"all":true}`); got.Memory != 1 || got.Selector != "all" || got.Mode != "hard" {
		t.Fatalf("purge with the token: %+v", got)
	}
	if strings.Contains(logs.String(), testPurgeToken) || strings.Contains(logs.String(), testPurgeToken[:20]) {
		t.Fatal("the token is in the log")
	}
	lines := logs.Lines(t, "purge")
	if len(lines) != 1 || lines[0]["selector"] != "all" || lines[0]["mode"] != "hard" || lines[0]["memory"] != 1.0 || lines[0]["caller"] == nil {
		t.Fatalf("purge log lines: %v", lines)
	}
	if n := testutil.ToFloat64(h.m.Purges.WithLabelValues("all", "hard")); n != 1 {
		t.Fatalf("purges_total{selector=all,mode=hard} = %v", n)
	}
	if r := h.purgeAs("Bearer "+testPurgeToken, ""); r.status == 200 {
		t.Fatalf("GET-like empty purge accepted: %s", r.body)
	}
}

func TestPurgeRefusesBadSelectors(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	for _, c := range []struct {
		body, code, names string
	}{
		{`{}`, "50014", "selector"},
		{`not json`, "50036", "body"},
		{`{"url":"/x","all":true}`, "50036", "url"},
		{`{"hash":"0x12"}`, "50036", "hash"},
		{`{"hash":"` + "0x" + strings.Repeat("a", 64) + `"}`, "50014", "chain"},
		{`{"hash":"` + "0x" + strings.Repeat("a", 64) + `","chain":"nochain"}`, "50036", "chain"},
		{`{"heights":{"chain":"chainx","from":10}}`, "50014", "to"},
		{`{"heights":{"chain":"chainx","from":10,"to":5}}`, "50036", "from"},
		{`{"heights":{"from":1,"to":5}}`, "50014", "chain"},
		{`{"heights":{"chain":"chainx","from":-1,"to":5}}`, "50036", "from"},
		{`{"route":"blocks"}`, "50036", "route"},
		{`{"url":"/api/v5/chainx/block/block-list?chainShortName=nochain"}`, "50036", "url"},
		{`{"url":"/api/v5/chainx/nothing"}`, "50036", "url"},
		{`{"url":"/api/v5/chainx/block/block-list?chainShortName=chainx","chain":"chainx"}`, "50036", "chain"},
		{`{"all":true,"sfot":true}`, "50036", "sfot"},
		{`{"all":false}`, "50014", "selector"},
	} {
		r := h.purgeAs("Bearer "+testPurgeToken, c.body)
		var env struct{ Code, Msg string }
		json.Unmarshal(r.body, &env)
		if r.status != 400 || env.Code != c.code || !strings.Contains(env.Msg, c.names) {
			t.Errorf("%s: %d %s, want 400, code %s, a message naming %q", c.body, r.status, r.body, c.code, c.names)
		}
	}
}

func TestPurgeByURL(t *testing.T) {
	h := newHarness(t, withPurgeToken, withBlockPagesOff)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 3)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=30"
	other := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=31"
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hashes[0] + "," + hashes[1]
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="
	h.warm(blocks, other, multi, fills+hashes[2])
	// As a client could send it: parameters reordered, defaults spelt out,
	// another case, a parameter the edge drops.
	if got := h.purge(`{"url":"/api/v5/chainx/block/block-list?limit=030&x=1&page=1&chainShortName=CHAINX"}`); got.Memory != 1 || got.Selector != "url" {
		t.Fatalf("purge by url: %+v, want 1 entry", got)
	}
	before := h.upstreamCalls()
	if m := h.missed(blocks, other); len(m) != 1 || m[0] != blocks {
		t.Fatalf("misses after the purge: %q, want only %s", m, blocks)
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
	// A per-hash route's answer is made of its hashes' entries: the url
	// takes them too, so the next request asks the upstream again.
	spelt := "http://edge.example/api/v5/chainx/tz/cross/transaction-multi?txId=" + strings.ToUpper(hashes[0]) + "," + hashes[1] + "&chainShortName=trade_zone"
	if got := h.purge(`{"url":"` + spelt + `"}`); got.Memory != 3 {
		t.Fatalf("purge of a transaction-multi url: %+v, want 3 entries (the answer and its 2 hashes)", got)
	}
	if m := h.missed(multi, fills+hashes[2]); len(m) != 1 || m[0] != multi {
		t.Fatalf("misses after the purge: %q, want only the multi", m)
	}
}

func TestPurgeByHash(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	cross := h.sim.CrossHashes("CHAINX", 3)
	internal := h.sim.InternalTxHashes("CHAINX", 2)
	a := cross[0]
	multiAB := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=CHAINX&txId=" + a + "," + cross[1]
	fillsA := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=CHAINX&txid=" + a
	fillsB := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=CHAINX&txid=" + cross[1]
	fillsC := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=CHAINX&txid=" + cross[2]
	otherChain := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + a
	intA := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + internal[0]
	intB := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + internal[1]
	intAB := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + internal[1] + "," + internal[0]
	h.warm(multiAB, fillsA, fillsB, fillsC, otherChain, intA, intB, intAB)

	// The cross hash: its entry, the multi answer holding it, the fills answer.
	got := h.purge(`{"hash":" 0x` + strings.ToUpper(a[2:]) + `","chain":"chainx"}`)
	if got.Selector != "hash" || got.Memory != 3 {
		t.Fatalf("purge by hash: %+v, want 3 entries", got)
	}
	if gone := h.gone(multiAB, fillsA, fillsB, fillsC, otherChain, intA, intB, intAB); strings.Join(gone, " ") != multiAB+" "+fillsA {
		t.Fatalf("answers purged with %s: %q", a, gone)
	}
	if h.cache.GetString(route.HashKey("CHAINX", a)) != nil || h.cache.GetString(route.HashKey("CHAINX", cross[1])) == nil {
		t.Fatal("per-hash entries: want the one of the hash purged, the other kept")
	}
	// fills B is assembled from B's entry, which stays: a hit.
	if m := h.missed(fillsA, fillsB, multiAB); strings.Join(m, " ") != fillsA {
		t.Fatalf("misses after purging %s: %q, want only the first request asking for it", a, m)
	}
	// An internal transaction's hash: every answer that asked for it.
	if got := h.purge(`{"hash":"` + internal[0] + `","chain":"CHAINX"}`); got.Memory != 2 {
		t.Fatalf("purge by internal hash: %+v, want 2 entries", got)
	}
	if m := h.gone(intA, intB, intAB); strings.Join(m, " ") != intA+" "+intAB {
		t.Fatalf("misses after purging %s: %q", internal[0], m)
	}
}

func TestPurgeByHeights(t *testing.T) {
	// Pages down from a height (height-down): each holds ten heights.
	h := newHarness(t, withPurgeToken, simProfile("vendor,height-down"))
	f := h.sim.FinalizedHeight("CHAINX")
	top := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=10", f)    // f-9..f
	low := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=10", f-20) // f-29..f-20
	txIn := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", f-5)
	txOut := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", f-15)
	otherChain := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=trade_zone&height=%d", f-5)
	internal := h.sim.InternalTxHashes("CHAINX", 1)
	intx := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + internal[0]
	h.warm(top, low, txIn, txOut, otherChain, intx)
	var rows struct {
		Data []struct {
			TransactionList []struct{ Height string } `json:"transactionList"`
		} `json:"data"`
	}
	json.Unmarshal(h.get(intx).body, &rows)
	var ih int64
	fmt.Sscan(rows.Data[0].TransactionList[0].Height, &ih)

	got := h.purge(fmt.Sprintf(`{"heights":{"chain":"chainx","from":%d,"to":%d}}`, f-6, f-4))
	if got.Selector != "heights" || got.Memory != 2 {
		t.Fatalf("purge by heights: %+v, want 2 entries", got)
	}
	if m := h.missed(top, low, txIn, txOut, otherChain); strings.Join(m, " ") != top+" "+txIn {
		t.Fatalf("misses after purging heights %d..%d: %q", f-6, f-4, m)
	}
	if got := h.purge(fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, ih, ih)); got.Memory < 1 {
		t.Fatalf("purge of the internal transaction's height %d: %+v", ih, got)
	}
	if m := h.missed(intx); len(m) != 1 {
		t.Fatal("the internal transactions' answer survived a purge of its height")
	}
}

func TestPurgeByRouteAndAll(t *testing.T) {
	h := newHarness(t, withPurgeToken, withBlockPagesOff)
	hashes := h.sim.CrossHashes("CHAINX", 1)
	blocksX := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	blocksZ := "/api/v5/chainx/block/block-list?chainShortName=trade_zone"
	txs := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.sim.FinalizedHeight("CHAINX"))
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=CHAINX&txid=" + hashes[0]
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=CHAINX&txId=" + hashes[0]
	h.warm(blocksX, blocksZ, txs, fills)
	if got := h.purge(`{"route":"block-list","chain":"trade_zone"}`); got.Memory != 1 || got.Selector != "route" {
		t.Fatalf("purge of a route on one chain: %+v", got)
	}
	if m := h.missed(blocksX, blocksZ, txs); len(m) != 1 || m[0] != blocksZ {
		t.Fatalf("misses: %q", m)
	}
	if got := h.purge(`{"route":"block-list"}`); got.Memory != 2 {
		t.Fatalf("purge of a route: %+v", got)
	}
	// transaction-multi and -fills share their per-hash entries: purging
	// either route purges those, and the route's own answers.
	if got := h.purge(`{"route":"transaction-fills"}`); got.Memory != 2 {
		t.Fatalf("purge of transaction-fills: %+v, want its answer and the hash's entry", got)
	}
	if m := h.missed(fills); len(m) != 1 {
		t.Fatalf("fills after purging its route: %q, want a miss", m)
	}
	h.warm(multi)
	if got := h.purge(`{"route":"transaction-multi","chain":"CHAINX"}`); got.Memory != 2 {
		t.Fatalf("purge of transaction-multi: %+v, want its answer and the hash's entry", got)
	}
	h.warm(blocksX, blocksZ) // with txs and fills: 4 entries
	if got := h.purge(`{"all":true}`); h.cache.Entries() != 0 || got.Memory != 4 {
		t.Fatalf("purge of all: %+v, %d left", got, h.cache.Entries())
	}
	if m := h.missed(blocksX, txs); len(m) != 2 {
		t.Fatalf("hits after purging all: %q", m)
	}
}

// A soft purge of a hot key: every request in flight is answered at once
// from the stale copy while exactly one refresh goes upstream; a hard purge
// makes the next request a miss.
func TestSoftPurgeServesStaleWithOneRefresh(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.sim.FinalizedHeight("CHAINX")-3)
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx") // learn the finalized height
	h.warm(target)
	if got := h.purge(`{"url":"` + target + `","soft":true}`); got.Memory != 1 || got.Mode != "soft" {
		t.Fatalf("soft purge: %+v", got)
	}
	// The refresh is held: the stale copy answers everyone meanwhile.
	gate := h.holdUpstream()
	defer gate.release()
	before := h.upstreamCalls()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]int{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.get(target)
			mu.Lock()
			statuses[r.header["Cache-Status"]]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for cs, n := range statuses {
		if !strings.Contains(cs, "detail=stale-while-revalidate") {
			t.Fatalf("after a soft purge: %d answers %q, want all stale", n, cs)
		}
	}
	gate.release()
	key := cacheKey(t, h.p, target)
	testkit.WaitFor(t, "the refresh", func() bool { return !isStale(h, key) })
	if n := h.upstreamCalls() - before; n != 1 || gate.arrived.Load() != 1 {
		t.Fatalf("soft purge of a hot key: %d upstream calls (%d held), want 1", n, gate.arrived.Load())
	}
	if r := h.get(target); isMiss(r) || strings.Contains(r.header["Cache-Status"], "stale") {
		t.Fatalf("after the refresh: %q, want a fresh hit", r.header["Cache-Status"])
	}
	h.purge(`{"url":"` + target + `"}`)
	if r := h.get(target); !isMiss(r) {
		t.Fatalf("after a hard purge: %q, want a miss", r.header["Cache-Status"])
	}
}

func isStale(h *harness, key string) bool {
	e := h.cache.GetString(key)
	return e == nil || e.Fresh <= h.clock.Now().UnixNano()
}

// The token file is read again on reload: a rotated token takes over.
func TestPurgeTokenFileIsReadOnReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "purge-token")
	older, newer := testPurgeToken, "a-rotated-purge-token-0123456789"
	if err := os.WriteFile(file, []byte(older+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Admin.PurgeTokenFile = file })
	h.purge(`{"all":true}`)
	if err := os.WriteFile(file, []byte(newer+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Reload(h.cfg); err != nil {
		t.Fatal(err)
	}
	if r := h.purgeAs("Bearer "+older, `{"all":true}`); r.status != 401 {
		t.Fatalf("the old token after rotation: %d %s", r.status, r.body)
	}
	if r := h.purgeAs("Bearer "+newer, `{"all":true}`); r.status != 200 {
		t.Fatalf("the new token after rotation: %d %s", r.status, r.body)
	}
	cfg := h.cfg
	cfg.Admin.PurgeTokenFile = ""
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if r := h.purgeAs("Bearer "+newer, `{"all":true}`); r.status != 404 {
		t.Fatalf("purge after the token was removed: %d %s, want 404", r.status, r.body)
	}
}

// An answer on its way from the upstream when a purge selecting it runs is
// judged by the purge as it is stored: not kept (hard), or kept stale
// (soft). Without that, a refresh in flight undid the purge.
func TestPurgeDuringAFetch(t *testing.T) {
	for _, soft := range []bool{false, true} {
		t.Run(fmt.Sprintf("soft=%v", soft), func(t *testing.T) {
			h := newHarness(t, withPurgeToken, withBlockPagesOff)
			target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"
			// The fetch is held at the upstream until the purge has run (a
			// 500 ms delay let a slow purge come after the answer was stored,
			// and the test then checked an ordinary purge).
			gate := h.holdUpstream()
			defer gate.release()
			done := make(chan resp)
			go func() { done <- h.get(target) }()
			gate.waitArrived(t, 1)
			h.clock.Advance(time.Millisecond) // the purge runs after the question left
			h.purge(fmt.Sprintf(`{"heights":{"chain":"chainx","from":0,"to":%d},"soft":%v}`, h.sim.Head("CHAINX")+10, soft))
			gate.release()
			if r := <-done; r.status != 200 {
				t.Fatalf("the request in flight: %d %s", r.status, r.body)
			}
			e := h.cache.GetString(cacheKey(t, h.p, target))
			switch {
			case !soft && e != nil:
				t.Fatal("an answer fetched before a hard purge was kept after it")
			case soft && e.StateAt(h.clock.Now().UnixNano()) != cache.Stale:
				t.Fatalf("an answer fetched before a soft purge: %v, want kept stale", e.StateAt(h.clock.Now().UnixNano()))
			}
			// Answers asked after the purge are kept as they come.
			h.clock.Advance(time.Millisecond)
			h.purge(`{"url":"` + target + `"}`)
			h.get(target)
			if e := h.cache.GetString(cacheKey(t, h.p, target)); e.StateAt(h.clock.Now().UnixNano()) != cache.Fresh {
				t.Fatal("an answer asked after the purge is not kept fresh")
			}
		})
	}
}
