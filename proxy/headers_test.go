package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// cacheStatusTTL is the ttl parameter of a Cache-Status value.
func cacheStatusTTL(t *testing.T, v string) int64 {
	t.Helper()
	_, rest, ok := strings.Cut(v, "ttl=")
	if !ok {
		t.Fatalf("Cache-Status %q has no ttl", v)
	}
	n, err := strconv.ParseInt(strings.SplitN(rest, ";", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("Cache-Status %q: %v", v, err)
	}
	return n
}

// TestAgeAndMaxAgeAsRFC9111: max-age is the freshness lifetime and Age the
// time since the upstream answered, so a CDN computing max-age - Age gets
// what is left, not that minus the age again; an answer assembled from
// per-hash parts is as old as its oldest part; a stale answer's ttl is
// negative; every class says its stale windows.
func TestAgeAndMaxAgeAsRFC9111(t *testing.T) {
	h := newHarness(t)
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx") // learn the finalized height
	done := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.p.truth.Final("CHAINX")-1)
	h.get(done)
	h.clock.Advance(10 * time.Second)
	r := h.get(done)
	if r.header["Age"] != "10" || r.header["Cache-Control"] != "public, max-age=86400, stale-while-revalidate=30, stale-if-error=600, immutable" {
		t.Fatalf("final answer 10 s old: Age %q, Cache-Control %q; want 10 and the lifetime 86400 with its windows", r.header["Age"], r.header["Cache-Control"])
	}
	if ttl := cacheStatusTTL(t, r.header["Cache-Status"]); ttl != 86390 {
		t.Fatalf("Cache-Status ttl %d, want what is left, 86390", ttl)
	}
	r = h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=3")
	if r.header["Cache-Control"] != "public, max-age=1, stale-while-revalidate=1, stale-if-error=600" {
		t.Fatalf("head answer: Cache-Control %q, want a shareable max-age=1 and a 1 s stale window", r.header["Cache-Control"])
	}

	// Assembled: one part ten minutes old, one new.
	cross := h.sim.CrossHashes("TRADE_ZONE", 3)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId="
	h.get(multi + cross[0])
	h.clock.Advance(10 * time.Minute)
	r = h.get(multi + cross[0] + "," + cross[1])
	if !strings.Contains(r.header["Cache-Status"], "fwd=partial") || r.header["Age"] != "600" {
		t.Fatalf("answer with a 600 s old part: Cache-Status %q, Age %q, want partial and 600", r.header["Cache-Status"], r.header["Age"])
	}
	if maxAge(r) != 86400 {
		t.Fatalf("assembled answer: Cache-Control %q, want max-age 86400 (lifetime of its parts)", r.header["Cache-Control"])
	}

	// Stale: negative parts (5 s fresh, 5 s stale window) 7 s later, with
	// a fresh part and with a part to fetch.
	unknown, unknown2 := h.sim.UnknownHash(7), h.sim.UnknownHash(8)
	h.get(multi + unknown)
	h.get(multi + unknown2)
	h.clock.Advance(7 * time.Second)
	r = h.get(multi + unknown + "," + cross[0])
	if st := r.header["Cache-Status"]; !strings.HasPrefix(st, "explorer-edge; hit; ttl=") || !strings.HasSuffix(st, "detail=stale-while-revalidate") || cacheStatusTTL(t, st) >= 0 {
		t.Fatalf("assembled from a stale and a fresh part: Cache-Status %q, want a stale hit with a negative ttl", st)
	}
	r = h.get(multi + unknown2 + "," + cross[2])
	if st := r.header["Cache-Status"]; !strings.HasPrefix(st, "explorer-edge; fwd=partial; ttl=") || cacheStatusTTL(t, st) >= 0 {
		t.Fatalf("assembled from a stale part and a fetched one: Cache-Status %q, want partial, not stored, negative ttl", st)
	}
}

