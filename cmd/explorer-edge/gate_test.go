package main

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// heldSim is explorer-sim (auth on, demo account) behind a gate: calls the
// test's hold selects wait until release, or until the edge gives up on
// them. Tests that need calls in flight use it rather than a latency
// fault, whose window a busy machine can miss.
type heldSim struct {
	*sim.Server
	url     string
	arrived atomic.Int64
	open    chan struct{}
	once    sync.Once
	hold    atomic.Pointer[func(*http.Request) bool]
}

func startHeldSim(t testing.TB) *heldSim {
	t.Helper()
	h := &heldSim{Server: sim.New(sim.Config{Auth: true, Credentials: sim.DemoCredentials()}), open: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := h.hold.Load(); f != nil && (*f)(r) {
			h.arrived.Add(1)
			select {
			case <-h.open:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { h.release(); h.Close(); hs.Close() })
	h.url = "http://" + ln.Addr().String()
	return h
}

// holdWhere starts holding the calls match selects.
func (h *heldSim) holdWhere(match func(*http.Request) bool) { h.hold.Store(&match) }

func (h *heldSim) release() { h.once.Do(func() { close(h.open) }) }

func (h *heldSim) waitArrived(t testing.TB, n int64) {
	t.Helper()
	testkit.WaitFor(t, "calls held at the upstream", func() bool { return h.arrived.Load() >= n })
}
