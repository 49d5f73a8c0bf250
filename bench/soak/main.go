// Command soak starts explorer-sim and explorer-edge as child processes on
// free loopback ports, drives mixed load through the edge for -duration
// while it cycles the sim's faults, and checks every answer against an
// in-process reference sim with the same seed and frozen chain clock. It
// watches the edge's goroutines and memory, looks for panics in its output,
// prints a summary and exits non-zero on any failure.
//
// Beside it runs the moving chain (moving.go): a second explorer-sim on
// real time and a second explorer-edge with the shipped TTLs and stale
// windows, whose answers are compared with the upstream's as the chain
// moves.
//
//	make soak                                  # go run ./bench/soak -duration 60s
//	go run ./bench/soak -duration 10s -rate 500
//	go run ./bench/soak -moving-cache '{stale_while_revalidate: 30s}'   # must fail: the newest page lags
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
)

type options struct {
	simBin, edgeBin string
	duration        time.Duration // load, after the warm-up pass
	rate            float64       // requests per second, all workers together
	workers         int
	phase           time.Duration // time of each fault phase
	targets         int           // valid targets in the pool (about)
	maxBytes        int64         // the edge's cache.max_bytes
	keep            bool          // keep the temporary directory even on success
	moving          bool          // run the moving-chain pair beside the load
	movingCache     string        // its edge's cache section (YAML flow); "" the shipped defaults
	out             io.Writer
}

func main() {
	o := options{out: os.Stdout}
	flag.StringVar(&o.simBin, "sim", "bin/explorer-sim", "explorer-sim binary")
	flag.StringVar(&o.edgeBin, "edge", "bin/explorer-edge", "explorer-edge binary")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "load time, after a warm-up pass over the targets")
	flag.Float64Var(&o.rate, "rate", 2000, "requests per second (all workers)")
	flag.IntVar(&o.workers, "workers", 32, "concurrent clients, each on a keep-alive connection")
	flag.DurationVar(&o.phase, "phase", 3*time.Second, "time of each fault phase")
	flag.IntVar(&o.targets, "targets", 3000, "distinct valid request targets")
	// 16 MiB: the 3000 targets' answers and per-hash records take about
	// 20 MiB, so the cache is full and evicting for the whole run, and the
	// RSS bound (1.5 x max_bytes + 64 MiB) is tight enough to mean something.
	flag.Int64Var(&o.maxBytes, "max-bytes", 16<<20, "the edge's cache.max_bytes")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, logs) on success too")
	flag.BoolVar(&o.moving, "moving", true, "also compare a second edge's answers with a moving chain's (real time, shipped TTLs)")
	flag.StringVar(&o.movingCache, "moving-cache", "", "the moving edge's cache section as YAML flow, e.g. '{stale_while_revalidate: 30s}' (empty: the shipped defaults)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !res.pass {
		os.Exit(1)
	}
}

// result is what the summary reports.
type result struct {
	pass     bool
	failures []string
	dir      string

	poolValid, poolHot, poolInvalid, poolUp400 int
	warmTime, loadTime                         time.Duration
	warm, load                                 *counts
	upstreamCalls, authFailures                int64
	phasesRun                                  []string
	tl                                         *timeline

	rssPeak, rssBound, rssQ2, rssQ4 float64
	rssStart, cachePeak             float64
	rssStable                       string
	gorBefore, gorAfter, gorPeak    float64
	gorSettle                       time.Duration
	panics                          []string
	edgeAlive                       bool
	wrongs                          []wrongAnswer
	clientErrs                      []string

	mv        *movingStats // nil: no moving chain
	mvTargets int
	mvAlive   bool
}

func (r *result) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// Bounds of the checks (docs/reliability.md, Soak; the summary prints them).
const (
	// goroutineSlack: after the load, with the client's connections
	// closed and the faults cleared, the edge may hold a few goroutines
	// more than at the baseline: the upstream client's idle-connection
	// cleaner, the admin server's worker for the scrape, a batch timer
	// or a finishing background refresh. A leak per request, per failed
	// call or per hung upstream answer is thousands above it after a
	// minute of faults.
	goroutineSlack = 5
	// rssBaseline is the edge's memory beside its cache: the Go runtime,
	// the binary's pages, goroutine stacks, fasthttp buffers, metrics. It
	// is what the edge adds to 1.5 x cache.max_bytes in its own soft
	// memory limit (cache.MemoryLimit). The edge starts at
	// about 13 MiB RSS; the rest is the heap's headroom for what is in
	// flight: upstream bodies, gzip compressors (about 1 MiB each while
	// storing), 32 connections' 40 KiB buffers, up to ~150 goroutines.
	rssBaseline = 64 << 20
	// rssGrowth bounds the last quarter's peak RSS against the second
	// quarter's: after the warm-up every target has been cached once, so
	// the cache holds about the same entries for the rest of the run;
	// growth beyond GC noise is a leak.
	rssGrowth = 1.25
	// goroutineWait bounds how long the goroutines may take to come back.
	goroutineWait = 15 * time.Second
)