// TestETagPerRepresentation: the gzip and identity bodies of one answer
// have different strong ETags (RFC 9110 section 8.8.3), and If-None-Match
// answers 304 for each.
func TestETagPerRepresentation(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	zipped := h.get(target, "Accept-Encoding", "gzip")
	plain := h.get(target)
	zt, pt := zipped.header["Etag"], plain.header["Etag"]
	if zipped.header["Content-Encoding"] != "gzip" || plain.header["Content-Encoding"] != "" {
		t.Fatalf("encodings %q and %q", zipped.header["Content-Encoding"], plain.header["Content-Encoding"])
	}
	if zt == "" || zt == pt || strings.HasPrefix(zt, "W/") || strings.HasPrefix(pt, "W/") {
		t.Fatalf("ETags gzip %q, identity %q: want two different strong tags", zt, pt)
	}
	if r := h.get(target, "Accept-Encoding", "gzip", "If-None-Match", zt); r.status != 304 || r.header["Etag"] != zt {
		t.Fatalf("If-None-Match of the gzip tag: %d, ETag %q", r.status, r.header["Etag"])
	}
	if r := h.get(target, "If-None-Match", pt); r.status != 304 || r.header["Etag"] != pt {
		t.Fatalf("If-None-Match of the identity tag: %d, ETag %q", r.status, r.header["Etag"])
	}
	if r := h.get(target, "If-None-Match", zt); r.status != 200 {
		t.Fatalf("the gzip tag matched the identity body: %d", r.status)
	}
}

// TestAcceptEncodingWithWeights: clients that spell Accept-Encoding with
// weights, or "*", get the gzip body; gzip;q=0 does not.
func TestAcceptEncodingWithWeights(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	for ae, want := range map[string]string{
		"gzip;q=1.0":                    "gzip",
		"br;q=1.0, gzip;q=0.8, *;q=0.1": "gzip",
		"deflate, gzip":                 "gzip",
		"*":                             "gzip",
		"gzip;q=0":                      "",
		"br":                            "",
	} {
		if r := h.get(target, "Accept-Encoding", ae); r.header["Content-Encoding"] != want {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", ae, r.header["Content-Encoding"], want)
		}
	}
}

// TestNoInventedWindows: the 10000-row window is the spec's for holders and
// blocks only; transaction-list and internal-transaction-multi pages beyond
// it are the upstream's to answer.
func TestNoInventedWindows(t *testing.T) {
	h := newHarness(t)
	height := h.sim.FinalizedHeight("CHAINX") - 5
	internal := h.sim.InternalTxHashes("CHAINX", 2)
	for _, target := range []string{
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d&page=501&limit=20", height),
		"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&limit=100&page=101&txId=" + strings.Join(internal, ","),
	} {
		before := h.upstreamCalls()
		r := h.get(target)
		if r.status != 200 || r.code() != "0" || h.upstreamCalls() != before+1 {
			t.Errorf("%s: %d %s, %d upstream calls; want the upstream's answer", target, r.status, r.body, h.upstreamCalls()-before)
		}
	}
	for _, target := range []string{
		"/api/v5/chainx/block/block-list?chainShortName=chainx&page=501&limit=20",
		"/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + h.sim.TokenContracts("CHAINX")[0] + "&page=201&limit=50",
	} {
		if r := h.get(target); r.status != 400 || r.code() != "50036" {
			t.Errorf("%s: %d %s, want 400/50036 (the spec's window)", target, r.status, r.body)
		}
	}
}

func withCORS(origins ...string) harnessOpt {
	return func(c *config.Config, _ *sim.Config) { c.CORS.AllowOrigins = origins }
}

