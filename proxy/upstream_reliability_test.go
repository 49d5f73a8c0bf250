package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// The upstream's part of the abuse and fault tests: what an upstream that misbehaves (a
// gzip bomb, dropped connections, a Retry-After of a year, refusals asked
// again and again) may cost the edge. docs/reliability-upstream.md gives
// each test's figure before and after.

// gathered reads the harness's registry as a scrape would.
func gathered(t testing.TB, h *harness) metricFamilies {
	t.Helper()
	mfs, err := h.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	f := metricFamilies{}
	for _, mf := range mfs {
		f[mf.GetName()] = mf
	}
	return f
}

// attemptsSent is the number of upstream attempts the edge counted as sent:
// every outcome of upstream_requests_total but those refused before sending.
func attemptsSent(t testing.TB, h *harness) float64 {
	t.Helper()
	f := gathered(t, h)
	return f.value(t, "explorer_edge_upstream_requests_total") -
		f.value(t, "explorer_edge_upstream_requests_total", "outcome", "breaker_open") -
		f.value(t, "explorer_edge_upstream_requests_total", "outcome", "budget_exhausted")
}

// gzipBomb is an envelope of code "0" whose data array is led by decoded
// bytes of spaces, gzipped: a few tens of KB on the wire.
func gzipBomb(t testing.TB, decoded int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write([]byte(`{"code":"0","msg":"","data":[`))
	spaces := bytes.Repeat([]byte(" "), 1<<20)
	for n := 0; n < decoded; n += len(spaces) {
		zw.Write(spaces)
	}
	zw.Write([]byte(`]}`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestUpstreamGzipBombIsBounded: an upstream answer of tens of KB that
// gzip-decodes to 64 MiB, with max_response_bytes 1 MiB, is 502/50026, is
// never stored (the next ask calls the upstream again) and is never
// inflated in full (the edge allocates far less than the decoded size).
func TestUpstreamGzipBombIsBounded(t *testing.T) {
	const decoded = 64 << 20
	bomb := gzipBomb(t, decoded)
	var calls atomic.Int64
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/block-list") {
				next.ServeHTTP(w, r)
				return
			}
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(bomb)))
			w.Write(bomb)
		})
	}
	h := newHarnessWrapped(t, wrap, func(c *config.Config, _ *sim.Config) {
		c.Upstream.MaxResponseBytes = 1 << 20
		c.Upstream.BreakerFailures = 100
	})
	if len(bomb) >= h.cfg.Upstream.MaxResponseBytes {
		t.Fatalf("the bomb is %d bytes compressed, not under max_response_bytes", len(bomb))
	}
	target := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=1"

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 1; i <= 2; i++ {
		r := h.get(target)
		if r.status != 502 || r.code() != "50026" || r.header["Cache-Control"] != "no-store" {
			t.Errorf("ask %d: got %d %q %.100s, want 502/50026 not stored", i, r.status, r.header["Cache-Control"], r.body)
		}
		if n := calls.Load(); n != int64(i) {
			t.Errorf("ask %d: %d upstream calls so far, want %d (one per ask: stored never, retried never)", i, n, i)
		}
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("two asks of a %d-byte gzip answer decoding to %d MiB allocated %.1f MiB", len(bomb), decoded>>20, float64(alloc)/(1<<20))
	if alloc > decoded/4 {
		t.Errorf("allocated %d MiB for two asks: the answer was inflated beyond the limit", alloc>>20)
	}
	if n := gathered(t, h).value(t, "explorer_edge_upstream_requests_total", "outcome", "too_large"); n != 2 {
		t.Errorf("upstream_requests_total{outcome=too_large} = %v, want 2", n)
	}
}

// countingBudget counts the tokens its budget hands out.
type countingBudget struct {
	upstream.Budget
	taken atomic.Int64
}

func (b *countingBudget) Take(wait time.Duration, background bool) (bool, time.Duration) {
	ok, retry := b.Budget.Take(wait, background)
	if ok {
		b.taken.Add(1)
	}
	return ok, retry
}

