package proxy

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// withLog restarts h's edge with a JSON logger writing to the returned buffer.
func withLog(h *harness) *testkit.LogBuffer {
	var b testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&b, nil))
	h.start()
	return &b
}

const (
	accessKey    = "access-web-key"
	accessSecret = "ACCE55ACCE55ACCE55ACCE55ACCE55AC"
	accessPass   = "access-web-pass"
)

// TestAccessLog: with log.access_sample 1 every request writes one line
// naming route, status, code, cache result, duration and client, and
// nothing the client sent.
func TestAccessLog(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Log.AccessSample = 1
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: accessKey, SecretKey: accessSecret, Passphrase: accessPass}}
	})
	logs := withLog(h)
	var sent []string // every SVC-ACCESS-SIGN value sent
	signed := func(target, secret string) []string {
		ts := signer.Timestamp(time.Now())
		sig := signer.Sign(secret, ts, "GET", target)
		sent = append(sent, sig)
		return []string{signer.HeaderKey, accessKey, signer.HeaderPassphrase, accessPass, signer.HeaderTimestamp, ts, signer.HeaderSign, sig}
	}
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	bad := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=500"
	cases := []struct {
		target, secret string
		route          string
		status         float64
		code, cache    string
		client         bool
	}{
		{blocks, accessSecret, "block-list", 200, "0", "miss", true},
		{blocks, accessSecret, "block-list", 200, "0", "hit", true},
		{bad, accessSecret, "block-list", 400, "50036", "none", true},
		{blocks, "wrong-secret", "block-list", 401, "50113", "none", false}, // a key without its signature is no client's
		{"/api/v5/chainx/nowhere", accessSecret, "unknown", 404, "404", "none", true},
	}
	for i, c := range cases {
		h.get(c.target, signed(c.target, c.secret)...)
		lines := logs.Lines(t, "access")
		if len(lines) != i+1 {
			t.Fatalf("%d requests wrote %d access lines", i+1, len(lines))
		}
		l := lines[i]
		if l["route"] != c.route || l["status"] != c.status || l["code"] != c.code || l["cache"] != c.cache || l["level"] != "INFO" {
			t.Errorf("request %d: access line %v, want route %s status %v code %s cache %s", i, l, c.route, c.status, c.code, c.cache)
		}
		if ms, ok := l["duration_ms"].(float64); !ok || ms < 0 {
			t.Errorf("request %d: duration_ms %v", i, l["duration_ms"])
		}
		if c.client && l["client"] != "web" {
			t.Errorf("request %d: client %v, want web", i, l["client"])
		}
		if !c.client && l["client"] != nil {
			t.Errorf("request %d: client %v, want none", i, l["client"])
		}
	}
	// An unsigned request names no client.
	h.get(blocks)
	if l := logs.Lines(t, "access"); l[len(l)-1]["client"] != nil || l[len(l)-1]["code"] != "50103" {
		t.Errorf("unsigned request: %v", l[len(l)-1])
	}
	out := logs.String()
	for _, s := range append(sent, accessKey, accessSecret, accessPass, "SVC-", "limit=", "chainShortName") {
		if strings.Contains(out, s) {
			t.Errorf("access log holds %q:\n%s", s, out)
		}
	}
}