// TestCORS: preflights from an allowed origin are answered at the edge;
// every answer to an allowed origin (hit, miss, error) says so and exposes
// the edge's headers; other origins get no CORS headers; answers that
// depend on Origin say Vary: Origin.
func TestCORS(t *testing.T) {
	const app = "https://app.example.com"
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=4"
	preflight := func(h *harness, origin string) resp {
		return h.do(fasthttp.MethodOptions, target, "Origin", origin, "Access-Control-Request-Method", "GET",
			"Access-Control-Request-Headers", "svc-access-key,svc-access-sign")
	}

	t.Run("off", func(t *testing.T) {
		h := newHarness(t)
		if r := preflight(h, app); r.status != 405 || r.header["Access-Control-Allow-Origin"] != "" {
			t.Fatalf("preflight with CORS off: %d, ACAO %q", r.status, r.header["Access-Control-Allow-Origin"])
		}
		if r := h.get(target, "Origin", app); r.header["Access-Control-Allow-Origin"] != "" || strings.Contains(r.header["Vary"], "Origin") {
			t.Fatalf("CORS off: headers %v", r.header)
		}
	})

	t.Run("origins", func(t *testing.T) {
		h := newHarness(t, withCORS(app))
		r := preflight(h, app)
		if r.status != 204 || r.header["Access-Control-Allow-Origin"] != app ||
			r.header["Access-Control-Allow-Methods"] != "GET, HEAD" || r.header["Access-Control-Max-Age"] != "600" {
			t.Fatalf("preflight: %d %v", r.status, r.header)
		}
		allow := strings.ToLower(r.header["Access-Control-Allow-Headers"])
		for _, want := range []string{"svc-access-key", "svc-access-sign", "svc-access-timestamp", "svc-access-passphrase", "if-none-match"} {
			if !strings.Contains(allow, want) {
				t.Errorf("Access-Control-Allow-Headers %q lacks %s", allow, want)
			}
		}
		if h.upstreamCalls() != 0 {
			t.Fatalf("a preflight reached the upstream")
		}
		if r := preflight(h, "https://evil.example"); r.status != 405 || r.header["Access-Control-Allow-Origin"] != "" {
			t.Fatalf("preflight from another origin: %d %v", r.status, r.header)
		}
		for name, r := range map[string]resp{
			"miss":  h.get(target, "Origin", app),
			"hit":   h.get(target, "Origin", app),
			"error": h.get("/api/v5/chainx/block/block-list?chainShortName=nochain", "Origin", app),
			"404":   h.get("/api/v5/nothing", "Origin", app),
		} {
			if r.header["Access-Control-Allow-Origin"] != app || r.header["Access-Control-Expose-Headers"] != "Cache-Status, Age, ETag, Retry-After, X-Request-Id, RateLimit, RateLimit-Policy" ||
				!strings.Contains(r.header["Vary"], "Origin") {
				t.Errorf("%s to an allowed origin: %d %v", name, r.status, r.header)
			}
		}
		r = h.get(target, "Origin", "https://evil.example")
		if r.header["Access-Control-Allow-Origin"] != "" || r.header["Access-Control-Expose-Headers"] != "" || r.header["Vary"] != "Accept-Encoding, Origin" {
			t.Fatalf("answer to another origin: %v", r.header)
		}
	})

	t.Run("any", func(t *testing.T) {
		h := newHarness(t, withCORS("*"))
		if r := preflight(h, "https://anyone.example"); r.status != 204 || r.header["Access-Control-Allow-Origin"] != "*" || r.header["Vary"] != "" {
			t.Fatalf("preflight: %d %v", r.status, r.header)
		}
		// The answer is the same for every origin, with or without one, so
		// a CDN may share it: no Vary: Origin.
		for _, r := range []resp{h.get(target), h.get(target, "Origin", "https://anyone.example")} {
			if r.header["Access-Control-Allow-Origin"] != "*" || r.header["Vary"] != "Accept-Encoding" {
				t.Fatalf("answer with allow_origins *: %v", r.header)
			}
		}
	})

	t.Run("preflights pass the IP limiter", func(t *testing.T) {
		h := newHarness(t, withCORS(app), func(c *config.Config, _ *sim.Config) { c.Auth.IPRate, c.Auth.IPBurst = 0.001, 2 })
		statuses := []int{preflight(h, app).status, preflight(h, app).status, preflight(h, app).status}
		if statuses[0] != 204 || statuses[1] != 204 || statuses[2] != 429 {
			t.Fatalf("three preflights with an IP burst of 2: %v", statuses)
		}
	})
}
