package proxy

import (
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"explorer-edge/internal/testkit"
)

// upstreamGate holds every API call on its way to explorer-sim until the
// test opens it. Tests of a bound that holds "while the upstream is busy"
// (one refresh for many stale answers, followers joining a flight) use it
// instead of a latency fault: with a delay the bound depended on the
// machine sending every request before the delay ran out, which a busy
// 2-core machine under -race did not.
type upstreamGate struct {
	arrived atomic.Int64
	open    chan struct{}
	once    sync.Once
}

// holdUpstream sets a gate before explorer-sim: every API call from now on
// waits until release. Call `defer g.release()` right after: deferred calls
// run before the harness's cleanups, which may wait for calls in flight.
func (h *harness) holdUpstream() *upstreamGate {
	g := &upstreamGate{open: make(chan struct{})}
	h.rec.gate.Store(g)
	return g
}

// pass counts a call and waits for the gate to open, or for the caller to
// go away (false).
func (g *upstreamGate) pass(req *http.Request) bool {
	g.arrived.Add(1)
	select {
	case <-g.open:
		return true
	case <-req.Context().Done():
		return false
	}
}

// release opens the gate for the held calls and every later one.
func (g *upstreamGate) release() { g.once.Do(func() { close(g.open) }) }

// waitArrived returns once n calls reached the gate.
func (g *upstreamGate) waitArrived(t testing.TB, n int64) {
	t.Helper()
	testkit.WaitFor(t, "upstream calls at the gate", func() bool { return g.arrived.Load() >= n })
}

// waitLoading returns once n requests wait in Proxy.load for a flight's
// answer: the leader's and each follower's, joined to the flight (the
// singleflight group tells no one how many wait, their goroutines do).
func waitLoading(t testing.TB, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	testkit.WaitFor(t, "requests waiting for a flight", func() bool {
		for {
			k := runtime.Stack(buf, true)
			if k < len(buf) {
				return strings.Count(string(buf[:k]), "proxy.(*Proxy).load(") >= n
			}
			buf = make([]byte, 2*len(buf))
		}
	})
}