// soak is one run.
type soak struct {
	o        options
	pl       *pool
	hc       *fasthttp.HostClient
	edgeAddr string
	ck       *checker
	scr      *scraper
}

func run(ctx context.Context, o options) (res *result, err error) {
	t0 := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.out, "soak +%5.1fs: %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	res = &result{}
	dir, err := os.MkdirTemp("", "explorer-edge-soak-")
	if err != nil {
		return nil, err
	}
	res.dir = dir
	defer func() {
		if err != nil || !res.pass || o.keep {
			fmt.Fprintf(o.out, "soak: configuration and logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()

	ref := newReference()
	pl, err := buildPool(ref, o.targets)
	if err != nil {
		return res, err
	}
	res.poolValid, res.poolHot, res.poolInvalid, res.poolUp400 = len(pl.valid), len(pl.hot), len(pl.invalid), pl.up400
	logf("pool: %d valid targets (%d hot, %d refused by the upstream itself), %d invalid; routes %v",
		len(pl.valid), len(pl.hot), pl.up400, len(pl.invalid), pl.byRoute)

	// explorer-sim, frozen chain.
	var simAddr string
	simProc, err := startOnFreePorts(ctx, 1, func(addrs []string) (*child, string, error) {
		simAddr = addrs[0]
		c, err := startChild("explorer-sim", o.simBin,
			[]string{"-listen", simAddr, "-frozen-at", frozenAt, "-seed", fmt.Sprint(simSeed)},
			filepath.Join(dir, "explorer-sim.log"))
		return c, "http://" + simAddr + "/sim/stats", err
	})
	if err != nil {
		return res, err
	}
	defer simProc.kill()
	sc := &simControl{base: "http://" + simAddr, hc: &http.Client{Timeout: 5 * time.Second}, tl: newTimeline()}

	// explorer-edge.
	var listen, admin string
	edgeProc, err := startOnFreePorts(ctx, 2, func(addrs []string) (*child, string, error) {
		listen, admin = addrs[0], addrs[1]
		cfgPath := filepath.Join(dir, "edge.yaml")
		if err := os.WriteFile(cfgPath, []byte(edgeConfig(listen, admin, "http://"+simAddr, o.maxBytes)), 0o600); err != nil {
			return nil, "", err
		}
		c, err := startChild("explorer-edge", o.edgeBin, []string{"-config", cfgPath}, filepath.Join(dir, "explorer-edge.log"))
		return c, "http://" + admin + "/healthz", err
	})
	if err != nil {
		return res, err
	}
	defer edgeProc.kill()
	logf("explorer-sim on %s, explorer-edge on %s (admin %s), files in %s", simAddr, listen, admin, dir)

	// The moving chain and its edge.
	var mv *moving
	if o.moving {
		mv, err = startMoving(ctx, movingConfig{
			simBin: o.simBin, edgeBin: o.edgeBin, dir: dir, cache: o.movingCache,
			minGap: 300 * time.Millisecond, maxGap: 4 * time.Second, t0: t0,
		})
		if err != nil {
			return res, err
		}
		defer mv.kill()
		cache := "shipped TTLs and stale windows"
		if o.movingCache != "" {
			cache = "cache: " + o.movingCache
		}
		logf("moving chain: explorer-sim on %s (real time), explorer-edge on %s (%s), %d targets", mv.simAddr, mv.edgeAddr, cache, len(mv.targets))
	}

	// The edge dying ends the load at once.
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	go func() {
		select {
		case <-edgeProc.exited:
			cancelRun()
		case <-runCtx.Done():
		}
	}()

	scr := newScraper("http://" + admin + "/metrics")
	scrDone := make(chan struct{})
	scrCtx, stopScr := context.WithCancel(runCtx)
	go func() { defer close(scrDone); scr.run(scrCtx, time.Second) }()
	defer func() { stopScr(); <-scrDone }()

	s := &soak{
		o: o, pl: pl, edgeAddr: listen, scr: scr,
		ck: &checker{t0: t0, tl: sc.tl},
		hc: &fasthttp.HostClient{
			Addr:                      listen,
			MaxConns:                  o.workers,
			MaxIdemponentCallAttempts: 1, // every transport error counts
			ReadTimeout:               15 * time.Second,
			WriteTimeout:              5 * time.Second,
			MaxResponseBodySize:       16 << 20,
			DisablePathNormalizing:    true, // send the targets exactly as written
			NoDefaultUserAgentHeader:  true,
		},
	}
	lim := rate.NewLimiter(rate.Limit(o.rate), o.workers)

	// Warm-up: every valid target once, no faults.
	res.warm = &counts{}
	var next atomic.Int64
	warmStart := time.Now()
	s.drive(runCtx, res.warm, lim, time.Time{}, func(*rand.Rand) *target {
		i := next.Add(1) - 1
		if i >= int64(len(pl.valid)) {
			return nil
		}
		return pl.valid[i]
	})
	res.warmTime = time.Since(warmStart)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted")
	}
	logf("warm-up: %d requests in %.1fs, %d wrong", res.warm.requests.Load(), res.warmTime.Seconds(), res.warm.wrong.Load())

	// Goroutine baseline: the client's connections closed, the count settled.
	s.hc.CloseIdleConnections()
	base, err := scr.settle(runCtx, 3*time.Second)
	if err != nil {
		if !edgeProc.alive() {
			return res, fmt.Errorf("the edge died during the warm-up: %v (output in %s)", edgeProc.waitErr, edgeProc.logPath)
		}
		return res, fmt.Errorf("goroutine baseline: %w", err)
	}
	res.gorBefore = base
	if err := sc.resetStats(runCtx); err != nil {
		return res, err
	}

	// Load, with the faults cycling.
	res.load = &counts{}
	loadStart := time.Now()
	loadEnd := loadStart.Add(o.duration)
	quietAt := loadEnd.Add(-max(o.phase, o.duration/10))
	var cycleErr error
	var cycleWG sync.WaitGroup
	cycleWG.Go(func() { cycleErr = sc.cycle(runCtx, o.phase, quietAt) })
	if mv != nil {
		cycleWG.Go(func() { mv.poll(runCtx, loadEnd) })
	}
	logf("load: %v at %.0f req/s, %d workers, fault phases of %v, quiet from +%.1fs", o.duration, o.rate, o.workers, o.phase, quietAt.Sub(loadStart).Seconds())
	s.drive(runCtx, res.load, lim, loadEnd, s.pickTarget)
	res.loadTime = time.Since(loadStart)
	cycleWG.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted")
	}
	if cycleErr != nil && edgeProc.alive() {
		return res, fmt.Errorf("faults: %w", cycleErr)
	}
	logf("load: %d requests in %.1fs, %d wrong, %d client errors", res.load.requests.Load(), res.loadTime.Seconds(), res.load.wrong.Load(), res.load.clientErrors.Load())
	if mv != nil {
		logf("moving chain: %d requests, %d wrong, %d client errors", mv.stats.requests.Load(), mv.stats.wrong.Load(), mv.stats.errors.Load())
	}

	// After the load: connections closed, faults cleared, goroutines back?
	s.hc.CloseIdleConnections()
	if edgeProc.alive() {
		if err := sc.set(ctx, cleared); err != nil {
			return res, err
		}
		settleStart := time.Now()
		after, err := scr.waitBelow(runCtx, base+goroutineSlack, goroutineWait)
		if err != nil && edgeProc.alive() {
			return res, fmt.Errorf("goroutines after the load: %w", err)
		}
		res.gorAfter, res.gorSettle = after, time.Since(settleStart)
	}
	st, err := sc.stats(ctx)
	if err != nil {
		return res, err
	}
	res.upstreamCalls, res.authFailures = st.RequestsTotal, st.AuthFailures
	res.edgeAlive = edgeProc.alive()
	stopScr()
	<-scrDone
	edgeProc.stop()
	simProc.stop()
	if res.panics, err = scanPanics(edgeProc.logPath); err != nil {
		return res, err
	}
	if mv != nil {
		res.mv, res.mvTargets, res.mvAlive = &mv.stats, len(mv.targets), mv.edge.alive()
		mv.stop()
		mvPanics, err := scanPanics(mv.edge.logPath)
		if err != nil {
			return res, err
		}
		for _, p := range mvPanics {
			res.panics = append(res.panics, "moving edge: "+p)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted")
	}

	if err := scr.writeTSV(filepath.Join(dir, "metrics.tsv"), t0); err != nil {
		return res, err
	}
	s.judge(res, loadStart, o.duration)
	res.phasesRun, res.tl = sc.tl.names, sc.tl
	res.print(o)
	return res, nil
}

// pickTarget draws the next target of the load: about 5% invalid, 30% from
// the hot subset, the rest from all valid targets.
func (s *soak) pickTarget(r *rand.Rand) *target {
	switch x := r.Float64(); {
	case x < 0.05:
		return s.pl.invalid[r.IntN(len(s.pl.invalid))]
	case x < 0.35:
		return s.pl.hot[r.IntN(len(s.pl.hot))]
	}
	return s.pl.valid[r.IntN(len(s.pl.valid))]
}

// drive runs the workers until next returns nil, the deadline (if any)
// passes or ctx ends. The limiter bounds the rate of all workers together.
func (s *soak) drive(ctx context.Context, c *counts, lim *rate.Limiter, deadline time.Time, next func(*rand.Rand) *target) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var wg sync.WaitGroup
	for w := range s.o.workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for {
				if lim.Wait(ctx) != nil {
					return
				}
				t := next(r)
				if t == nil {
					return
				}
				s.one(c, t, r, req, resp)
			}
		})
	}
	wg.Wait()
}

