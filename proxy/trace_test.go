package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"explorer-edge/config"
	"explorer-edge/proxy/node"
	"explorer-edge/proxy/tracing"
)

// tracedEdge is a second edge in front of h's explorer-sim, tracing to an
// in-memory exporter, every span exported as it ends.
func tracedEdge(t *testing.T, h *harness) (*harness, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	e := h.sibling()
	e.startNode(NodeOptions{Options: node.Options{Tracer: tp}})
	return e, exp
}

// traceparents records the traceparent of each request the upstream got.
type traceparents struct {
	mu   sync.Mutex
	seen []string
}

func (tp *traceparents) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp.mu.Lock()
		tp.seen = append(tp.seen, r.Header.Get("Traceparent"))
		tp.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func spansByName(spans tracetest.SpanStubs) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTracingSpanTree: a miss is request -> cache, flight -> budget,
// upstream (account, route, attempt), in the trace a client's traceparent
// started; the upstream gets a traceparent of that trace, child of the
// attempt's span. A hit is request -> cache only.
func TestTracingSpanTree(t *testing.T) {
	var tps traceparents
	h := newHarnessWrapped(t, tps.wrap, withBlockPagesOff)
	e, exp := tracedEdge(t, h)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	if r := e.get(target, "traceparent", "00-"+traceID+"-"+parentID+"-01"); r.status != 200 {
		t.Fatalf("miss: %d %s", r.status, r.body)
	}
	by := spansByName(exp.GetSpans())
	for _, name := range []string{"request", "cache", "flight", "budget", "upstream"} {
		if len(by[name]) != 1 {
			t.Fatalf("%d spans %q in the miss's trace (all: %v)", len(by[name]), name, by)
		}
	}
	req, cacheSpan, flight, up := by["request"][0], by["cache"][0], by["flight"][0], by["upstream"][0]
	if req.SpanContext.TraceID().String() != traceID || req.Parent.SpanID().String() != parentID {
		t.Errorf("request span in trace %s under %s, want the client's %s under %s",
			req.SpanContext.TraceID(), req.Parent.SpanID(), traceID, parentID)
	}
	for _, c := range []struct {
		child, parent tracetest.SpanStub
	}{{cacheSpan, req}, {flight, req}, {by["budget"][0], flight}, {up, flight}} {
		if c.child.Parent.SpanID() != c.parent.SpanContext.SpanID() || c.child.SpanContext.TraceID().String() != traceID {
			t.Errorf("span %q is not a child of %q in the client's trace", c.child.Name, c.parent.Name)
		}
	}
	if got := attr(up, "account").AsString(); got != "default" {
		t.Errorf("upstream span account %q", got)
	}
	if got := attr(up, "http.response.status_code").AsInt64(); got != 200 {
		t.Errorf("upstream span status %d", got)
	}
	if got := attr(cacheSpan, "cache.state").AsString(); got != "miss" {
		t.Errorf("cache span state %q on a miss", got)
	}
	tps.mu.Lock()
	sent := tps.seen[len(tps.seen)-1]
	tps.mu.Unlock()
	if want := "00-" + traceID + "-" + up.SpanContext.SpanID().String() + "-01"; sent != want {
		t.Errorf("the upstream got traceparent %q, want %q", sent, want)
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if bytes.Contains([]byte(kv.Value.String()), []byte("sim-demo")) || bytes.Contains([]byte(kv.Value.String()), []byte("5D1A9C7E")) {
				t.Errorf("span %q attribute %s holds a credential", s.Name, kv.Key)
			}
		}
	}

	exp.Reset()
	if r := e.get(target); r.status != 200 {
		t.Fatalf("hit: %d", r.status)
	}
	by = spansByName(exp.GetSpans())
	if len(by["request"]) != 1 || len(by["cache"]) != 1 || len(exp.GetSpans()) != 2 {
		t.Errorf("a hit made spans %v, want request and cache", by)
	}
	if got := attr(by["cache"][0], "cache.state").AsString(); got != "fresh" {
		t.Errorf("cache span state %q on a hit", got)
	}
}

// TestTracingToOTLPReceiver: the binary's provider (NewTracerProvider)
// sends the spans to an OTLP/HTTP receiver, with the service name.
func TestTracingToOTLPReceiver(t *testing.T) {
	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		got = append(got, &req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(b)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	h := newHarness(t)
	tp, err := tracing.NewTracerProvider(config.Tracing{OTLPEndpoint: "http://" + ln.Addr().String(), SampleRatio: 1, ServiceName: "edge-under-test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := h.sibling()
	e.startNode(NodeOptions{Options: node.Options{Tracer: tp}})
	if r := e.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=6"); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if err := tp.Shutdown(context.Background()); err != nil { // flushes the batch
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	names := map[string]bool{}
	service := ""
	for _, req := range got {
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names[s.GetName()] = true
				}
			}
		}
	}
	if service != "edge-under-test" || !names["request"] || !names["upstream"] || !names["flight"] {
		t.Errorf("the receiver got service %q, spans %v", service, names)
	}
}

// discardExporter drops spans: the cost measured is the edge's and the
// SDK's, not an exporter's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkHitTraced is BenchmarkHit with tracing on, sampling every
// request (ratio 1) or one in a hundred (0.01), spans batched to an
// exporter that drops them. BenchmarkHit is the same hit with tracing off.
func BenchmarkHitTraced(b *testing.B) {
	for _, ratio := range []float64{1, 0.01} {
		b.Run(fmt.Sprintf("ratio=%v", ratio), func(b *testing.B) {
			h := newHarness(b)
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
			defer tp.Shutdown(context.Background())
			e := h.sibling()
			e.startNode(NodeOptions{Options: node.Options{Tracer: tp}})
			target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
			if r := e.get(target); r.status != 200 {
				b.Fatalf("warm: %d %s", r.status, r.body)
			}
			parallelHits(b, e.p, target)
		})
	}
}

// TestTracingFleetTierCalls: in fleet mode a miss's flight holds the
// shared tier's calls (a get, the fetch lock) as spans.
func TestTracingFleetTierCalls(t *testing.T) {
	rdb := startRedis(t)
	h, _ := newFleet(t, rdb, 1, withBlockPagesOff)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	e := h.sibling()
	e.startNode(NodeOptions{Options: node.Options{Tracer: tp}})
	if r := e.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=9"); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	by := spansByName(exp.GetSpans())
	flight := by["flight"]
	if len(flight) != 1 || len(by["shared.get"]) != 1 || len(by["shared.lock"]) != 1 {
		t.Fatalf("spans %v, want a flight with shared.get and shared.lock", by)
	}
	for _, name := range []string{"shared.get", "shared.lock", "upstream"} {
		if by[name][0].Parent.SpanID() != flight[0].SpanContext.SpanID() {
			t.Errorf("%s is not a child of the flight", name)
		}
	}
}