// TestUpstreamEveryAttemptTakesAToken: with the upstream dropping half its
// connections, every request that reaches it took a budget token, was
// counted in upstream_requests_total and logged once, and the total stays
// within rate*elapsed + burst. fasthttp's own retry of a dropped call took
// no token and left no trace.
func TestUpstreamEveryAttemptTakesAToken(t *testing.T) {
	const rate, burst, keys, workers = 50, 50, 60, 4
	h := newHarness(t, func(c *config.Config, s *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = rate, burst
		c.Upstream.BudgetWait = 5 * time.Second // misses wait for a token rather than fail
		c.Upstream.Retries = 2
		c.Upstream.BreakerFailures = 1 << 20 // the breaker has its own test
		s.Faults = sim.Faults{Drop: 0.5}
	})
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	budget := &countingBudget{Budget: upstream.NewLocalBudget(rate, burst)}
	h.startWith(func(o *Options) func() { o.Budget = budget; return func() {} })

	head := h.sim.Head("CHAINX")
	targets := make(chan string, keys)
	for i := range keys {
		targets <- fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d&limit=1", head-int64(i))
	}
	close(targets)
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for target := range targets {
				req := fasthttp.AcquireRequest()
				res := fasthttp.AcquireResponse()
				req.SetRequestURI("http://" + h.addr + target)
				status := 0
				if err := h.hc.DoTimeout(req, res, 30*time.Second); err == nil {
					status = res.StatusCode()
				}
				fasthttp.ReleaseRequest(req)
				fasthttp.ReleaseResponse(res)
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	calls := h.upstreamCalls()
	taken := budget.taken.Load()
	sent := attemptsSent(t, h)
	logged := logs.Count(t, "upstream call")
	bound := rate*elapsed.Seconds() + burst
	t.Logf("%d misses in %v (statuses %v): upstream received %d, tokens taken %d, attempts counted %v, logged %d, bound rate*elapsed+burst %.0f (%.2fx)",
		keys, elapsed.Round(time.Millisecond), statuses, calls, taken, sent, logged, bound, float64(calls)/bound)
	if statuses[0] != 0 {
		t.Errorf("%d requests got no answer from the edge", statuses[0])
	}
	if calls != taken {
		t.Errorf("the upstream received %d calls for %d budget tokens (%.2fx)", calls, taken, float64(calls)/float64(taken))
	}
	if float64(calls) != sent {
		t.Errorf("the upstream received %d calls, the edge counted %v attempts", calls, sent)
	}
	if int64(logged) != calls {
		t.Errorf("the upstream received %d calls, the edge logged %d", calls, logged)
	}
	if float64(calls) > bound {
		t.Errorf("the upstream received %d calls in %v, over rate*elapsed+burst = %.0f", calls, elapsed, bound)
	}
}

// retryAfterOnce wraps the sim: while armed, the next API request is
// answered 429 with Retry-After: retryAfter and disarms it.
type retryAfterOnce struct {
	armed atomic.Bool
	value string
}

func (o *retryAfterOnce) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") && o.armed.CompareAndSwap(true, false) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", o.value)
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"code":"50011","msg":"Too Many Requests","data":[]}`))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// throttledSeconds is the gauge of the remaining lock-out.
func throttledSeconds(t testing.TB, h *harness) float64 {
	t.Helper()
	f := gathered(t, h)
	if _, ok := f["explorer_edge_upstream_throttled_seconds"]; !ok {
		t.Errorf("explorer_edge_upstream_throttled_seconds is not exported")
		return -1
	}
	return f.value(t, "explorer_edge_upstream_throttled_seconds")
}

// TestUpstreamRetryAfterIsCapped: an upstream Retry-After of a year locks
// the edge out for at most upstream.max_retry_after; /readyz and a gauge
// show the lock-out, and a reload (SIGHUP) ends it.
func TestUpstreamRetryAfterIsCapped(t *testing.T) {
	const year = "31536000"
	ra := &retryAfterOnce{value: year}
	h := newHarnessWrapped(t, ra.wrap, withBlockPagesOff)
	target := func(i int) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=%d", i)
	}

	ra.armed.Store(true)
	r := h.get(target(1))
	retryAfter, _ := strconv.Atoi(r.header["Retry-After"])
	t.Logf("after a Retry-After of %s s: %d %s, Retry-After %d", year, r.status, r.code(), retryAfter)
	if r.status != 503 || r.code() != "50001" || retryAfter < 1 || retryAfter > 60 {
		t.Errorf("got %d %s with Retry-After %q, want 503/50001 with Retry-After within max_retry_after (60)", r.status, r.code(), r.header["Retry-After"])
	}
	before := h.upstreamCalls()
	if r := h.get(target(2)); r.status != 503 || h.upstreamCalls() != before {
		t.Errorf("during the lock-out: %d and %d upstream calls, want 503 and none", r.status, h.upstreamCalls()-before)
	}
	if ok, why := h.p.Ready(); ok || !strings.Contains(why, "upstream throttled until") {
		t.Errorf("Ready() = %v %q during a lock-out with nothing cached", ok, why)
	}
	if s := throttledSeconds(t, h); s <= 0 || s > 60 {
		t.Errorf("upstream_throttled_seconds = %v during the lock-out, want (0, 60]", s)
	}

	// A reload (what SIGHUP does) ends the lock-out.
	if err := h.p.Reload(h.cfg); err != nil {
		t.Fatal(err)
	}
	if r := h.get(target(3)); r.status != 200 {
		t.Errorf("after reload: %d %.100s, want 200", r.status, r.body)
	}
	if ok, why := h.p.Ready(); !ok || why != "ok" {
		t.Errorf("Ready() = %v %q after reload", ok, why)
	}
	if s := throttledSeconds(t, h); s != 0 {
		t.Errorf("upstream_throttled_seconds = %v after reload, want 0", s)
	}

	// With max_retry_after 1s the lock-out ends by itself within it. With
	// an entry cached the node stays ready, and says why.
	cfg := h.cfg
	cfg.Upstream.MaxRetryAfter = time.Second
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	ra.armed.Store(true)
	if r := h.get(target(4)); r.status != 503 || r.header["Retry-After"] != "1" {
		t.Errorf("with max_retry_after 1s: %d, Retry-After %q, want 503 and 1", r.status, r.header["Retry-After"])
	}
	if ok, why := h.p.Ready(); !ok || !strings.Contains(why, "upstream throttled until") {
		t.Errorf("Ready() = %v %q during a lock-out with entries cached: want ready, saying it", ok, why)
	}
	testkit.WaitFor(t, "the capped lock-out to end", func() bool { _, why := h.p.Ready(); return why == "ok" })
	if r := h.get(target(4)); r.status != 200 {
		t.Errorf("after the capped lock-out: %d %.100s, want 200", r.status, r.body)
	}
}

// simDirect asks explorer-sim directly, signed with the demo account: its
// status and body.
func (h *harness) simDirect(target string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.cfg.Upstream.BaseURL+target, nil)
	ts := signer.Timestamp(time.Now())
	req.Header.Set(signer.HeaderKey, sim.DemoAPIKey)
	req.Header.Set(signer.HeaderPassphrase, sim.DemoPassphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, signer.Sign(sim.DemoSecretKey, ts, "GET", target))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return res.StatusCode, b
}

// TestUpstreamRefusalIsCachedNegative: a question the upstream refuses
// (block-list at a height below its window: 400/50036) costs one upstream
// call however often it is asked within the route's negative time; every
// ask gets the upstream's status and body, and the repeats count as hits.
func TestUpstreamRefusalIsCachedNegative(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=5"
	const asks = 10
	var got []resp
	for range asks {
		got = append(got, h.get(target))
	}
	calls := h.upstreamCalls()
	t.Logf("%d asks of a refused question: %d upstream calls", asks, calls)
	status, body := h.simDirect(target)
	if status != 400 || !bytes.Contains(body, []byte(`"code":"50036"`)) {
		t.Fatalf("the sim answers %s with %d %s; the test wants a refusal", target, status, body)
	}
	if calls != 1 {
		t.Errorf("%d asks of a refused question cost %d upstream calls, want 1", asks, calls)
	}
	for i, r := range got {
		if r.status != status || !bytes.Equal(r.body, body) {
			t.Errorf("ask %d: %d %s, want the upstream's %d %s", i+1, r.status, r.body, status, body)
		}
		if i > 0 && (!strings.HasPrefix(r.header["Cache-Control"], "public, max-age=") || !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit")) {
			t.Errorf("ask %d: Cache-Control %q Cache-Status %q, want a hit of a negative entry", i+1, r.header["Cache-Control"], r.header["Cache-Status"])
		}
	}
	if r := h.get(target, "If-None-Match", "*"); r.status != status || !bytes.Equal(r.body, body) {
		t.Errorf("with If-None-Match: %d %s, want the refusal (conditionals apply to 2xx only)", r.status, r.body)
	}
	f := gathered(t, h)
	if n := f.value(t, "explorer_edge_cache_results_total", "route", "block-list", "result", "hit"); n != asks {
		t.Errorf("cache_results_total{hit} = %v, want %d", n, asks)
	}
	if n := f.value(t, "explorer_edge_requests_total", "route", "block-list", "code", "50036"); n != asks+1 {
		t.Errorf("requests_total{code=50036} = %v, want %d", n, asks+1)
	}

	// Past the negative time the question is asked again.
	h.clock.Advance(route.TTLs(&route.Table[route.BlockList], h.cfg.Cache.TTL).Shortest())
	before := h.upstreamCalls() // the direct ask counted too
	if r := h.get(target); r.status != status || h.upstreamCalls()-before != 1 {
		t.Errorf("past the negative time: %d and %d upstream calls, want %d and 1", r.status, h.upstreamCalls()-before, status)
	}
}

// TestUpstreamFailureEnvelopeIsNeverCached: an envelope that says the
// upstream failed (50026 with 200, a 500) is asked again every time, each
// ask within its retries.
func TestUpstreamFailureEnvelopeIsNeverCached(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults sim.Faults
		status int
	}{
		{"envelope-50026", sim.Faults{Envelope: 1}, 502}, // with 200 from the sim: the edge's own failure
		{"http500", sim.Faults{HTTP500: 1}, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *config.Config, s *sim.Config) {
				c.Upstream.BreakerFailures = 1 << 20
				s.Faults = tc.faults
			})
			target := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=3"
			for i := range 5 {
				before := h.upstreamCalls()
				r := h.get(target)
				n := h.upstreamCalls() - before
				if r.status != tc.status || r.code() != "50026" || r.header["Cache-Control"] != "no-store" {
					t.Errorf("ask %d: %d %s %q, want %d/50026 not stored", i+1, r.status, r.code(), r.header["Cache-Control"], tc.status)
				}
				if n < 1 || n > int64(1+h.cfg.Upstream.Retries) {
					t.Errorf("ask %d cost %d upstream calls, want 1..%d", i+1, n, 1+h.cfg.Upstream.Retries)
				}
			}
		})
	}
}
