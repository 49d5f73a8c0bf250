package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"explorer-edge/cache"
	"explorer-edge/config"
)

// Tracing (OpenTelemetry) is off unless Options.Tracer is set: then every
// hook below is a nil check, and the hit path allocates nothing. When on,
// a request is a server span (a client's W3C traceparent is its parent);
// its children are the cache decision, the flight its miss leads, and in
// the flight the shared tier's calls and each upstream attempt, whose
// traceparent goes upstream. No span holds a header or a credential.

// NewTracerProvider is the binary's tracer provider for cfg: spans batched
// to the OTLP/HTTP receiver at cfg.OTLPEndpoint, a share cfg.SampleRatio
// of the traces a client did not start sampled. Shut it down to flush.
// OpenTelemetry's own errors (an export the receiver refused, with its
// body, often a multi-line HTML page) go to log, not to stderr as Go's log
// package writes them: one WARN line, sampled (otelErrors). log nil leaves
// OpenTelemetry's handler as it is.
func NewTracerProvider(cfg config.Tracing, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if log != nil {
		otel.SetErrorHandler(&otelErrors{log: log, interval: otelErrorInterval, now: time.Now})
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/traces"))
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	), nil
}

// otelErrorInterval is how often a tracing error of one kind is logged: a
// receiver down fails every export (one each batch, every 5 s or 512 spans).
const otelErrorInterval = 10 * time.Second

// maxOtelError bounds the error text of a line: the receiver's body is in it.
const maxOtelError = 512

// otelErrors is OpenTelemetry's error handler: each error one WARN line,
// "tracing failed", its text on one line, cut at maxOtelError and with any
// URL's password redacted; at most one line per interval for each kind of
// error (its text before the receiver's body), the next one carrying
// suppressed=K.
type otelErrors struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	repeats  repeats
}

func (h *otelErrors) Handle(err error) {
	if err == nil || !h.log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	text := config.Redact(strings.Join(strings.Fields(err.Error()), " "))
	kind, _, _ := strings.Cut(text, "body:")
	kind, _, _ = strings.Cut(kind, "(")
	if len(kind) > 128 {
		kind = kind[:128]
	}
	ok, suppressed := h.repeats.allow(repeatKey{msg: "tracing failed", code: kind}, h.now(), h.interval)
	if !ok {
		return
	}
	if len(text) > maxOtelError {
		text = strings.ToValidUTF8(text[:maxOtelError], "") + "..."
	}
	attrs := []slog.Attr{slog.String("err", text)}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	h.log.LogAttrs(context.Background(), slog.LevelWarn, "tracing failed", attrs...)
}

type tracing struct {
	t    trace.Tracer
	prop propagation.TraceContext
}

func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{t: tp.Tracer("explorer-edge")}
}

// traceKey is the request's user value holding its span's context.
const traceKey = "explorer-edge.trace"

// maxTraceState is the most of a client's tracestate the edge takes: the
// W3C Trace Context's 512 characters a vendor may expect to be kept
// (section 3.3.1.5); a longer one is dropped whole, never cut.
const maxTraceState = 512

// headerCarrier reads a client's trace context from its request headers
// for the propagator: its traceparent, and its tracestate when it is
// within maxTraceState.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string {
	v := c.h.Peek(key)
	if len(v) > maxTraceState && key == "tracestate" {
		return ""
	}
	return string(v)
}
func (c headerCarrier) Set(key, value string) {}
func (c headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// upstreamCarrier writes the edge's own trace context on an upstream call:
// the traceparent of the attempt's span only. The client's tracestate is
// its own vendors' business and is not forwarded (it was, verbatim, up to
// 32 members of any size, on every call).
type upstreamCarrier struct{ h *fasthttp.RequestHeader }

func (c upstreamCarrier) Get(string) string { return "" }
func (c upstreamCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.h.Set(key, value)
	}
}
func (c upstreamCarrier) Keys() []string { return []string{"traceparent"} }

// handleTraced is Handle inside a request span.
func (p *Proxy) handleTraced(ctx *fasthttp.RequestCtx) {
	parent := p.tr.prop.Extract(context.Background(), headerCarrier{&ctx.Request.Header})
	tc, span := p.tr.t.Start(parent, "request", trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() { // not sampled: no span below it either
		if c := p.handle(ctx); c != nil && c.policy != nil {
			rateLimitHeaders(ctx, c)
		}
		return
	}
	span.SetAttributes(attribute.String("http.request.method", string(ctx.Method())), attribute.String("url.path", string(ctx.Path())))
	ctx.SetUserValue(traceKey, tc)
	if c := p.handle(ctx); c != nil && c.policy != nil {
		rateLimitHeaders(ctx, c)
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
	if p.tr == nil {
		return nil
	}
	tc, _ := ctx.UserValue(traceKey).(context.Context)
	return tc
}

// traceCache records the cache decision of a request, from start to now.
func (p *Proxy) traceCache(tc context.Context, key []byte, state cache.State, start time.Time) {
	if tc == nil {
		return
	}
	_, span := p.tr.t.Start(tc, "cache", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("cache.key", string(key)), attribute.String("cache.state", state.String())))
	span.End()
}

// span starts a child of tc called name; with tracing off (t or tc nil)
// it returns tc and a nil span.
func (t *tracing) span(tc context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tc == nil || t == nil {
		return tc, nil
	}
	return t.t.Start(tc, name, trace.WithAttributes(attrs...))
}

// endSpan ends a span of span, marking err if any.
func endSpan(s trace.Span, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// joined notes, on a request's span, that its miss joined another's flight.
func joined(tc context.Context) {
	if tc != nil {
		trace.SpanFromContext(tc).AddEvent("joined another request's flight")
	}
}
