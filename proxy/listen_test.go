package proxy

import (
	"bufio"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/server"
	"explorer-edge/sim"
)

// flakyListener fails Accept with the errors in fail, in order, before
// accepting for real; Close stops the failing.
type flakyListener struct {
	net.Listener
	mu      sync.Mutex
	fail    []error
	closed  bool
	waiting atomic.Int32 // Accepts blocked for a real connection
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if len(f.fail) > 0 && !f.closed {
		err := f.fail[0]
		f.fail = f.fail[1:]
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Unlock()
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	return f.Listener.Accept()
}

func (f *flakyListener) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return f.Listener.Close()
}

func (f *flakyListener) failNext(errs ...error) {
	f.mu.Lock()
	f.fail = append(f.fail, errs...)
	f.mu.Unlock()
}

// acceptErr is an accept error as net.TCPListener returns it.
func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

func newFlaky(t *testing.T) *flakyListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &flakyListener{Listener: ln}
}

// getOnNewConn asks target on a new connection to addr.
func getOnNewConn(t *testing.T, addr, target string) int {
	t.Helper()
	res := rawExchange(t, addr, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1)[0]
	return res.StatusCode
}

// An accept that fails for want of descriptors (or of buffers, or because
// the peer reset first) is retried after a backoff, counted and logged
// once per interval; fasthttp alone returns from Serve on the first, and
// the edge exited with it.
func TestListenerSurvivesAcceptErrors(t *testing.T) {
	bursts := []error{acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED),
		acceptErr(syscall.ENOBUFS), acceptErr(syscall.EMFILE)}

	// What the edge met before: fasthttp's Serve gives up.
	bare := newFlaky(t)
	defer bare.Close()
	bare.failNext(acceptErr(syscall.EMFILE))
	if err := (&fasthttp.Server{Handler: func(*fasthttp.RequestCtx) {}, Logger: log.New(io.Discard, "", 0)}).Serve(bare); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("fasthttp's Serve on EMFILE returned %v; this test's premise is gone", err)
	}

	h := newHarness(t)
	logs := withLog(h)
	fl := newFlaky(t)
	fl.failNext(bursts...)
	srv := h.p.NewServer(h.cfg.Server)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(h.p.Listener(fl, server.PublicListener(h.cfg.Server))) }()
	const good = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=2"
	if status := getOnNewConn(t, fl.Addr().String(), good); status != 200 {
		t.Fatalf("after %d failed accepts: %d", len(bursts), status)
	}
	errs := h.m.AcceptErrors.WithLabelValues("public")
	if n := testutil.ToFloat64(errs); n != float64(len(bursts)) {
		t.Errorf("accept_errors_total{listener=public} = %v, want %d", n, len(bursts))
	}
	// A second burst, within the log interval: counted, not logged again.
	// (Accept is waiting for a connection already: the burst meets the
	// accept after the next one.)
	testkit.WaitFor(t, "an accept waiting", func() bool { return fl.waiting.Load() == 1 })
	fl.failNext(bursts...)
	for range 2 {
		if status := getOnNewConn(t, fl.Addr().String(), good); status != 200 {
			t.Fatalf("around the second burst: %d", status)
		}
	}
	if n := testutil.ToFloat64(errs); n != float64(2*len(bursts)) {
		t.Errorf("accept_errors_total{listener=public} = %v, want %d", n, 2*len(bursts))
	}
	if n := logs.Count(t, "accept failing; retrying"); n != 1 {
		t.Errorf("%d warnings for %d failed accepts within the log interval, want 1", n, 2*len(bursts))
	}

	// Shutdown closes the listener; Serve returns at once even while
	// accept is failing and backing off.
	forever := make([]error, 1000)
	for i := range forever {
		forever[i] = acceptErr(syscall.EMFILE)
	}
	// The next connection must meet an Accept already waiting, not one
	// that starts after the failures are set (it would back off for them
	// all first).
	testkit.WaitFor(t, "an accept waiting", func() bool { return fl.waiting.Load() == 1 })
	fl.failNext(forever...)
	if status := getOnNewConn(t, fl.Addr().String(), good); status != 200 {
		t.Fatalf("before the endless failures: %d", status)
	}
	testkit.WaitFor(t, "accept backing off", func() bool { return testutil.ToFloat64(errs) >= float64(2*len(bursts)+3) })
	srv.Shutdown()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve after Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Shutdown while accept was failing")
	}

	// An error that will not pass is returned, not retried forever.
	other := newFlaky(t)
	defer other.Close()
	boom := errors.New("listener broken")
	other.failNext(boom)
	if _, err := h.p.Listener(other, server.ListenerConfig{Name: "admin"}).Accept(); !errors.Is(err, boom) {
		t.Errorf("Accept on a broken listener: %v", err)
	}
}

