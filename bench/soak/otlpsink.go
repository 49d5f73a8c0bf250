package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is the OTLP/HTTP receiver the soak's edge nodes send their spans
// to (tracing.otlp_endpoint, sample_ratio 1: every request is traced, the
// whole run). It takes POST /v1/traces, decodes each export and answers 200
// with an empty body, which the otlptracehttp exporter takes as success. It
// counts the exports, their bytes and spans, and the "cache" spans by their
// cache.state: of all traces, and of the traces the load's clients started
// with a sampled traceparent in the traced phase.
type otlpSink struct {
	url string // base URL, as the edge's tracing.otlp_endpoint
	srv *http.Server

	requests, bytes, spans atomic.Int64
	bad                    atomic.Int64 // exports that were no ExportTraceServiceRequest
	firstBad               atomic.Value // string: why the first one was not

	mu      sync.Mutex
	states  map[string]int64  // cache spans of every trace, by cache.state
	client  map[string]int64  // ... of the traces the clients started
	started map[[16]byte]bool // the trace ids the clients sent
	unknown map[string]int64  // cache.state values none of cacheStates
}

// cacheStates are the states of cache.State's names, in the order printed;
// the traced phase must reach each.
var cacheStates = []string{"miss", "fresh", "stale", "expired"}

// maxExportBytes bounds one export the sink reads: the batcher's 512
// spans are about 150 KB.
const maxExportBytes = 32 << 20

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{
		url:     "http://" + ln.Addr().String(),
		states:  map[string]int64{},
		client:  map[string]int64{},
		started: map[[16]byte]bool{},
		unknown: map[string]int64{},
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// endpoint is the edge's tracing.otlp_endpoint; "" for no sink.
func (s *otlpSink) endpoint() string {
	if s == nil {
		return ""
	}
	return s.url
}

func (s *otlpSink) close() {
	if s != nil {
		s.srv.Close()
	}
}

func (s *otlpSink) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	s.requests.Add(1)
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxExportBytes+1))
	s.bytes.Add(int64(len(raw)))
	if err == nil && len(raw) > maxExportBytes {
		err = fmt.Errorf("export over %d bytes", maxExportBytes)
	}
	if err == nil && r.Header.Get("Content-Encoding") == "gzip" {
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(raw)); err == nil {
			raw, err = io.ReadAll(io.LimitReader(zr, maxExportBytes))
		}
	}
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil {
		s.bad.Add(1)
		s.firstBad.CompareAndSwap(nil, fmt.Sprintf("%s (Content-Type %q)", err, r.Header.Get("Content-Type")))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.count(&req)
	// An empty body: the exporter reads no ExportTraceServiceResponse
	// from it, hence no partial success to report.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// count adds one export's spans.
func (s *otlpSink) count(req *collectortrace.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.spans.Add(1)
				if sp.GetName() != "cache" {
					continue
				}
				state := ""
				for _, kv := range sp.GetAttributes() {
					if kv.GetKey() == "cache.state" {
						state = kv.GetValue().GetStringValue()
					}
				}
				if !knownState(state) {
					s.unknown[state]++
				}
				s.states[state]++
				var id [16]byte
				copy(id[:], sp.GetTraceId())
				if s.started[id] {
					s.client[state]++
				}
			}
		}
	}
}

func knownState(st string) bool {
	for _, k := range cacheStates {
		if st == k {
			return true
		}
	}
	return false
}

// traceHeaders sets a sampled W3C traceparent with random trace and span
// ids on req, and a tracestate on about a third of them (one in ten of
// those over the 512 bytes the edge takes), and notes the trace id as one
// the clients started.
func (s *otlpSink) traceHeaders(req *fasthttp.Request, r *rand.Rand, c *counts) {
	var id [16]byte
	var span [8]byte
	for !nonZero(id[:]) {
		fillRandom(r, id[:])
	}
	for !nonZero(span[:]) {
		fillRandom(r, span[:])
	}
	s.mu.Lock()
	s.started[id] = true
	s.mu.Unlock()
	req.Header.Set("traceparent", "00-"+hex.EncodeToString(id[:])+"-"+hex.EncodeToString(span[:])+"-01")
	c.traced.Add(1)
	if r.Float64() < 0.3 {
		ts := "soak=" + hex.EncodeToString(span[:4]) + ",congo=t61rcWkgMzE"
		if r.Float64() < 0.1 {
			// Four members of 150 characters: 620 bytes, dropped whole.
			ts = "soak=" + hex.EncodeToString(span[:4])
			for i := range 4 {
				ts += fmt.Sprintf(",v%d=%s", i, strings.Repeat("x", 150))
			}
		}
		req.Header.Set("tracestate", ts)
		c.withTraceState.Add(1)
	}
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func nonZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return true
		}
	}
	return false
}

// sinkStats is what the sink saw, read once the edges have stopped (and
// flushed their last batch).
type sinkStats struct {
	requests, bytes, spans, bad int64
	firstBad                    string
	states, client, unknown     map[string]int64
	started                     int
}

func (s *otlpSink) stats() sinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := sinkStats{requests: s.requests.Load(), bytes: s.bytes.Load(), spans: s.spans.Load(), bad: s.bad.Load(),
		states: map[string]int64{}, client: map[string]int64{}, unknown: map[string]int64{}, started: len(s.started)}
	if v, ok := s.firstBad.Load().(string); ok {
		st.firstBad = v
	}
	for k, v := range s.states {
		st.states[k] = v
	}
	for k, v := range s.client {
		st.client[k] = v
	}
	for k, v := range s.unknown {
		st.unknown[k] = v
	}
	return st
}

// byState prints counts of cache spans in cacheStates' order.
func byState(m map[string]int64) string {
	var parts []string
	for _, k := range cacheStates {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