// TestAccessLogSampling: off writes nothing, a fraction writes some, and a
// reload changes the fraction.
func TestAccessLogSampling(t *testing.T) {
	h := newHarness(t)
	logs := withLog(h)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	hits := func(n int) int {
		before := len(logs.Lines(t, "access"))
		for range n {
			h.get(target)
		}
		return len(logs.Lines(t, "access")) - before
	}
	if n := hits(50); n != 0 {
		t.Fatalf("access_sample 0 wrote %d lines", n)
	}
	reload := func(f float64) {
		cfg := h.cfg
		cfg.Log.AccessSample = f
		if err := h.p.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reload(0.5)
	// 300 requests at 1/2: all or none logged has probability 2^-299.
	if n := hits(300); n == 0 || n == 300 {
		t.Fatalf("access_sample 0.5 logged %d of 300", n)
	}
	reload(1)
	if n := hits(20); n != 20 {
		t.Fatalf("access_sample 1 logged %d of 20", n)
	}
	reload(0)
	if n := hits(20); n != 0 {
		t.Fatalf("access_sample 0 after a reload logged %d", n)
	}
}

// TestHitPathAllocatesNothing: with the access log off a hit allocates
// nothing (BenchmarkHit measures the same; this makes it a failure).
func TestHitPathAllocatesNothing(t *testing.T) {
	if testkit.Race {
		t.Skip("allocation counts are meaningless under -race")
	}
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	for _, c := range []struct {
		name     string
		origins  []string
		headers  []string
		identity int64  // cache.identity_bytes
		cdn      string // cdn.tag_header
	}{
		{"plain: the answer's hot identity copy", nil, nil, 0, ""},
		{"plain, no identity copies: inflated into the response", nil, nil, -1, ""},
		{"gzip", nil, []string{"Accept-Encoding", "gzip"}, 0, ""},
		{"gzip with weights, CORS origin", []string{"https://a.example", "https://app.example"},
			[]string{"Accept-Encoding", "br;q=1.0, gzip;q=0.8, *;q=0.1", "Origin", "https://app.example"}, 0, ""},
		{"CORS any, If-None-Match", []string{"*"}, []string{"Origin", "https://x.example", "If-None-Match", `"0000000000000000"`}, 0, ""},
		{"the client's X-Request-Id", nil, []string{"X-Request-Id", "0f8e2c4a-7b1d-4e9a-9c3f-5a6b7c8d9e0f"}, 0, ""},
		{"a signed client with a limit: RateLimit fields, its series", nil, signedAs(greedyKey, greedySecret, greedyPass, target), 0, ""},
		{"behind a CDN: tags, CDN-Cache-Control", nil, []string{"Accept-Encoding", "gzip"}, 0, "Cache-Tag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			signed := len(c.headers) > 0 && c.headers[0] == "SVC-ACCESS-KEY"
			h := newHarness(t, withCORS(c.origins...), func(cfg *config.Config, _ *sim.Config) {
				cfg.Cache.IdentityBytes = c.identity
				cfg.CDN.TagHeader = c.cdn
				if signed {
					cfg.Auth.Mode = "signed"
					cfg.Auth.Clients = []config.Client{{Name: "web", APIKey: greedyKey, SecretKey: greedySecret, Passphrase: greedyPass, Rate: 1e9, Burst: 1 << 30}}
				}
			})
			if r := h.get(target, c.headers...); r.status != 200 {
				t.Fatalf("warm: %d", r.status)
			}
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI(target)
			ctx.Request.Header.SetMethod("GET")
			for i := 0; i+1 < len(c.headers); i += 2 {
				ctx.Request.Header.Set(c.headers[i], c.headers[i+1])
			}
			for range 1000 { // pools and header buffers at their working size
				ctx.Response.Reset()
				h.p.Handle(&ctx)
			}
			allocs := testing.AllocsPerRun(200, func() {
				ctx.Response.Reset()
				h.p.Handle(&ctx)
			})
			if ctx.Response.StatusCode() != 200 || allocs != 0 {
				t.Fatalf("hit: status %d, %v allocations per request, want 0", ctx.Response.StatusCode(), allocs)
			}
			if len(c.origins) > 0 && len(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) == 0 {
				t.Fatalf("no CORS header on the hit")
			}
			if c.cdn != "" && (len(ctx.Response.Header.Peek(c.cdn)) == 0 || len(ctx.Response.Header.Peek("CDN-Cache-Control")) == 0) {
				t.Fatalf("no %s or CDN-Cache-Control on the hit", c.cdn)
			}
			if len(ctx.Response.Header.Peek("X-Request-Id")) == 0 {
				t.Fatalf("no X-Request-Id on the hit")
			}
			if signed && !strings.Contains(ctx.Response.Header.String(), "\r\nRateLimit: \"client\";r=") {
				t.Fatalf("no RateLimit field on a signed client's hit")
			}
		})
	}
}