// capped serves h's edge on a new listener guarded by cfg.
func capped(t *testing.T, h *harness, cfg server.ListenerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.p.NewServer(h.cfg.Server)
	go srv.Serve(h.p.Listener(ln, cfg))
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// holdIdle opens n connections from local (nil: any) that send nothing;
// they close at the end of the test.
func holdIdle(t *testing.T, addr string, local net.Addr, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	var out []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// told reads what a new connection from local is told before it asks.
func told(t *testing.T, addr string, local net.Addr) (*http.Response, []byte) {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a connection beyond the cap: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	return res, body
}

// server.max_conns and server.max_conns_per_ip: a connection beyond a cap
// is answered with an envelope and closed; a closed connection gives its
// place back; peers in auth.trusted_proxies are not capped per address.
func TestListenerCaps(t *testing.T) {
	const good = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=2"
	h := newHarness(t)
	open := h.m.ConnsOpen.WithLabelValues("public")

	t.Run("max_conns", func(t *testing.T) {
		addr := capped(t, h, server.ListenerConfig{Name: "public", MaxConns: 3, Gather: true})
		idle := holdIdle(t, addr, nil, 3)
		testkit.WaitFor(t, "3 connections open", func() bool { return testutil.ToFloat64(open) == 3 })
		res, body := told(t, addr, nil)
		testkit.CheckEnvelope(t, "the 4th connection", res.StatusCode, body, 503, "50001", "connections")
		if res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Retry-After") != "1" || !res.Close {
			t.Errorf("refusal headers: %v", res.Header)
		}
		if n := testutil.ToFloat64(h.m.ConnsRefused.WithLabelValues("public", "max_conns")); n != 1 {
			t.Errorf("connections_refused_total{public,max_conns} = %v, want 1", n)
		}
		idle[0].Close()
		testkit.WaitFor(t, "a place given back", func() bool { return testutil.ToFloat64(open) == 2 })
		if status := getOnNewConn(t, addr, good); status != 200 {
			t.Errorf("once a connection closed: %d", status)
		}
		for _, c := range idle[1:] {
			c.Close()
		}
		testkit.WaitFor(t, "every place given back", func() bool { return testutil.ToFloat64(open) == 0 })
	})

	t.Run("max_conns_per_ip", func(t *testing.T) {
		addr := capped(t, h, server.ListenerConfig{Name: "public", MaxConns: 100, MaxConnsPerIP: 2, Gather: true})
		holdIdle(t, addr, nil, 2)
		testkit.WaitFor(t, "2 connections open", func() bool { return testutil.ToFloat64(open) == 2 })
		res, body := told(t, addr, nil)
		testkit.CheckEnvelope(t, "a 3rd connection from one address", res.StatusCode, body, 429, "50011", "at most 2")
		// Another address is not held back by the first one's.
		other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
		d := net.Dialer{LocalAddr: other, Timeout: 5 * time.Second}
		if c, err := d.Dial("tcp", addr); err != nil {
			t.Logf("no second loopback address (%v): per-address separation not checked", err)
		} else {
			t.Cleanup(func() { c.Close() })
			holdIdle(t, addr, other, 1)
			testkit.WaitFor(t, "4 connections open", func() bool { return testutil.ToFloat64(open) == 4 })
		}
		if n := testutil.ToFloat64(h.m.ConnsRefused.WithLabelValues("public", "max_conns_per_ip")); n != 1 {
			t.Errorf("connections_refused_total{public,max_conns_per_ip} = %v, want 1", n)
		}
	})

	t.Run("trusted proxies are exempt", func(t *testing.T) {
		h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Auth.TrustedProxies = []string{"127.0.0.1"} })
		addr := capped(t, h, server.ListenerConfig{Name: "public", MaxConns: 100, MaxConnsPerIP: 2, Gather: true})
		holdIdle(t, addr, nil, 4)
		if status := getOnNewConn(t, addr, good); status != 200 {
			t.Errorf("a 5th connection from a trusted proxy: %d", status)
		}
	})
}
