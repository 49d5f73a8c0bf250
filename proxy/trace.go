package proxy

import (
	"context"
	"explorer-edge/cache"
	"explorer-edge/proxy/admission"
	"explorer-edge/proxy/tracing"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// handleTraced is Handle inside a request span.
func (p *Proxy) handleTraced(ctx *fasthttp.RequestCtx) {
	parent := p.ops.tr.Prop.Extract(context.Background(), tracing.HeaderCarrier{H: &ctx.Request.Header})
	tc, span := p.ops.tr.Tracer.Start(parent, "request", trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() { // not sampled: no span below it either
		if c := p.handle(ctx); c != nil && c.Policy != nil {
			admission.RateLimitHeaders(ctx, c)
		}
		return
	}
	span.SetAttributes(attribute.String("http.request.method", string(ctx.Method())), attribute.String("url.path", string(ctx.Path())))
	ctx.SetUserValue(tracing.Key, tc)
	if c := p.handle(ctx); c != nil && c.Policy != nil {
		admission.RateLimitHeaders(ctx, c)
	}
	status := ctx.Response.StatusCode()
	span.SetAttributes(attribute.Int("http.response.status_code", status),
		attribute.String("cache_status", string(ctx.Response.Header.Peek("Cache-Status"))))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

// requestTrace is the request's span context, nil when tracing is off.
func (p *Proxy) requestTrace(ctx *fasthttp.RequestCtx) context.Context {
	if p.ops.tr == nil {
		return nil
	}
	tc, _ := ctx.UserValue(tracing.Key).(context.Context)
	return tc
}

// traceCache records the cache decision of a request, from start to now.
func (p *Proxy) traceCache(tc context.Context, key []byte, state cache.State, start time.Time) {
	if tc == nil {
		return
	}
	_, span := p.ops.tr.Tracer.Start(tc, "cache", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("cache.key", string(key)), attribute.String("cache.state", state.String())))
	span.End()
}
