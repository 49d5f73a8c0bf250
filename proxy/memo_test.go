package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A URI asked before is answered from the memo only when its entry is fresh,
// and the checks that do not depend on the URI (method, admission) still run.
func TestRememberedURIKeepsEveryCheck(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=30" // head page: 1 s TTL
	first := h.get(target)
	if first.status != 200 || first.header["Etag"] == "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	e := h.p.settings.Load().memo.Lookup([]byte(target))
	if e == nil || !strings.HasPrefix(e.Key, "/api/v5/chainx/block/block-list?") {
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
	if h.p.settings.Load().memo.Lookup([]byte(target)) != nil {
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
	if h.p.settings.Load().memo.Lookup([]byte(path)) == nil {
		t.Fatal("not remembered")
	}
	if r := h.get(path); r.status != 401 || r.code() != "50103" {
		t.Fatalf("unsigned ask of a remembered, cached URI: %d %s", r.status, r.body)
	}
}
