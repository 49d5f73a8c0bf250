package proxy

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// TestCORSAllowHeadersKey: cors.allow_headers replaces the list a
// preflight allows; an empty list allows only the safelisted headers (no
// Access-Control-Allow-Headers at all); a reload applies a new list;
// Validate refuses what is no header name, and "*" mixed with names.
func TestCORSAllowHeadersKey(t *testing.T) {
	const app = "https://app.example.com"
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=4"
	preflight := func(h *harness) resp {
		return h.do(fasthttp.MethodOptions, target, "Origin", app, "Access-Control-Request-Method", "GET",
			"Access-Control-Request-Headers", "x-debug")
	}
	h := newHarness(t, withCORS(app), func(c *config.Config, _ *sim.Config) { c.CORS.AllowHeaders = []string{"X-Debug", "traceparent"} })
	if r := preflight(h); r.status != 204 || r.header["Access-Control-Allow-Headers"] != "X-Debug, traceparent" {
		t.Fatalf("preflight with allow_headers [X-Debug, traceparent]: %d %v", r.status, r.header)
	}
	cfg := h.cfg
	cfg.CORS.AllowHeaders = nil
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if r := preflight(h); r.status != 204 || r.header["Access-Control-Allow-Headers"] != "" {
		t.Fatalf("preflight with allow_headers [] after a reload: %d %v", r.status, r.header)
	}

	if got := config.Default().CORS.AllowHeaders; !strings.Contains(strings.Join(got, ","), "X-Request-Id,traceparent,tracestate") {
		t.Errorf("default cors.allow_headers %v", got)
	}
	for _, bad := range [][]string{{"X Debug"}, {"X-Debug:"}, {""}, {"*", "X-Debug"}} {
		c := config.Default()
		c.Upstream.BaseURL, c.Upstream.APIKey, c.Upstream.SecretKey, c.Upstream.Passphrase = "http://127.0.0.1:1", "k", "s", "p"
		c.CORS.AllowHeaders = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cors.allow_headers") {
			t.Errorf("allow_headers %q: %v", bad, err)
		}
	}
	c := config.Default()
	c.Upstream.BaseURL, c.Upstream.APIKey, c.Upstream.SecretKey, c.Upstream.Passphrase = "http://127.0.0.1:1", "k", "s", "p"
	c.CORS.AllowHeaders = []string{"*"}
	if err := c.Validate(); err != nil {
		t.Errorf("allow_headers [*]: %v", err)
	}
}
