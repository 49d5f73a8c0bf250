// Package tracing is the edge's OpenTelemetry: the tracer provider the
// binary exports with, the propagation of W3C trace context from clients
// and to the upstream, and the nil-safe span helpers the request path
// calls (with tracing off, each is a nil check).
package tracing

import (
	"context"
	"log/slog"
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

	"explorer-edge/config"
	"explorer-edge/proxy/logsample"
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
	repeats  logsample.Repeats
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
	ok, suppressed := h.repeats.Allow(logsample.Key{Msg: "tracing failed", Code: kind}, h.now(), h.interval)
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

// Tracing starts the edge's spans; nil is tracing off.
type Tracing struct {
	Tracer trace.Tracer
	Prop   propagation.TraceContext
}

// New is tracing with tp; nil when tp is nil (off).
func New(tp trace.TracerProvider) *Tracing {
	if tp == nil {
		return nil
	}
	return &Tracing{Tracer: tp.Tracer("explorer-edge")}
}

// Key is the request's user value holding its span's context.
const Key = "explorer-edge.trace"

// maxTraceState is the most of a client's tracestate the edge takes: the
// W3C Trace Context's 512 characters a vendor may expect to be kept
// (section 3.3.1.5); a longer one is dropped whole, never cut.
const maxTraceState = 512

// HeaderCarrier reads a client's trace context from its request headers
// for the propagator: its traceparent, and its tracestate when it is
// within maxTraceState.
type HeaderCarrier struct{ H *fasthttp.RequestHeader }

func (c HeaderCarrier) Get(key string) string {
	v := c.H.Peek(key)
	if len(v) > maxTraceState && key == "tracestate" {
		return ""
	}
	return string(v)
}
func (c HeaderCarrier) Set(key, value string) {}
func (c HeaderCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// UpstreamCarrier writes the edge's own trace context on an upstream call:
// the traceparent of the attempt's span only. The client's tracestate is
// its own vendors' business and is not forwarded (it was, verbatim, up to
// 32 members of any size, on every call).
type UpstreamCarrier struct{ H *fasthttp.RequestHeader }

func (c UpstreamCarrier) Get(string) string { return "" }
func (c UpstreamCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.H.Set(key, value)
	}
}
func (c UpstreamCarrier) Keys() []string { return []string{"traceparent"} }

// Span starts a child of tc called name; with tracing off (t or tc nil)
// it returns tc and a nil span.
func (t *Tracing) Span(tc context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tc == nil || t == nil {
		return tc, nil
	}
	return t.Tracer.Start(tc, name, trace.WithAttributes(attrs...))
}

// End ends a span of span, marking err if any.
func End(s trace.Span, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// Joined notes, on a request's span, that its miss joined another's flight.
func Joined(tc context.Context) {
	if tc != nil {
		trace.SpanFromContext(tc).AddEvent("joined another request's flight")
	}
}
