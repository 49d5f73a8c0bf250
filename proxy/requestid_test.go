package proxy

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// TestRequestIDOnEveryAnswer: every answer carries X-Request-Id: the
// client's own when it sent a sane one (visible ASCII, at most 128 bytes),
// else one the edge made, unique per request. Hits, misses, errors,
// refusals, preflights and 304s alike.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	h := newHarness(t, withCORS("https://app.example"), func(c *config.Config, _ *sim.Config) {
		c.Auth.IPRate, c.Auth.IPBurst = 0.001, 9 // the 10th admitted request is refused
	})
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=3"
	generated := regexp.MustCompile(`^[0-9a-f]{16}-[0-9]+$`)
	seen := map[string]bool{}
	miss := h.get(blocks)
	for _, c := range []struct {
		name, method, target string
		headers              []string
		status               int
	}{
		{"miss", "GET", blocks + "&page=2", nil, 200},
		{"hit", "GET", blocks, nil, 200},
		{"304", "GET", blocks, []string{"If-None-Match", miss.header["Etag"]}, 304},
		{"bad parameter", "GET", blocks + "&limit=500", nil, 400},
		{"unknown path", "GET", "/api/v5/chainx/nowhere", nil, 404},
		{"method", "POST", blocks, nil, 405},
		{"preflight", "OPTIONS", blocks, []string{"Origin", "https://app.example", "Access-Control-Request-Method", "GET"}, 204},
		{"a space", "GET", blocks, []string{"X-Request-Id", "a b"}, 200},
		{"too long", "GET", blocks, []string{"X-Request-Id", strings.Repeat("x", 129)}, 200},
		{"non-ASCII", "GET", blocks, []string{"X-Request-Id", "café"}, 200},
		{"rate limited", "GET", blocks, nil, 429},
	} {
		r := h.do(c.method, c.target, c.headers...)
		id := r.header["X-Request-Id"]
		if r.status != c.status || !generated.MatchString(id) || seen[id] {
			t.Errorf("%s: status %d, X-Request-Id %q; want %d and a new generated id", c.name, r.status, id, c.status)
		}
		seen[id] = true
	}
	// The client's own, passed through, on a hit and on an error.
	h2 := newHarness(t)
	for _, target := range []string{blocks, blocks, blocks + "&limit=500"} {
		own := "req-7f3a/9:" + strings.Repeat("z", 100)
		if r := h2.get(target, "X-Request-Id", own); r.header["X-Request-Id"] != own {
			t.Errorf("%s: X-Request-Id %q, want the client's %q", target, r.header["X-Request-Id"], own)
		}
	}
}

// TestAccessLogNamesClientAndRequest: the access line has the client's
// address (behind a trusted proxy, the one X-Forwarded-For names), the
// signed client's name and the request id the answer carried.
func TestAccessLogNamesClientAndRequest(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Log.AccessSample = 1
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: accessKey, SecretKey: accessSecret, Passphrase: accessPass}}
		c.Auth.TrustedProxies = []string{"127.0.0.1"}
	})
	logs := withLog(h)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=4"
	ts := signer.Timestamp(time.Now())
	signed := []string{signer.HeaderKey, accessKey, signer.HeaderPassphrase, accessPass, signer.HeaderTimestamp, ts,
		signer.HeaderSign, signer.Sign(accessSecret, ts, "GET", target)}
	r := h.get(target, append(signed, "X-Forwarded-For", "198.51.100.9, 203.0.113.7", "X-Request-Id", "trace-42")...)
	r2 := h.get(target) // unsigned, no proxy header: 401
	lines := logs.Lines(t, "access")
	if len(lines) != 2 {
		t.Fatalf("%d access lines", len(lines))
	}
	if l := lines[0]; r.status != 200 || l["client_ip"] != "203.0.113.7" || l["client"] != "web" || l["request_id"] != "trace-42" {
		t.Errorf("signed request behind the proxy: %d, access line %v", r.status, l)
	}
	if l := lines[1]; r2.status != 401 || l["client_ip"] != "127.0.0.1" || l["client"] != nil || l["request_id"] != r2.header["X-Request-Id"] || l["request_id"] == "" {
		t.Errorf("unsigned request: %d %q, access line %v", r2.status, r2.header["X-Request-Id"], l)
	}
}
