package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// doubledPath is an upstream reached through a base_url that holds the
// API's path already: explorer-sim is asked /api/v5/api/v5/... and answers
// its own 404 "no such path" (with an envelope, code 50000).
func doubledPath(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/api/v5" + r.URL.Path
		r.URL.RawPath = ""
		h.ServeHTTP(w, r)
	})
}

const selfCheckBlocks = "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"

// TestUpstream404IsAnUpstreamFailure: an upstream answering 404 (the path
// the edge asks does not exist there: base_url is wrong) is the edge's
// failure, not the client's 404: 502/50026 to the client, counted under
// upstream outcome not_found (not error_envelope, which no alert reads),
// so that the 5xx ratio and the upstream panels see it. The self-check
// names the base_url, and the pod with nothing cached is not ready.
func TestUpstream404IsAnUpstreamFailure(t *testing.T) {
	h := newHarnessWrapped(t, doubledPath)
	r := h.get(selfCheckBlocks)
	if r.status != 502 || r.code() != "50026" || strings.Contains(string(r.body), "no such path: /api") {
		t.Fatalf("an upstream 404: %d %s, want 502 50026 without the upstream's words", r.status, r.body)
	}
	f := gathered(t, h)
	if n := f.value(t, "explorer_edge_upstream_requests_total", "outcome", "not_found"); n != 1 {
		t.Errorf("upstream_requests_total{outcome=not_found} = %v, want 1", n)
	}
	if n := f.value(t, "explorer_edge_upstream_requests_total", "outcome", "error_envelope"); n != 0 {
		t.Errorf("upstream_requests_total{outcome=error_envelope} = %v, want 0", n)
	}
	if n := f.value(t, "explorer_edge_requests_total", "code", "50026"); n != 1 {
		t.Errorf("requests_total{code=50026} = %v, want 1", n)
	}

	err := h.p.SelfCheck(context.Background())
	if err == nil || !strings.Contains(err.Error(), "account default: the upstream answered 404, no such path: upstream.base_url is wrong") {
		t.Fatalf("self-check: %v", err)
	}
	if ready, why := h.p.Ready(); ready || !strings.Contains(why, "upstream self-check failed") || !strings.Contains(why, "base_url") {
		t.Fatalf("Ready() = %v %q, want not ready naming the base_url", ready, why)
	}
}

// TestSelfCheckSaysWhetherTheUpstreamWorks: the self-check asks the
// cheapest question, once per account, signed; refused credentials make a
// pod with nothing cached not ready, a failing upstream does not (that is
// the breaker's to judge); the accounts that failed are asked again at a
// low rate until they answer, so a fixed configuration (here a reload of
// the credentials) makes the pod ready without a restart.
func TestSelfCheckSaysWhetherTheUpstreamWorks(t *testing.T) {
	h := newHarness(t)
	before := h.upstreamCalls()
	if err := h.p.SelfCheck(context.Background()); err != nil {
		t.Fatalf("a working upstream: %v", err)
	}
	// The question, and once the height reading (TestSelfCheckLearnsTheHeightReading).
	if n := h.upstreamCalls() - before; n != 2 {
		t.Fatalf("the self-check made %d upstream calls, want 2", n)
	}
	if got := h.rec.all(); !strings.HasSuffix(got[len(got)-2], "/block/block-list?chainShortName=CHAINX&limit=1") {
		t.Fatalf("the self-check asked %s", got[len(got)-2])
	}
	if ready, why := h.p.Ready(); !ready || why != "ok" {
		t.Fatalf("Ready() = %v %q", ready, why)
	}

	wrong := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Upstream.SecretKey = "00000000000000000000000000000000" })
	err := wrong.p.SelfCheck(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("wrong credentials: %v", err)
	}
	if ready, why := wrong.p.Ready(); ready || !strings.Contains(why, "refused the credentials") {
		t.Fatalf("wrong credentials: Ready() = %v %q", ready, why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); wrong.p.RetrySelfCheck(ctx, 20*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	right := wrong.cfg
	right.Upstream.SecretKey = sim.DemoSecretKey
	if err := wrong.p.Reload(right); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the retried self-check to pass", func() bool {
		ready, why := wrong.p.Ready()
		return ready && why == "ok"
	})
	select {
	case <-done: // every account answers: nothing left to retry
	case <-time.After(5 * time.Second):
		t.Fatal("RetrySelfCheck goes on after every account answered")
	}

	// An upstream failing (5xx) is no configuration mistake: ready, said.
	down := newHarnessWrapped(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
	})
	if err := down.p.SelfCheck(context.Background()); err == nil {
		t.Fatal("a failing upstream passed the self-check")
	}
	if ready, why := down.p.Ready(); !ready || !strings.HasPrefix(why, "ok; upstream self-check failed: account default: the upstream failed") {
		t.Fatalf("failing upstream: Ready() = %v %q", ready, why)
	}
	// A client's good answer clears it as well.
	var refuse atomic.Bool // the upstream says 404 while set: base_url wrong
	down2 := newHarnessWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if refuse.Load() {
				w.WriteHeader(404)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	refuse.Store(true)
	if err := down2.p.SelfCheck(context.Background()); err == nil {
		t.Fatal("an upstream answering 404 passed the self-check")
	}
	refuse.Store(false)
	if ready, _ := down2.p.Ready(); ready {
		t.Fatal("a refused self-check with nothing cached is ready")
	}
	if r := down2.get(selfCheckBlocks); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if ready, why := down2.p.Ready(); !ready || why != "ok" {
		t.Fatalf("after a good answer: Ready() = %v %q", ready, why)
	}
}

// TestReloadRefusesTracingByName: the proxy's Reload refuses a key it
// cannot apply by its name, and applies nothing of that configuration.
func TestReloadRefusesTracingByName(t *testing.T) {
	h := newHarness(t)
	cfg := h.cfg
	cfg.Tracing.OTLPEndpoint = "http://127.0.0.1:1"
	cfg.Upstream.SecretKey = "00000000000000000000000000000000"
	err := h.p.Reload(cfg)
	if err == nil || err.Error() != "restart to change tracing.otlp_endpoint" {
		t.Fatalf("Reload: %v, want restart to change tracing.otlp_endpoint", err)
	}
	if r := h.get(selfCheckBlocks); r.status != 200 {
		t.Fatalf("after a refused reload: %d %s", r.status, r.body)
	}
}