// one sends one request for t, sometimes accepting gzip and sometimes with
// If-None-Match, and checks the answer.
func (s *soak) one(c *counts, t *target, r *rand.Rand, req *fasthttp.Request, resp *fasthttp.Response) {
	req.Reset()
	resp.Reset()
	req.SetRequestURI(t.path)
	req.Header.SetHost(s.edgeAddr)
	var snt sent
	if r.Float64() < 0.4 {
		req.Header.Set(fasthttp.HeaderAcceptEncoding, "gzip")
		snt.gzip = true
		c.withGzip.Add(1)
	}
	if !t.invalid {
		switch x := r.Float64(); {
		case x < 0.02:
			snt.inm, snt.bogus = `"soak-never-an-etag"`, true
		case x < 0.22:
			snt.inm = t.lastETag()
		}
		if snt.inm != "" {
			req.Header.Set(fasthttp.HeaderIfNoneMatch, snt.inm)
			c.withINM.Add(1)
		}
	} else {
		c.invalidSent.Add(1)
	}
	c.requests.Add(1)
	pc := s.ck.tl.current()
	start := time.Now()
	err := s.hc.Do(req, resp)
	end := time.Now()
	if err != nil {
		s.ck.clientError(c, t, err)
		return
	}
	s.ck.check(c, pc, t, snt, resp, start, end)
}

