package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// upstreamDelay is how long the wrapped upstream of TestAccessLogFields
// takes: the upstream time the access line reports is at least this.
const upstreamDelay = 30 * time.Millisecond

// TestAccessLogFields: log.access_fields adds, on each access line, the
// method, the normalized question (the cache key: the route's parameters in
// canonical form, never the raw query, so no parameter the route does not
// name), the body's bytes as sent, and for an answer that came from an
// upstream call its time (a miss, whole-key or per-hash). A hit has no
// upstream time; a request with no question (an unknown path) no key.
// Without the key nothing of them is written.
func TestAccessLogFields(t *testing.T) {
	slow := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(upstreamDelay) // the upstream's own time, measured, not waited on
			next.ServeHTTP(w, r)
		})
	}
	h := newHarnessWrapped(t, slow, func(c *config.Config, _ *sim.Config) {
		c.Log.AccessSample = 1
		c.Log.AccessFields = []string{"method", "key", "bytes", "upstream_ms"}
	})
	logs := withLog(h)
	// The raw query: a parameter out of canonical order and case, and one
	// the route does not name (a credential a client put there by mistake).
	raw := "/api/v5/chainx/block/block-list?limit=5&chainShortName=chainx&apiKey=SECRET-IN-QUERY"
	canonical := cacheKey(t, h.p, raw)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + h.sim.UnknownHash(7)
	last := func() map[string]any {
		t.Helper()
		lines := logs.Lines(t, "access")
		if len(lines) == 0 {
			t.Fatal("no access line")
		}
		return lines[len(lines)-1]
	}
	miss := h.get(raw)
	l := last()
	if l["cache"] != "miss" || l["method"] != "GET" || l["key"] != canonical || l["bytes"] != float64(len(miss.body)) {
		t.Errorf("miss: %v, want method GET, key %q, bytes %d", l, canonical, len(miss.body))
	}
	up, ok := l["upstream_ms"].(float64)
	if d, _ := l["duration_ms"].(float64); !ok || up < float64(upstreamDelay.Milliseconds()) || up > d {
		t.Errorf("miss: upstream_ms %v, duration_ms %v, want %d <= upstream_ms <= duration_ms", l["upstream_ms"], l["duration_ms"], upstreamDelay.Milliseconds())
	}

	hit := h.get(raw, "Accept-Encoding", "gzip")
	l = last()
	if l["cache"] != "hit" || l["key"] != canonical || l["bytes"] != float64(len(hit.body)) || l["upstream_ms"] != nil {
		t.Errorf("hit: %v, want key %q, bytes %d, no upstream_ms", l, canonical, len(hit.body))
	}
	h.do("HEAD", raw)
	if l = last(); l["method"] != "HEAD" {
		t.Errorf("HEAD: %v", l)
	}
	if r := h.get(multi); r.status != 200 {
		t.Fatalf("%s: %d %s", multi, r.status, r.body)
	}
	if l = last(); l["key"] != cacheKey(t, h.p, multi) || l["upstream_ms"] == nil {
		t.Errorf("per-hash miss: %v", l)
	}
	h.get("/api/v5/chainx/nowhere?x=1")
	if l = last(); l["key"] != nil || l["method"] != "GET" || l["route"] != "unknown" {
		t.Errorf("unknown path: %v", l)
	}
	if out := logs.String(); strings.Contains(out, "SECRET-IN-QUERY") || strings.Contains(out, "apiKey") {
		t.Errorf("the access log holds the raw query:\n%s", out)
	}

	// Off (the default): none of them.
	cfg := h.cfg
	cfg.Log.AccessFields = nil
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7")
	l = last()
	for _, f := range []string{"method", "key", "bytes", "upstream_ms"} {
		if _, ok := l[f]; ok {
			t.Errorf("access_fields off: the line has %s: %v", f, l)
		}
	}
	if err := (&config.Config{Log: config.Log{AccessFields: []string{"query"}}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `log.access_fields: "query" is not one of method, key, bytes, upstream_ms`) {
		t.Errorf("an unknown access field: %v", err)
	}
}
