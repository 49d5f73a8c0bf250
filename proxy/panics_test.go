package proxy

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
)

// TestTracedRequestInEveryCacheState: with tracing on, a client's sampled
// traceparent on a key in each cache state is answered, and the cache span
// names the state. On 6858c2c the expired state (past
// stale_while_revalidate, within stale_if_error) had no name in the
// tracing code's table: index out of range, and the process ended.
func TestTracedRequestInEveryCacheState(t *testing.T) {
	h := newHarness(t)
	e, exp := tracedEdge(t, h)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	// A block list is fresh 1 s, stale-while-revalidate 1 s more, and
	// usable on error for 10 min.
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "miss"},
		{0, "fresh"},
		{5 * time.Second, "expired"}, // refetched: fresh again from here
		{1500 * time.Millisecond, "stale"},
	} {
		e.clock.Advance(step.advance)
		exp.Reset()
		r := e.get(target, "traceparent", tp)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", step.want, r.status, r.body)
		}
		var got []string
		for _, s := range exp.GetSpans() {
			if s.Name == "cache" {
				got = append(got, attr(s, "cache.state").AsString())
			}
		}
		if len(got) != 1 || got[0] != step.want {
			t.Errorf("cache span states %q, want [%s]", got, step.want)
		}
	}
}

// TestCacheStateNames: every state has its own name (the tracing
// attribute, the inspect output).
func TestCacheStateNames(t *testing.T) {
	seen := map[string]bool{}
	for s := cache.Missing; s <= cache.Expired; s++ {
		n := s.String()
		if seen[n] || strings.HasPrefix(n, "state(") {
			t.Errorf("state %d named %q", s, n)
		}
		seen[n] = true
	}
}

// panickingTier is a shared tier that holds nothing and whose Get panics
// while armed.
type panickingTier struct{ armed, setArmed *atomic.Bool }

func (panickingTier) GetMany(keys []string, _ time.Time) []*cache.Entry {
	return make([]*cache.Entry, len(keys))
}
func (p panickingTier) Set(*cache.Entry, time.Time) {
	if p.setArmed != nil && p.setArmed.CompareAndSwap(true, false) {
		panic("tier set panics on purpose")
	}
}

func (p panickingTier) Get(key string, now time.Time) *cache.Entry {
	if p.armed.CompareAndSwap(true, false) {
		panic("tier panics on purpose")
	}
	return nil
}

func (p panickingTier) Lock(string, func() time.Time) (func(), *cache.Entry) {
	return func() {}, nil
}

// TestPanicsAreRecovered: a panic in the public handler, in a flight's
// fetch (another goroutine, where singleflight would re-raise it beyond
// any recover) and in the admin handler is answered with a 500 envelope
// 50026, counted by where, logged once with its stack, and the edge goes
// on serving. The panics are made on purpose by the edge's own
// collaborators: a clock (read by the request path and the purge API) and
// a shared tier that panic once when armed.
func TestPanicsAreRecovered(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	var clockArmed, tierArmed, setArmed atomic.Bool
	h.startWith(func(o *Options) func() {
		now := o.Now
		o.Now = func() time.Time {
			if clockArmed.CompareAndSwap(true, false) {
				panic("clock panics on purpose")
			}
			return now()
		}
		o.Tier = panickingTier{armed: &tierArmed, setArmed: &setArmed}
		return func() {}
	})
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	panics := func(where string) float64 { return testutil.ToFloat64(h.m.Panics.WithLabelValues(where)) }
	isPanicAnswer := func(what string, r resp) {
		t.Helper()
		if r.status != 500 || r.code() != "50026" || r.header["Cache-Control"] != "no-store" {
			t.Errorf("%s: %d %s (Cache-Control %q), want 500 with code 50026, no-store", what, r.status, r.body, r.header["Cache-Control"])
		}
	}

	clockArmed.Store(true)
	isPanicAnswer("public handler", h.get(target))
	if r := h.get(target); r.status != 200 || r.code() != "0" {
		t.Fatalf("after the handler's panic: %d %s\n%s", r.status, r.body, logs.String())
	}

	tierArmed.Store(true)
	isPanicAnswer("flight", h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"))
	if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"); r.status != 200 {
		t.Fatalf("after the flight's panic: %d %s", r.status, r.body)
	}

	// A batch's send (a goroutine of its own): its waiters are answered.
	hashes := h.sim.CrossHashes("TRADE_ZONE", 2)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hashes[0]
	setArmed.Store(true)
	isPanicAnswer("batch send", h.get(multi))
	if r := h.get(multi); r.status != 200 {
		t.Fatalf("after the batch's panic: %d %s", r.status, r.body)
	}

	clockArmed.Store(true)
	isPanicAnswer("admin handler", h.purgeAs("Bearer "+testPurgeToken, `{"all":true}`))
	if r := h.purgeAs("Bearer "+testPurgeToken, `{"all":true}`); r.status != 200 {
		t.Fatalf("after the admin handler's panic: %d %s", r.status, r.body)
	}

	// The same panic again: counted each time, logged once an interval.
	for range 5 {
		clockArmed.Store(true)
		isPanicAnswer("public handler again", h.get(target))
	}
	for where, want := range map[string]float64{"public": 6, "background": 2, "admin": 1} {
		if got := panics(where); got != want {
			t.Errorf("panics_total{where=%q} = %v, want %v", where, got, want)
		}
	}
	lines := logs.Lines(t, "panic recovered")
	if len(lines) != 4 {
		t.Fatalf("%d lines \"panic recovered\", want 4 (one per place and value, the repeats sampled): %v", len(lines), lines)
	}
	for _, l := range lines {
		stack, _ := l["stack"].(string)
		if l["level"] != "ERROR" || !strings.Contains(stack, "panics_test.go") || !strings.Contains(l["panic"].(string), "on purpose") {
			t.Errorf("panic line without its level, value or stack: %v", l)
		}
	}
}