// judge turns the measurements into the verdict.
func (s *soak) judge(res *result, loadStart time.Time, d time.Duration) {
	res.wrongs, res.clientErrs = s.ck.wrongs, s.ck.errs
	if n := res.warm.wrong.Load() + res.load.wrong.Load(); n > 0 {
		res.fail("%d wrong answers", n)
	}
	if n := res.warm.clientErrors.Load() + res.load.clientErrors.Load(); n > 0 {
		res.fail("%d client errors", n)
	}
	if res.load.requests.Load() == 0 {
		res.fail("no load ran")
	}
	samples := s.scr.all()
	res.rssBound = 1.5*float64(s.o.maxBytes) + rssBaseline
	for _, sm := range samples {
		res.rssPeak = max(res.rssPeak, sm.rss)
		res.gorPeak = max(res.gorPeak, sm.goroutines)
		res.cachePeak = max(res.cachePeak, sm.cacheBytes)
	}
	if len(samples) == 0 {
		res.fail("no /metrics sample")
	} else {
		res.rssStart = samples[0].rss
	}
	if res.authFailures > 0 {
		res.fail("explorer-sim refused %d of the edge's signatures", res.authFailures)
	}
	if res.rssPeak > res.rssBound {
		res.fail("peak RSS %s above the bound %s", mib(res.rssPeak), mib(res.rssBound))
	}
	q := d / 4
	for _, sm := range samples {
		switch off := sm.at.Sub(loadStart); {
		case off >= q && off < 2*q:
			res.rssQ2 = max(res.rssQ2, sm.rss)
		case off >= 3*q && off <= d:
			res.rssQ4 = max(res.rssQ4, sm.rss)
		}
	}
	switch {
	case res.rssQ2 == 0 || res.rssQ4 == 0:
		res.rssStable = "n/a (a quarter without samples)"
	case res.rssQ4 > rssGrowth*res.rssQ2:
		res.rssStable = fmt.Sprintf("NO: last quarter max %s > %.2f x second quarter max %s", mib(res.rssQ4), rssGrowth, mib(res.rssQ2))
		res.fail("RSS grew: %s", res.rssStable)
	default:
		res.rssStable = fmt.Sprintf("yes: last quarter max %s <= %.2f x second quarter max %s", mib(res.rssQ4), rssGrowth, mib(res.rssQ2))
	}
	if res.edgeAlive && res.gorAfter > res.gorBefore+goroutineSlack {
		res.fail("goroutines %v after the load, baseline %v + %d", res.gorAfter, res.gorBefore, goroutineSlack)
	}
	if len(res.panics) > 0 {
		res.fail("%d panic / fatal error lines in the edge's output", len(res.panics))
	}
	if !res.edgeAlive {
		res.fail("the edge process died")
	}
	if mv := res.mv; mv != nil {
		switch {
		case mv.requests.Load() == 0:
			res.fail("no moving-chain request ran")
		case !res.mvAlive:
			res.fail("the moving chain's edge process died")
		}
		if n := mv.wrong.Load(); n > 0 {
			res.fail("%d wrong answers on the moving chain", n)
		}
		if n := mv.errors.Load(); n > 0 {
			res.fail("%d client errors on the moving chain", n)
		}
		if n := mv.refDisagree.Load(); n > 0 {
			res.fail("the reference clock disagreed %d times with the moving explorer-sim: its judgments cannot be trusted", n)
		}
	}
	res.pass = len(res.failures) == 0
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// print writes the summary table.
func (res *result) print(o options) {
	w := o.out
	fmt.Fprintln(w)
	fmt.Fprintln(w, "explorer-edge soak summary")
	fmt.Fprintln(w, strings.Repeat("-", 78))
	rows := [][2]string{}
	add := func(k, format string, args ...any) { rows = append(rows, [2]string{k, fmt.Sprintf(format, args...)}) }
	ld, wm := res.load, res.warm
	reqs := ld.requests.Load()
	add("duration", "%.1fs load (+ warm-up %.1fs, %d requests)", res.loadTime.Seconds(), res.warmTime.Seconds(), wm.requests.Load())
	add("targets", "%d valid (%d hot, %d refused by the upstream), %d invalid", res.poolValid, res.poolHot, res.poolUp400, res.poolInvalid)
	add("requests", "%d (%.0f/s; %d invalid, %d with If-None-Match, %d accepting gzip)", reqs, float64(reqs)/res.loadTime.Seconds(),
		ld.invalidSent.Load(), ld.withINM.Load(), ld.withGzip.Load())
	bs := ld.byStatus()
	for _, st := range slices.Sorted(maps.Keys(bs)) {
		label := fmt.Sprintf("answers %d", st)
		if st < 0 {
			label = "answers (other status)"
		}
		add(label, "%d (%.2f%%)", bs[st], 100*float64(bs[st])/float64(max(reqs, 1)))
	}
	add("stale served", "%d (Cache-Status ...stale...; %d of them stale-if-error)", ld.stale.Load(), ld.staleErr.Load())
	add("upstream failures", "%d (502/503/504 while faults were in force)", ld.failures.Load())
	add("304 not modified", "%d", ld.notModified.Load())
	add("gzip answers", "%d", ld.gzipped.Load())
	add("envelopes passed through", "%d (200 with an injected error code)", ld.envelopes.Load())
	add("upstream 400 passed", "%d", ld.upstream400.Load())
	add("wrong answers", "%d (warm-up %d)", ld.wrong.Load()+wm.wrong.Load(), wm.wrong.Load())
	add("client errors", "%d (warm-up %d)", ld.clientErrors.Load()+wm.clientErrors.Load(), wm.clientErrors.Load())
	if mv := res.mv; mv != nil {
		lag := "none measured"
		if mv.lagSeen {
			lag = fmt.Sprintf("%d blocks", mv.maxLag)
		}
		cache := "shipped TTLs and stale windows"
		if o.movingCache != "" {
			cache = "cache: " + o.movingCache
		}
		add("moving chain", "%d edge requests over %d targets (%s), %d direct", mv.requests.Load(), res.mvTargets, cache, mv.direct.Load())
		add("  declared final", "%d (each equal to a direct answer just before or after)", mv.final.Load())
		add("  newest page", "%d judged, worst lag %s (bound %d)", mv.tips.Load(), lag, tipBound)
		add("  out of date", "%d older than the upstream's answer of the moment (placed %d by the direct history, %d by the reference clock)",
			mv.late.Load(), mv.byHistory.Load(), mv.byRef.Load())
		add("  wrong answers", "%d%s", mv.wrong.Load(), mv.wrongRules())
		add("  client errors", "%d (reference disagreements %d)", mv.errors.Load(), mv.refDisagree.Load())
	}
	add("upstream calls", "%d during the load (%.1f per 1000 requests; %d signatures refused)", res.upstreamCalls,
		1000*float64(res.upstreamCalls)/float64(max(reqs, 1)), res.authFailures)
	add("peak RSS", "%s (bound %s = 1.5 x %s + %s; %s at start)", mib(res.rssPeak), mib(res.rssBound),
		mib(float64(o.maxBytes)), mib(rssBaseline), mib(res.rssStart))
	add("RSS stable", "%s", res.rssStable)
	add("goroutines", "before %.0f, after %.0f (slack +%d, back in %.1fs), peak %.0f", res.gorBefore, res.gorAfter, goroutineSlack, res.gorSettle.Seconds(), res.gorPeak)
	add("panics", "%d", len(res.panics))
	alive := "running at the end"
	if !res.edgeAlive {
		alive = "DIED"
	}
	add("edge process", "%s", alive)
	add("fault phases", "%d set, %v each (per phase below)", len(res.phasesRun), o.phase)
	verdict := "PASS"
	if !res.pass {
		verdict = "FAIL"
	}
	add("result", "%s", verdict)
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s  %s\n", width, r[0], r[1])
	}
	fmt.Fprintln(w, strings.Repeat("-", 78))
	res.printPhases(w)
	if res.cachePeak > float64(o.maxBytes) {
		// Not a failure of the soak (memory is what RSS bounds), but the
		// gauge is wrong: see cache.Cache.Set, which counts a key stored
		// again after its keep time, before Ristretto's TTL cleanup
		// removed it, as a new entry while Ristretto replaces it in place.
		fmt.Fprintf(w, "NOTE: the edge's explorer_edge_cache_bytes gauge peaked at %s, above cache.max_bytes %s\n",
			mib(res.cachePeak), mib(float64(o.maxBytes)))
	}
	for _, f := range res.failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	for i, wa := range res.wrongs {
		fmt.Fprintf(w, "wrong answer %d at +%.1fs: %s\n  target:  %s\n  sent:    gzip=%v If-None-Match=%q\n  got:     %d %s\n  headers: %s\n  want:    %s\n",
			i+1, wa.at.Seconds(), wa.why, wa.target, wa.sent.gzip, wa.sent.inm, wa.status, wa.body, wa.headers, wa.want)
	}
	for _, e := range res.clientErrs {
		fmt.Fprintln(w, "client error:", e)
	}
	if res.mv != nil {
		res.mv.print(w)
	}
	for i, p := range res.panics {
		if i == 5 {
			break
		}
		fmt.Fprintln(w, "panic line:", p)
	}
}

// printPhases writes what the answers were under each fault phase.
func (res *result) printPhases(w io.Writer) {
	if res.tl == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\trequests\t200/304 ok\tstale\tstale-if-error\t502/503/504\tenvelopes\t\t")
	for i, name := range res.phasesRun {
		if i >= maxPhases {
			break
		}
		pc := &res.tl.phase[i]
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t%s\n", i+1, pc.requests.Load(), pc.good.Load(), pc.stale.Load(),
			pc.staleErr.Load(), pc.failures.Load(), pc.envelopes.Load(), name)
	}
	tw.Flush()
	fmt.Fprintln(w, strings.Repeat("-", 78))
}
