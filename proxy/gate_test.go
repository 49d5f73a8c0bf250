package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// bigUpstream answers transaction-list itself, with an envelope of about
// size bytes, in front of explorer-sim for the other routes. While hold is
// set its answers wait for the test to close gate; each held call says so
// on arrived first.
type bigUpstream struct {
	body      []byte
	hold      atomic.Bool
	gate      chan struct{}
	arrived   chan struct{}
	closeGate func()
}

const bigPath = "/api/v5/chainx/block/transaction-list"

func newBigUpstream(size int) *bigUpstream {
	var rows bytes.Buffer
	for i := 0; rows.Len() < size; i++ {
		fmt.Fprintf(&rows, `{"txid":"0x%064x","height":"1000","from":"0x%040x","to":"0x%040x","amount":"1.5","state":"success"},`, i, i, i+1)
	}
	b := &bigUpstream{body: rows.Bytes(), gate: make(chan struct{}), arrived: make(chan struct{}, 64)}
	b.closeGate = sync.OnceFunc(func() { close(b.gate) })
	return b
}

func (b *bigUpstream) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != bigPath {
			next.ServeHTTP(w, r)
			return
		}
		if b.hold.Load() {
			b.arrived <- struct{}{}
			select {
			case <-b.gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"code":"0","msg":"","data":[{"page":"1","limit":"100","totalPage":"1","asked":%q,"transactionList":[`, r.URL.RequestURI())
		w.Write(b.body)
		w.Write([]byte(`{"txid":"0x0","height":"1000","state":"success"}]}]}`))
	})
}

// waitArrived returns once a held call reached the upstream.
func (b *bigUpstream) waitArrived(t testing.TB) {
	t.Helper()
	select {
	case <-b.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no held call reached the upstream in 10 s")
	}
}

func bigTarget(height int) string {
	return fmt.Sprintf("%s?chainShortName=CHAINX&limit=100&height=%d", bigPath, 2_000_000+height)
}

func smallTarget(page int) string {
	return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5&page=%d", page)
}

// timedGet is get with a timeout that is an error, not a failure, and the
// time the answer took.
func timedGet(h *harness, target string, timeout time.Duration) (resp, time.Duration, error) {
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + h.addr + target)
	start := time.Now()
	if err := h.hc.DoTimeout(req, res, timeout); err != nil {
		return resp{}, time.Since(start), err
	}
	took := time.Since(start)
	r := resp{status: res.StatusCode(), header: map[string]string{}, body: bytes.Clone(res.Body())}
	for k, v := range res.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r, took, nil
}

// fillWaiters counts the goroutines of a fetch waiting for room for its
// answer: blocked in a semaphore's Acquire under Proxy.fill. Goroutine
// stacks are the one view of it the gate before the lanes (6858c2c) and
// after share.
func fillWaiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "semaphore.(*Weighted).Acquire") && strings.Contains(g, "proxy.(*Proxy).fill") {
			count++
		}
	}
	return count
}

func p99(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(math.Ceil(0.99*float64(len(s))))-1]
}

// gateHarness: an edge whose bytes in flight are 1 MiB (cache.max_bytes
// 8 MiB, upstream.max_response_bytes 1 MiB), transaction-list answers of
// 900 KB (one fetch at a time), block-list answers of a few KB from
// explorer-sim after 50 ms, and transaction-list's weight learned.
func gateHarness(t testing.TB, budgetWait time.Duration) (*harness, *bigUpstream) {
	big := newBigUpstream(900_000)
	h := newHarnessWrapped(t, big.wrap, func(c *config.Config, _ *sim.Config) {
		c.Cache.MaxBytes = 8 << 20
		c.Upstream.MaxResponseBytes = 1 << 20
		c.Upstream.BudgetWait = budgetWait
	})
	t.Cleanup(big.closeGate) // before the servers close: registered after them
	// The upstream's latency: a miss's time is the upstream's, not this
	// shared machine's scheduling.
	h.sim.SetFaults(sim.Faults{Route: "block-list", Latency: 50 * time.Millisecond})
	if r := h.get(bigTarget(0)); r.status != 200 || r.code() != "0" {
		t.Fatalf("large answer: %d %.200s", r.status, r.body)
	}
	return h, big
}

// TestGateSmallMissNotBehindLarge: while a route of
// 900 KB answers fills the bytes in flight and more of its misses queue,
// every miss of another route's small answers is answered while the large
// ones are still held at the upstream: none waits behind them. It waited
// in the same queue, behind every large miss: 7.75 s behind a dozen
// 7.5 MB ones, here until the test lets them go. The proof is the order
// (answered before the large misses are let go), not a latency: the bound
// below only ends a run that would otherwise wait for ever. How long a
// small miss takes beside large ones is BenchmarkGateSmallBesideLarge's.
func TestGateSmallMissNotBehindLarge(t *testing.T) {
	h, big := gateHarness(t, time.Minute) // the large misses stay queued
	const n = 20

	big.hold.Store(true)
	const large = 4 // one fetching, three queued
	var wg sync.WaitGroup
	statuses := make(chan int, large)
	for i := range large {
		wg.Go(func() {
			r, _, err := timedGet(h, bigTarget(1+i), time.Minute)
			if err != nil {
				t.Errorf("large miss: %v", err)
				return
			}
			statuses <- r.status
		})
	}
	defer wg.Wait()
	defer big.closeGate()
	big.waitArrived(t)
	deadline := time.Now().Add(10 * time.Second)
	for fillWaiters() < large-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d large misses queued after 10 s, want %d", fillWaiters(), large-1)
		}
		runtime.Gosched()
	}

	for i := range n {
		r, _, err := timedGet(h, smallTarget(100+i), time.Minute)
		if err != nil {
			t.Fatalf("small miss %d had no answer while the large ones were held: %v", i, err)
		}
		if r.status != 200 {
			t.Fatalf("small miss: %d %.200s", r.status, r.body)
		}
		if len(statuses) > 0 || fillWaiters() < large-1 {
			t.Fatalf("the large misses moved while the small ones were asked (%d answered, %d queued): the test proves nothing", len(statuses), fillWaiters())
		}
	}

	big.closeGate()
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Fatalf("a large miss answered %d once let go", s)
		}
	}
}

// BenchmarkGateSmallBesideLarge measures what TestGateSmallMissNotBehindLarge
// proves by order: a small miss's time alone, and beside four large misses
// held at the upstream (one fetching, three queued for room). Reported as
// p50 and p99 per sub-benchmark; compare the two in one run:
//
//	go test -run '^$' -bench BenchmarkGateSmallBesideLarge -count 5 ./proxy
func BenchmarkGateSmallBesideLarge(b *testing.B) {
	for _, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-large"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			h, big := gateHarness(b, time.Minute)
			if beside {
				big.hold.Store(true)
				var wg sync.WaitGroup
				defer wg.Wait()
				defer big.closeGate()
				for i := range 4 {
					wg.Go(func() { timedGet(h, bigTarget(1+i), time.Minute) })
				}
				big.waitArrived(b)
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				r, d, err := timedGet(h, smallTarget(1+i%2000), time.Minute)
				if err != nil || r.status != 200 {
					b.Fatalf("small miss: %v %d", err, r.status)
				}
				took = append(took, d)
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(p99(took).Microseconds()), "p99-us")
		})
	}
}

// TestGateWaitBoundedByBudgetWait: a miss that finds no
// room for its answer waits upstream.budget_wait, then is refused like a
// miss the budget refused (503, 50001, Retry-After), counted in
// upstream_throttled_total{source="bytes"}; one with a stale copy does not
// wait, the copy stands in. Both waited without end.
func TestGateWaitBoundedByBudgetWait(t *testing.T) {
	const wait = 300 * time.Millisecond
	h, big := gateHarness(t, wait)
	big.hold.Store(true)
	held := make(chan int, 1)
	go func() {
		r, _, err := timedGet(h, bigTarget(1), time.Minute)
		if err != nil {
			t.Errorf("held miss: %v", err)
		}
		held <- r.status
	}()
	big.waitArrived(t)

	r, took, err := timedGet(h, bigTarget(2), 5*time.Second)
	if errors.Is(err, fasthttp.ErrTimeout) {
		t.Fatalf("a miss waiting for room had no answer in %s (budget_wait %s)", took, wait)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 503 || r.code() != "50001" || r.header["Retry-After"] == "" {
		t.Fatalf("got %d code %s Retry-After %q: %.200s; want 503, 50001, a Retry-After", r.status, r.code(), r.header["Retry-After"], r.body)
	}
	if took < wait {
		t.Fatalf("refused after %s, before budget_wait %s", took, wait)
	}
	if got := testutil.ToFloat64(h.m.Throttled.WithLabelValues("bytes")); got != 1 {
		t.Fatalf("upstream_throttled_total{source=\"bytes\"} = %g, want 1", got)
	}

	// The warm-up answer, past its fresh and stale_while_revalidate times
	// (1 s each: above the final height) and within stale_if_error: it
	// stands in at once.
	h.clock.Advance(3 * time.Second)
	r, took, err = timedGet(h, bigTarget(0), 5*time.Second)
	if err != nil {
		t.Fatalf("a miss with a stale copy had no answer in %s: %v", took, err)
	}
	if r.status != 200 || !strings.Contains(r.header["Cache-Status"], "stale-if-error") || took >= wait {
		t.Fatalf("miss with a stale copy: %d %q after %s; want the copy at once", r.status, r.header["Cache-Status"], took)
	}

	big.closeGate()
	if s := <-held; s != 200 {
		t.Fatalf("the held miss answered %d", s)
	}
}
