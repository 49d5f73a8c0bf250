package proxy

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/server"
)

// access writes the access log line of a sampled request. With sampling off
// it is one atomic load and a comparison: the hit path stays allocation-free.
func (p *Proxy) access(ctx *fasthttp.RequestCtx, s *settings, id route.ID, result metrics.Result, code string, start time.Time) {
	p.account(ctx, s, result)
	if t := p.ops.accessSample.Load(); t == 0 || rand.Uint64() > t {
		return
	}
	p.logAccess(ctx, s, id, result, code, start)
}

// logAccess names what the edge decided, never what the client sent: no
// header, raw query or credential, and the client only by its configured
// name. The client's address is the one admission limits (behind
// auth.trusted_proxies, the one X-Forwarded-For names); request_id is the
// answer's X-Request-Id, the client's own or the edge's. log.access_fields
// adds the method, the normalized question (the cache key: only the
// route's parameters, canonical), the body's bytes and the upstream time.
func (p *Proxy) logAccess(ctx *fasthttp.RequestCtx, s *settings, id route.ID, result metrics.Result, code string, start time.Time) {
	if !p.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("route", id.String()),
		slog.Int("status", ctx.Response.StatusCode()),
		slog.String("code", code),
		slog.String("cache", result.String()),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("client_ip", s.auth.ClientIP(ctx).String()),
		slog.String("request_id", string(ctx.Response.Header.PeekBytes(server.HeaderRequestID))),
	)
	if c := s.auth.ClientOf(ctx); c != nil {
		attrs = append(attrs, slog.String("client", c.Name))
	}
	for _, f := range s.cfg.Log.AccessFields {
		switch f {
		case "method":
			attrs = append(attrs, slog.String("method", string(ctx.Method())))
		case "key":
			if k := p.accessKey(ctx, s); k != "" {
				attrs = append(attrs, slog.String("key", k))
			}
		case "bytes":
			attrs = append(attrs, slog.Int("bytes", bodyBytes(ctx)))
		case "upstream_ms":
			if d, ok := ctx.UserValue(upstreamTimeKey{}).(time.Duration); ok {
				attrs = append(attrs, slog.Float64("upstream_ms", float64(d.Microseconds())/1000))
			}
		}
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// accessKey is the request's normalized question, its cache key, or ""
// for a request that has none (an unknown path, a refused parameter).
// Built again from the request: only a sampled line with the field pays.
func (p *Proxy) accessKey(ctx *fasthttp.RequestCtx, s *settings) string {
	r := route.ByPath(ctx.Path())
	if r == nil {
		return ""
	}
	q := p.work.queries.Get().(*query)
	defer p.work.queries.Put(q)
	if err := q.Parse(r, ctx.QueryArgs(), s.chains); err != nil {
		return ""
	}
	return string(q.Key)
}

// upstreamTimeKey is the user value of a request holding the time of the
// upstream call its answer came from (a time.Duration).
type upstreamTimeKey struct{}

// noteUpstream keeps d, the time of the upstream call a request's answer
// came from, for its access line; only when the line may carry it (the
// miss path: the hit path never comes here).
func (p *Proxy) noteUpstream(ctx *fasthttp.RequestCtx, s *settings, d time.Duration) {
	if d > 0 && p.ops.accessSample.Load() != 0 && slices.Contains(s.cfg.Log.AccessFields, "upstream_ms") {
		ctx.SetUserValue(upstreamTimeKey{}, d)
	}
}

// bodyBytes is the size of the answer's body as sent (compressed when it
// went compressed).
func bodyBytes(ctx *fasthttp.RequestCtx) int {
	if ctx.Response.IsBodyStream() { // Body() would read the stream whole
		return ctx.Response.Header.ContentLength()
	}
	return len(ctx.Response.Body())
}

// account counts an answered request on its client's series (see
// admission.Rules.Payer).
func (p *Proxy) account(ctx *fasthttp.RequestCtx, s *settings, result metrics.Result) {
	t := s.auth.Payer(ctx)
	if t == nil {
		return
	}
	if result == metrics.ResultNone {
		result = metrics.ResultError
	}
	t.Acct.Answered(result, bodyBytes(ctx))
}
