package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkHit drives the real handler on a cached key: route, admission
// (auth off), parameter normalization, cache lookup, headers and metrics.
func BenchmarkHit(b *testing.B) {
	h := newHarness(b)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	if r := h.get(target); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	// Spelled differently from the warming request: normalization runs.
	uri := "/api/v5/chainx/block/block-list?limit=20&chainShortName=ChainX&page=1"
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.SetMethod("GET")
		for pb.Next() {
			ctx.Response.Reset()
			h.p.Handle(&ctx)
			if ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) == 0 {
				b.Fatalf("status %d", ctx.Response.StatusCode())
			}
		}
	})
}
