package proxy

import (
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A lookup finds exactly what was stored for that URI or nothing, even when
// far more URIs than slots were stored and most were overwritten.
func TestMemoNeverAnswersForAnotherURI(t *testing.T) {
	m := newURIMemo()
	r := route.ByPath([]byte("/api/v5/chainx/block/block-list"))
	uri := func(i int) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", i)
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i) }
	n := 3 * memoSlots
	for i := range n {
		m.store([]byte(uri(i)), []byte(key(i)), r)
	}
	found := 0
	for i := range n {
		e := m.lookup([]byte(uri(i)))
		if e == nil {
			continue
		}
		found++
		if e.raw != uri(i) || e.key != key(i) || e.route != r {
			t.Fatalf("lookup %q returned %q -> %q", uri(i), e.raw, e.key)
		}
	}
	if found < memoSlots/2 || found > memoSlots {
		t.Fatalf("%d of %d URIs remembered in %d slots", found, n, memoSlots)
	}
	if e := m.lookup([]byte(uri(n))); e != nil {
		t.Fatalf("a URI never stored was found: %q", e.raw)
	}

	long := "/api/v5/chainx/block/block-list?chainShortName=chainx&x=" + strings.Repeat("a", memoMaxURI)
	m.store([]byte(long), []byte("k"), r)
	if m.lookup([]byte(long)) != nil {
		t.Fatal("a URI over memoMaxURI was remembered")
	}
	multi := route.ByPath([]byte("/api/v5/chainx/tz/cross/transaction-multi"))
	m.store([]byte("/api/v5/chainx/tz/cross/transaction-multi?txId=ab"), []byte("k"), multi)
	if m.lookup([]byte("/api/v5/chainx/tz/cross/transaction-multi?txId=ab")) != nil {
		t.Fatal("a per-hash route was remembered")
	}
}

// A URI asked before is answered from the memo only when its entry is fresh,
// and the checks that do not depend on the URI (method, admission) still run.
func TestRememberedURIKeepsEveryCheck(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=30" // head page: 1 s TTL
	first := h.get(target)
	if first.status != 200 || first.header["Etag"] == "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	e := h.p.settings.Load().memo.lookup([]byte(target))
	if e == nil || !strings.HasPrefix(e.key, "/api/v5/chainx/block/block-list?") {
		t.Fatalf("not remembered after a successful parse: %+v", e)
	}
	hit := h.get(target)
	if !strings.HasPrefix(hit.header["Cache-Status"], "explorer-edge; hit; ttl=") || string(hit.body) != string(first.body) || hit.header["Etag"] != first.header["Etag"] {
		t.Fatalf("second ask: %q, same body %v, ETag %q vs %q", hit.header["Cache-Status"], string(hit.body) == string(first.body), hit.header["Etag"], first.header["Etag"])
	}
	if r := h.get(target, "If-None-Match", first.header["Etag"]); r.status != 304 {
		t.Fatalf("If-None-Match on a remembered URI: %d", r.status)
	}
	if r := h.do(fasthttp.MethodPost, target); r.status != 405 {
		t.Fatalf("POST to a remembered URI: %d %s", r.status, r.body)
	}
	h.clock.Advance(1500 * time.Millisecond) // past the head TTL, within its stale_while_revalidate
	if r := h.get(target); !strings.Contains(r.header["Cache-Status"], "detail=stale-while-revalidate") {
		t.Fatalf("stale entry of a remembered URI: %q", r.header["Cache-Status"])
	}

	// A reload starts an empty memo, and a lowered max_url_bytes applies.
	cfg := h.cfg
	cfg.Server.MaxURLBytes = len(target) - 1
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if h.p.settings.Load().memo.lookup([]byte(target)) != nil {
		t.Fatal("the memo outlived a reload")
	}
	if r := h.get(target); r.status != 414 {
		t.Fatalf("remembered URI over the reloaded max_url_bytes: %d %s", r.status, r.body)
	}
}

// Admission runs for a remembered URI: a cached answer is never given to a
// caller the edge would have refused.
func TestRememberedURIIsStillAdmitted(t *testing.T) {
	h := newHarness(t, signedClients)
	path := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	signed := []string{"SVC-ACCESS-KEY", clientKey, "SVC-ACCESS-PASSPHRASE", clientPass, "SVC-ACCESS-SIGN", sign(clientSecret, ts, path), "SVC-ACCESS-TIMESTAMP", ts}
	for range 2 {
		if r := h.get(path, signed...); r.status != 200 {
			t.Fatalf("signed: %d %s", r.status, r.body)
		}
	}
	if h.p.settings.Load().memo.lookup([]byte(path)) == nil {
		t.Fatal("not remembered")
	}
	if r := h.get(path); r.status != 401 || r.code() != "50103" {
		t.Fatalf("unsigned ask of a remembered, cached URI: %d %s", r.status, r.body)
	}
}

// Remembering a URI costs two allocations, the entry and one string holding
// the URI and its key, however long they are.
func TestRememberingAURIAllocatesTwice(t *testing.T) {
	if testkit.Race {
		t.Skip("allocation counts are meaningless under -race")
	}
	m := newURIMemo()
	r := route.ByPath([]byte("/api/v5/chainx/block/block-list"))
	raw := []byte("/api/v5/chainx/block/block-list?chainShortName=chainx&height=30198879&limit=17")
	key := []byte("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=30198879&limit=17&page=1")
	allocs := testing.AllocsPerRun(100, func() { m.store(raw, key, r) })
	if allocs != 2 {
		t.Fatalf("store: %v allocations, want 2", allocs)
	}
	e := m.lookup(raw)
	if e == nil || e.raw != string(raw) || e.key != string(key) {
		t.Fatalf("lookup after store: %+v", e)
	}
}
