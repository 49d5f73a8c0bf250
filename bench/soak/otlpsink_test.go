package main

import (
	"context"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The sink takes what the edge's exporter (otlptracehttp, batched) sends:
// the flush succeeds on its empty 200, and the cache spans are counted by
// state, those of a trace a client started with traceHeaders apart.
func TestOTLPSinkCountsClientCacheStates(t *testing.T) {
	sink, err := startOTLPSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(sink.url+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	tr := tp.Tracer("soak-test")

	// A client's request: its traceparent, parsed back as the edge would.
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	c := &counts{}
	r := rand.New(rand.NewPCG(1, 2))
	sink.traceHeaders(req, r, c)
	tp00 := string(req.Header.Peek("traceparent"))
	parts := strings.Split(tp00, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != "01" {
		t.Fatalf("traceparent %q", tp00)
	}
	var tid trace.TraceID
	var sid trace.SpanID
	hex.Decode(tid[:], []byte(parts[1]))
	hex.Decode(sid[:], []byte(parts[2]))
	parent := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	for _, st := range []string{"miss", "fresh", "expired", "expired"} {
		_, sp := tr.Start(parent, "cache", trace.WithAttributes(attribute.String("cache.state", st)))
		sp.End()
	}
	// A trace no client started (sampled by its parent too).
	other := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, sp := tr.Start(other, "cache", trace.WithAttributes(attribute.String("cache.state", "stale")))
	sp.End()
	_, sp = tr.Start(other, "request")
	sp.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatalf("the exporter's flush to the sink: %v", err)
	}

	st := sink.stats()
	if st.requests == 0 || st.bad != 0 || st.spans != 6 {
		t.Fatalf("sink: %d exports, %d refused (%s), %d spans; want at least 1, 0, 6", st.requests, st.bad, st.firstBad, st.spans)
	}
	if got, want := byState(st.client), "miss 1, fresh 1, stale 0, expired 2"; got != want {
		t.Errorf("the client's cache spans: %s, want %s", got, want)
	}
	if got, want := byState(st.states), "miss 1, fresh 1, stale 1, expired 2"; got != want {
		t.Errorf("all cache spans: %s, want %s", got, want)
	}
	if c.traced.Load() != 1 || st.started != 1 {
		t.Errorf("%d traced requests counted, %d trace ids noted; want 1, 1", c.traced.Load(), st.started)
	}
}

// The scraper sums explorer_edge_panics_total over its where labels, and
// tells an edge without the metric (-1) from one that recovered none.
func TestScrapeSumsPanics(t *testing.T) {
	body := "go_goroutines 10\nprocess_resident_memory_bytes 1e+07\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	sc := newScraper(srv.URL)
	sm, err := sc.scrape(t.Context())
	if err != nil || sm.panics != -1 {
		t.Fatalf("without the metric: panics %v, %v; want -1", sm.panics, err)
	}
	body += "# TYPE explorer_edge_panics_total counter\nexplorer_edge_panics_total{where=\"admin\"} 0\n" +
		"explorer_edge_panics_total{where=\"background\"} 1\nexplorer_edge_panics_total{where=\"public\"} 2\n"
	if sm, err = sc.scrape(t.Context()); err != nil || sm.panics != 3 {
		t.Fatalf("panics %v, %v; want 3", sm.panics, err)
	}
}
