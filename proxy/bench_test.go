package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// BenchmarkHit drives the real handler on a cached key: admission (auth
// off), the remembered parse (route.Memo), cache lookup, headers and metrics.
// The client takes no gzip: the answer is sent from its hot identity copy.
func BenchmarkHit(b *testing.B) { benchmarkHit(b, 0) }

// BenchmarkHitGzip is BenchmarkHit for a client that takes gzip: sent the
// stored bytes.
func BenchmarkHitGzip(b *testing.B) { benchmarkHit(b, 0, "Accept-Encoding", "gzip") }

// BenchmarkHitInflated is BenchmarkHit with no identity copies
// (cache.identity_bytes -1): the answer (9.7 KB) is inflated into the
// response each time, what a client taking no gzip costs on an answer that
// has not earned a copy.
func BenchmarkHitInflated(b *testing.B) { benchmarkHit(b, -1) }

func benchmarkHit(b *testing.B, identityBytes int64, headers ...string) {
	h := newHarness(b, func(cfg *config.Config, _ *sim.Config) { cfg.Cache.IdentityBytes = identityBytes })
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	if r := h.get(target); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	// Spelled differently from the warming request: normalized on its
	// first ask, remembered after.
	parallelHits(b, h.p, "/api/v5/chainx/block/block-list?limit=20&chainShortName=ChainX&page=1", headers...)
}

// parallelHits asks p for uri from every benchmark goroutine, with the
// header pairs given, and fails on anything but a 200 with a body.
func parallelHits(b *testing.B, p *Proxy, uri string, headers ...string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.SetMethod("GET")
		for i := 0; i+1 < len(headers); i += 2 {
			ctx.Request.Header.Set(headers[i], headers[i+1])
		}
		for pb.Next() {
			ctx.Response.Reset()
			p.Handle(&ctx)
			if ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) == 0 {
				b.Fatalf("status %d", ctx.Response.StatusCode())
			}
		}
	})
}

// BenchmarkHitCORS is BenchmarkHit from a browser: CORS on for a list of
// origins, an Origin to echo and an Accept-Encoding with weights.
func BenchmarkHitCORS(b *testing.B) {
	h := newHarness(b, withCORS("https://a.example", "https://app.example"))
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	if r := h.get(target); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(target)
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.Header.Set("Origin", "https://app.example")
		ctx.Request.Header.Set("Accept-Encoding", "br;q=1.0, gzip;q=0.8, *;q=0.1")
		for pb.Next() {
			ctx.Response.Reset()
			h.p.Handle(&ctx)
			if ctx.Response.StatusCode() != 200 || len(ctx.Response.Header.ContentEncoding()) == 0 {
				b.Fatalf("status %d, encoding %q", ctx.Response.StatusCode(), ctx.Response.Header.ContentEncoding())
			}
		}
	})
}

// BenchmarkHitManyKeys cycles through 4000 cached answers (block lists and
// block transactions of 2000 done heights), as bench/compare's many-keys
// workload does: the cache lookup and the body leave the CPU caches.
func BenchmarkHitManyKeys(b *testing.B) {
	h := newHarness(b)
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx") // learn the finalized height
	final := h.p.truth.Final("CHAINX")
	var uris []string
	for i := int64(0); i < 2000; i++ {
		uris = append(uris,
			fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=17&height=%d", final-i),
			fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&limit=20&height=%d", final-i))
	}
	for _, u := range uris {
		if r := h.get(u); r.status != 200 {
			b.Fatalf("warm %s: %d", u, r.status)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var ctx fasthttp.RequestCtx
	for i := 0; b.Loop(); i++ {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI(uris[i%len(uris)])
		h.p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(string(ctx.Response.Header.Peek("Cache-Status")), "explorer-edge; hit") {
			b.Fatalf("not a hit: %d %s", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Cache-Status"))
		}
	}
}

// BenchmarkHitFirstAsk is a hit on a URI never asked before (an unknown
// parameter makes each spelling new; normalization drops it): routing,
// URI and argument parsing and normalization run, and the URI is
// remembered, which allocates.
func BenchmarkHitFirstAsk(b *testing.B) {
	h := newHarness(b)
	if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	b.ReportAllocs()
	var ctx fasthttp.RequestCtx
	uri := make([]byte, 0, 128)
	for i := 0; b.Loop(); i++ {
		ctx.Request.Reset()
		ctx.Response.Reset()
		uri = fmt.Appendf(uri[:0], "/api/v5/chainx/block/block-list?limit=20&chainShortName=ChainX&x=%d", i)
		ctx.Request.SetRequestURIBytes(uri)
		h.p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(string(ctx.Response.Header.Peek("Cache-Status")), "explorer-edge; hit") {
			b.Fatalf("not a hit: %d %s", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Cache-Status"))
		}
	}
}
