package stream

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/internal/testkit"
	"explorer-edge/tcpio"
)

// BenchmarkPublish: one event to 1,000 subscribers of its chain, each
// waiting for it as an idle stream waits (its goroutine parked on its
// channel). The time is Publish's alone: encoding, the history, the
// hand-overs and the wake-ups; the subscribers' work is outside it.
func BenchmarkPublish(b *testing.B) {
	const subscribers = 1000
	h := New(Options{Chains: []string{"ETH"}, MaxSubscribers: subscribers, MaxPerIP: subscribers, Heartbeat: time.Hour})
	defer h.Close()
	var got sync.WaitGroup
	cs := []*chain{h.chains["ETH"]}
	for i := range subscribers {
		s, _, r := h.subscribe(cs, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), nil)
		if r != nil {
			b.Fatal(r.err)
		}
		h.begin()
		go func() {
			defer h.wg.Done()
			for f := range s.ch {
				h.release(f)
				got.Done()
			}
		}()
		defer h.leave(s)
	}
	ev := headEvent("ETH", 19_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		got.Add(subscribers)
		ev.Height++ // a head that repeats is not published
		h.Publish(ev)
		b.StopTimer()
		got.Wait()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/subscribers, "ns/subscriber")
	for _, s := range cs[0].subs {
		close(s.ch) // ends the readers; leave takes them out
	}
}

// BenchmarkFanOut: one event from Publish to its read by every one of
// 1,000 streams over loopback TCP (each a reader goroutine of this
// process, so the 2 cores are shared with the clients).
func BenchmarkFanOut(b *testing.B) {
	const streams = 1000
	h, addr, stop := serve(b, Options{Chains: []string{"ETH"}, MaxSubscribers: streams, MaxPerIP: streams, Heartbeat: time.Hour}, nil, nil, nil)
	defer stop()
	var got sync.WaitGroup
	var conns []net.Conn
	for range streams {
		c := dialStream(b, addr)
		conns = append(conns, c)
		go func() {
			r := bufio.NewReaderSize(c, 512)
			for {
				l, err := r.ReadSlice('\n')
				if err != nil {
					return
				}
				if string(l) == "event: head\n" {
					got.Done()
				}
			}
		}()
	}
	testkit.WaitFor(b, "all streams subscribed", func() bool { return h.chains["ETH"].listeners.Load() == streams })
	ev := headEvent("ETH", 19_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		got.Add(streams)
		ev.Height++
		h.Publish(ev)
		got.Wait()
	}
	b.StopTimer()
	for _, c := range conns {
		c.Close()
	}
}

// TestIdleMemory measures what an idle stream holds: the Go heap in use
// and the goroutine stacks (runtime.MemStats HeapAlloc + StackInuse,
// after two GCs) with 1,000 streams open over loopback, less before, per
// stream. Both ends are in this process; a client is a bare TCP
// connection that sent its request and read the response's headers (a
// few hundred bytes of the figure). Servers: fasthttp's defaults; the
// edge's public server (tcpio.Listener, 1 KB write buffer, 8 KB read
// buffer for server.max_header_bytes), without and with KeptConns; and,
// for comparison, a bare SetBodyStreamWriter handler on fasthttp's
// defaults (what the hub would cost without Hijack).
func TestIdleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	edge := func(s *fasthttp.Server) { s.ReadBufferSize, s.WriteBufferSize = 8<<10, tcpio.WriteChunk }
	for _, tc := range []struct {
		name  string
		tweak func(*fasthttp.Server)
		wrap  func(net.Listener) net.Listener
		limit bool // held to the goal of 16 KB
	}{
		{"fasthttp-defaults", nil, nil, true},
		// fasthttp keeps the request's 8 KB read buffer for the stream's
		// life; KeptConns is the way under 16 KB.
		{"edge-public", edge, tcpio.Listener, false},
		{"edge-public-kept", func(s *fasthttp.Server) { edge(s); s.KeepHijackedConns = true }, tcpio.Listener, true},
		{"body-stream-writer", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			per := idleBytes(t, tc.name == "body-stream-writer", tc.tweak, tc.wrap)
			t.Logf("%s: %.0f bytes per idle stream", tc.name, per)
			if tc.limit && !testkit.Race && per > 16<<10 {
				t.Errorf("%.0f bytes per idle stream, want under 16 KB", per)
			}
		})
	}
}

func idleBytes(t *testing.T, bodyStream bool, tweak func(*fasthttp.Server), wrap func(net.Listener) net.Listener) float64 {
	const streams, warm = 1000, 50
	srv := &fasthttp.Server{}
	if tweak != nil {
		tweak(srv)
	}
	opt := Options{Chains: []string{"ETH"}, MaxSubscribers: streams + warm, MaxPerIP: streams + warm, Heartbeat: time.Hour, KeptConns: srv.KeepHijackedConns}
	var handler fasthttp.RequestHandler
	var bare atomic.Int32 // body-stream-writer streams open
	end := make(chan struct{})
	if bodyStream {
		handler = func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				w.WriteString(": hb\n\n")
				w.Flush()
				bare.Add(1)
				<-end
			})
		}
	}
	h, addr, stop := serve(t, opt, handler, tweak, wrap)
	defer stop()
	defer close(end) // before stop: the server's Shutdown waits for these
	listening := func() int {
		if bodyStream {
			return int(bare.Load())
		}
		return int(h.chains["ETH"].listeners.Load())
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(n int) {
		for range n {
			conns = append(conns, dialStream(t, addr))
		}
		testkit.WaitFor(t, "streams open", func() bool { return listening() == len(conns) })
	}
	open(warm) // pools, the server's workers
	var before, after runtime.MemStats
	gc := func() { runtime.GC(); runtime.GC() } // the second empties sync.Pools' victim caches
	gc()
	runtime.ReadMemStats(&before)
	open(streams)
	gc()
	runtime.ReadMemStats(&after)
	used := func(m *runtime.MemStats) float64 { return float64(m.HeapAlloc + m.StackInuse) }
	t.Logf("heap %.0f, stacks %.0f bytes per stream", float64(after.HeapAlloc-before.HeapAlloc)/streams, float64(after.StackInuse-before.StackInuse)/streams)
	return (used(&after) - used(&before)) / streams
}

// serve is start without the metrics and the test's cleanup, for
// benchmarks and measurements; handler, if not nil, serves instead of the
// hub's.
func serve(tb testing.TB, opt Options, handler fasthttp.RequestHandler, tweak func(*fasthttp.Server), wrap func(net.Listener) net.Listener) (*Hub, string, func()) {
	h := New(opt)
	if handler == nil {
		handler = h.Handler
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := &fasthttp.Server{Handler: handler, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	if tweak != nil {
		tweak(srv)
	}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	return h, addr, func() {
		h.Close()
		srv.Shutdown()
		<-served
	}
}

// dialStream opens a stream of ETH on a bare connection and reads the
// response's headers.
func dialStream(tb testing.TB, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /edge/v1/events?chains=ETH HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		tb.Fatal(err)
	}
	var buf [512]byte
	var got []byte
	for !bytes.Contains(got, []byte("\r\n\r\n")) {
		n, err := c.Read(buf[:])
		if err != nil {
			tb.Fatalf("stream headers: %v (%q)", err, got)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		tb.Fatalf("stream: %q", got)
	}
	return c
}
