// Command soak starts explorer-sim and explorer-edge as child processes on
// free loopback ports, drives mixed load through the edge for -duration
// while it cycles the sim's faults, and checks every answer against an
// in-process reference sim with the same seed and frozen chain clock. It
// watches the edge's goroutines and memory, looks for panics in its output,
// prints a summary and exits non-zero on any failure.
//
// The edge runs as a fleet of two nodes sharing a redis-server started for
// the run (fleet.go), with an upstream budget the load exceeds: the sim's
// count of calls is checked against rate x time + burst. Besides the sim's
// faults, phases pause or stop Redis and hammer a few stale hot keys
// behind a slow upstream (hammer.go), and hostile clients (hostile.go)
// hold idle connections, smuggle requests, forge and spray
// X-Forwarded-For and send oversized headers for the whole load.
//
// The nodes trace every request (sample_ratio 1) to an OTLP/HTTP sink in
// the soak's process (otlpsink.go), and in one phase the load's clients
// send sampled traceparents over keys in every cache state; the sink must
// have had spans, and no node may have recovered a panic
// (explorer_edge_panics_total).
//
// Beside it runs the moving chain (moving.go): a second explorer-sim on
// real time and a second explorer-edge with the shipped TTLs and stale
// windows, whose answers are compared with the upstream's as the chain
// moves.
//
//	make soak                                  # go run ./bench/soak -duration 60s
//	go run ./bench/soak -duration 10s -rate 500
//	go run ./bench/soak -moving-cache '{stale_while_revalidate: 30s}'   # must fail: the newest page lags
//	go run ./bench/soak -edge old/explorer-edge -omit-keys server.max_conns_per_ip   # an edge older than a key
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
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
	fleet           bool          // two edge nodes sharing a redis-server; false: one node
	redisBin        string
	upRate          float64 // the fleet's upstream.rate
	upBurst         int
	hostile         bool    // run the hostile clients
	hammerConns     int     // connections of the stale hot keys' hammer
	hammerRate      float64 // its bound, requests per second
	omitKeys        string  // comma-separated config keys left out
	phases          string  // regexp on the phases' titles; "" all
	traceRatio      float64 // the nodes' tracing.sample_ratio
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
	flag.BoolVar(&o.fleet, "fleet", true, "run the edge as two nodes sharing a redis-server, with phases that pause and stop Redis")
	flag.StringVar(&o.redisBin, "redis", "redis-server", "redis-server binary (fleet mode)")
	// 400/s: unbounded, the fleet asks the upstream about 670 times a
	// second under this load, so the budget binds whenever the upstream
	// answers fast enough. Burst 200, half a second: a 3 s phase that
	// spends its budget makes 1200-1400 calls against a bound of 1.1 x
	// 1400, so half again as many (a hidden retry of each dropped call)
	// is seen, and so is a local burst per node per Redis outage.
	flag.Float64Var(&o.upRate, "upstream-rate", 400, "the fleet's upstream.rate; the upstream calls must stay within rate x time + burst (+10%)")
	flag.IntVar(&o.upBurst, "upstream-burst", 200, "the fleet's upstream.burst")
	flag.BoolVar(&o.hostile, "hostile", true, "run the hostile clients beside the load")
	flag.IntVar(&o.hammerConns, "hammer-conns", 64, "connections asking the stale hot keys in their phase")
	flag.Float64Var(&o.hammerRate, "hammer-rate", 20000, "bound on the stale hot keys' requests per second")
	flag.StringVar(&o.phases, "phases", "", "regular expression: cycle only the fault phases whose titles match, e.g. 'none|drop 50'")
	flag.Float64Var(&o.traceRatio, "trace-ratio", 1, "the nodes' tracing.sample_ratio: 1 traces every request; 0 only those of the traced phase (sampled traceparents)")
	flag.StringVar(&o.omitKeys, "omit-keys", "", "comma-separated edge config keys to leave out (server.max_conns_per_ip, auth.ip_max_tracked, tracing), to run an edge built before them")
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
	budgetTime                                 time.Duration // from the stats reset to the last read
	phasesRun                                  []string
	tl                                         *timeline

	nodes            []*nodeResult
	rssBound         float64
	rssPeak, gorPeak float64 // over the nodes
	panics           []string
	wrongs           []wrongAnswer
	clientErrs       []string
	redis            *redisServer // nil: single node
	hammer           *hammer
	hostile          *hostile // nil: not run
	maxBytes         int64
	upRate           float64
	upBurst          int
	fleet            bool
	phaseRows        []phaseRow
	sink             *sinkStats // nil: tracing off (-omit-keys tracing)
	tracedRun        bool       // the traced phase was set

	mv        *movingStats // nil: no moving chain
	mvTargets int
	mvAlive   bool
}

// nodeResult is one edge node's measurements.
type nodeResult struct {
	name                         string
	rssPeak, rssQ2, rssQ4        float64
	rssStart, cachePeak          float64
	rssStable                    string
	gorBefore, gorAfter, gorPeak float64
	gorSettle                    time.Duration
	alive                        bool
	panics                       float64 // explorer_edge_panics_total at the last scrape; -1 absent
}

func (r *result) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// Bounds of the checks (docs/reliability.md, Soak, and the summary).
const (
	// goroutineSlack: after the load, with the client's connections
	// closed and the faults cleared, the edge may hold a few goroutines
	// more than at the baseline: the upstream client's idle-connection
	// cleaner, the admin server's worker for the scrape, a batch timer
	// or a finishing background refresh. A leak per request, per failed
	// call or per hung upstream answer is thousands above it after a
	// minute of faults.
	goroutineSlack = 5
	// maxGoroutines bounds each node's goroutines at any scrape of the run:
	// about 150 under the load, plus the hammer's 64 connections, the
	// hostile clients' 20 idle ones and a refresh per stale key. An edge
	// that starts a goroutine per stale hit behind the slow upstream
	// holds thousands.
	maxGoroutines = 2000
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
	// rssGrowthMinLoad is the shortest load whose RSS growth is judged.
	rssGrowthMinLoad = 30 * time.Second
	// goroutineWait bounds how long the goroutines may take to come back.
	goroutineWait = 15 * time.Second
	// budgetSlack is how far beyond rate x time + burst the fleet's calls
	// may go: the design's bound adds the debt of the last Redis outage
	// not yet charged (docs/reliability-fleet.md).
	budgetSlack = 1.10
)

// node is one explorer-edge process of the soak.
type node struct {
	name          string
	proc          *child
	listen, admin string
	scr           *scraper
	hc            *fasthttp.HostClient // the load's client
}

// soak is one run.
type soak struct {
	o     options
	pl    *pool
	nodes []*node
	ck    *checker
	sink  *otlpSink // nil: tracing off
}

// loadClient is a client of one edge node with up to conns connections.
func loadClient(addr string, conns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                      addr,
		MaxConns:                  conns,
		MaxIdemponentCallAttempts: 1, // every transport error counts
		ReadTimeout:               15 * time.Second,
		WriteTimeout:              5 * time.Second,
		// Twice the largest answer the edge may pass on: a bomb served
		// inflated is a client error, not 64 MiB read.
		MaxResponseBodySize:      2 * maxResponseBytes,
		DisablePathNormalizing:   true, // send the targets exactly as written
		NoDefaultUserAgentHeader: true,
	}
}

func run(ctx context.Context, o options) (res *result, err error) {
	t0 := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.out, "soak +%5.1fs: %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	res = &result{maxBytes: o.maxBytes, upRate: o.upRate, upBurst: o.upBurst, fleet: o.fleet}
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
	sc := &simControl{base: "http://" + simAddr, hc: &http.Client{Timeout: 5 * time.Second}, tl: newTimeline(), fleet: o.fleet}
	if sc.phases, err = selectPhases(o.phases, o.fleet); err != nil {
		return res, err
	}

	// redis-server and the fleet's nodes, or one node.
	nNodes, redisAddr := 1, ""
	if o.fleet {
		rs, err := startRedis(ctx, o.redisBin, dir)
		if err != nil {
			return res, err
		}
		defer rs.proc.kill()
		sc.rs, res.redis, nNodes, redisAddr = rs, rs, 2, rs.addr
	}
	omit := map[string]bool{}
	for k := range strings.SplitSeq(o.omitKeys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			omit[k] = true
		}
	}
	// The OTLP/HTTP receiver of the nodes' spans.
	var sink *otlpSink
	if !omit["tracing"] {
		if sink, err = startOTLPSink(); err != nil {
			return res, err
		}
		defer sink.close()
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.proc.kill()
		}
	}()
	for i := range nNodes {
		n := &node{name: "edge-" + string(rune('a'+i))}
		n.proc, err = startOnFreePorts(ctx, 2, func(addrs []string) (*child, string, error) {
			n.listen, n.admin = addrs[0], addrs[1]
			cfgPath := filepath.Join(dir, n.name+".yaml")
			cfg := edgeConfig(edgeParams{listen: n.listen, admin: n.admin, upstream: "http://" + simAddr, maxBytes: o.maxBytes,
				rate: o.upRate, burst: o.upBurst, redis: redisAddr, nodes: nNodes, omit: omit, otlp: sink.endpoint(), traceRatio: o.traceRatio})
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
				return nil, "", err
			}
			c, err := startChild("explorer-edge "+n.name, o.edgeBin, []string{"-config", cfgPath}, filepath.Join(dir, n.name+".log"))
			return c, "http://" + n.admin + "/healthz", err
		})
		if err != nil {
			return res, err
		}
		n.scr = newScraper("http://" + n.admin + "/metrics")
		n.hc = loadClient(n.listen, max(o.workers/nNodes, 1))
		nodes = append(nodes, n)
	}
	where := "one node"
	if o.fleet {
		where = fmt.Sprintf("%d nodes sharing redis-server on %s", nNodes, redisAddr)
	}
	logf("explorer-sim on %s; explorer-edge %s: %s; upstream budget %.0f/s, burst %d; files in %s", simAddr, where, nodeAddrs(nodes), o.upRate, o.upBurst, dir)
	if sink != nil {
		logf("tracing: sample_ratio %g, spans to the OTLP/HTTP sink on %s", o.traceRatio, sink.url)
	}

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

	// A node dying ends the load at once.
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	for _, n := range nodes {
		go func() {
			select {
			case <-n.proc.exited:
				cancelRun()
			case <-runCtx.Done():
			}
		}()
	}

	// Scrapes every 250 ms: a pile-up of goroutines lasts about a second.
	scrCtx, stopScr := context.WithCancel(runCtx)
	var scrWG sync.WaitGroup
	for _, n := range nodes {
		scrWG.Go(func() { n.scr.run(scrCtx, 250*time.Millisecond) })
	}
	defer func() { stopScr(); scrWG.Wait() }()

	s := &soak{o: o, pl: pl, nodes: nodes, ck: &checker{t0: t0, tl: sc.tl}, sink: sink}
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
	if err := deaths(nodes); err != nil {
		return res, fmt.Errorf("during the warm-up: %w", err)
	}
	logf("warm-up: %d requests in %.1fs, %d wrong, %d refused for the quota", res.warm.requests.Load(), res.warmTime.Seconds(), res.warm.wrong.Load(), res.warm.quota.Load())

	// fasthttp keeps a worker goroutine per connection it served, idle, for
	// 10 to 20 s after the connection closed: the baseline is taken with
	// as many idle workers as the run's connections will leave (the load's,
	// the hammer's, the hostile clients'), so that the count after the
	// load can be held to it.
	for i, n := range nodes {
		conns := max(o.workers/nNodes, 1) + max(o.hammerConns/nNodes, 1)
		if i == 0 && o.hostile {
			conns += hostileConns
		}
		if err := warmWorkers(n, pl.hot, conns); err != nil {
			if err := deaths(nodes); err != nil {
				return res, fmt.Errorf("during the warm-up: %w", err)
			}
			return res, fmt.Errorf("%s: %w", n.name, err)
		}
	}

	// Goroutine baselines: the client's connections closed, the counts settled.
	for _, n := range nodes {
		n.hc.CloseIdleConnections()
		nr := &nodeResult{name: n.name}
		res.nodes = append(res.nodes, nr)
		base, err := n.scr.settle(runCtx, 3*time.Second)
		if err != nil {
			if !n.proc.alive() {
				return res, fmt.Errorf("during the warm-up: %w", deaths(nodes))
			}
			return res, fmt.Errorf("%s goroutine baseline: %w", n.name, err)
		}
		nr.gorBefore = base
	}
	if err := sc.resetStats(runCtx); err != nil {
		return res, err
	}
	budgetStart := time.Now()

	// Load, with the faults cycling and the hostile clients beside it.
	res.load = &counts{}
	sc.hm = newHammer(pl, nodes, s.ck, o.hammerConns, o.hammerRate)
	res.hammer = sc.hm
	loadStart := time.Now()
	loadEnd := loadStart.Add(o.duration)
	quietAt := loadEnd.Add(-max(o.phase, o.duration/10))
	var cycleErr error
	var cycleWG sync.WaitGroup
	cycleWG.Go(func() { cycleErr = sc.cycle(runCtx, o.phase, quietAt) })
	if mv != nil {
		cycleWG.Go(func() { mv.poll(runCtx, loadEnd) })
	}
	if o.hostile {
		res.hostile = &hostile{edgeAddr: nodes[0].listen, ck: s.ck, pl: pl}
		hctx, cancel := context.WithDeadline(runCtx, loadEnd)
		defer cancel()
		cycleWG.Go(func() { res.hostile.run(hctx) })
	}
	logf("load: %v at %.0f req/s, %d workers, fault phases of %v, quiet from +%.1fs; stale hot keys: %s", o.duration, o.rate, o.workers, o.phase,
		quietAt.Sub(loadStart).Seconds(), sc.hm.describe())
	s.drive(runCtx, res.load, lim, loadEnd, s.pickTarget)
	res.loadTime = time.Since(loadStart)
	cycleWG.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted")
	}
	if cycleErr != nil && allAlive(nodes) {
		return res, fmt.Errorf("faults: %w", cycleErr)
	}
	logf("load: %d requests in %.1fs, %d wrong, %d client errors", res.load.requests.Load(), res.loadTime.Seconds(), res.load.wrong.Load(), res.load.clientErrors.Load())
	if mv != nil {
		logf("moving chain: %d requests, %d wrong, %d client errors", mv.stats.requests.Load(), mv.stats.wrong.Load(), mv.stats.errors.Load())
	}

	// After the load: connections closed, faults cleared, goroutines back?
	for _, n := range nodes {
		n.hc.CloseIdleConnections()
	}
	if allAlive(nodes) {
		if err := sc.set(ctx, cleared); err != nil {
			return res, err
		}
	}
	for i, n := range nodes {
		if !n.proc.alive() {
			continue
		}
		nr := res.nodes[i]
		settleStart := time.Now()
		after, err := n.scr.waitBelow(ctx, nr.gorBefore+goroutineSlack, goroutineWait)
		if err != nil && n.proc.alive() {
			return res, fmt.Errorf("%s goroutines after the load: %w", n.name, err)
		}
		nr.gorAfter, nr.gorSettle = after, time.Since(settleStart)
	}
	st, err := sc.stats(ctx)
	if err != nil {
		return res, err
	}
	res.budgetTime = time.Since(budgetStart)
	res.upstreamCalls, res.authFailures = st.RequestsTotal, st.AuthFailures
	for i, n := range nodes {
		// The last reading of panics_total before the node stops (the
		// scrapes of the run are kept too: the highest counts).
		n.scr.scrape(ctx)
		res.nodes[i].alive = n.proc.alive()
	}
	stopScr()
	scrWG.Wait()
	for _, n := range nodes {
		n.proc.stop()
	}
	simProc.stop()
	if sink != nil {
		// The nodes flushed their last batch as they stopped.
		st := sink.stats()
		res.sink = &st
	}
	for _, n := range nodes {
		p, err := scanPanics(n.proc.logPath)
		if err != nil {
			return res, err
		}
		for _, line := range p {
			res.panics = append(res.panics, n.name+": "+line)
		}
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

	for _, n := range nodes {
		if err := n.scr.writeTSV(filepath.Join(dir, n.name+"-metrics.tsv"), t0); err != nil {
			return res, err
		}
	}
	s.judge(res, loadStart, o.duration)
	res.phasesRun, res.tl = sc.tl.names, sc.tl
	res.print(o)
	return res, nil
}

// warmWorkers opens conns connections to n at once, asks a hot target on
// each and closes them.
func warmWorkers(n *node, hot []*target, conns int) error {
	var cs []net.Conn
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.DialTimeout("tcp", n.listen, 2*time.Second)
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		c.SetDeadline(time.Now().Add(15 * time.Second))
		req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: 10.250.0.%d\r\n\r\n", hot[i%len(hot)].path, n.listen, i%256)
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
	}
	for _, c := range cs {
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return fmt.Errorf("warming the worker pool: %w", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	return nil
}

// deaths names the nodes that have exited, with their exit status and the
// first panic line of their output; nil if none has.
func deaths(nodes []*node) error {
	var parts []string
	for _, n := range nodes {
		if n.proc.alive() {
			continue
		}
		d := fmt.Sprintf("%s died (%v; output in %s)", n.name, n.proc.waitErr, n.proc.logPath)
		if p, _ := scanPanics(n.proc.logPath); len(p) > 0 {
			d += ": " + p[0]
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

func allAlive(nodes []*node) bool {
	for _, n := range nodes {
		if !n.proc.alive() {
			return false
		}
	}
	return true
}

func nodeAddrs(nodes []*node) string {
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("%s on %s (admin %s)", n.name, n.listen, n.admin))
	}
	return strings.Join(parts, ", ")
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
// Worker w asks node w mod the nodes, through the trusted proxy, for 256
// client addresses of its own in turn: none of them near the per-IP limit.
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
			n := s.nodes[w%len(s.nodes)]
			for i := 0; ; i++ {
				if lim.Wait(ctx) != nil {
					return
				}
				t := next(r)
				if t == nil {
					return
				}
				s.one(c, n, t, r, req, resp, fmt.Sprintf("10.%d.%d.%d", w/256%200, w%256, i%256))
			}
		})
	}
	wg.Wait()
}

// one sends one request for t, sometimes accepting gzip and sometimes with
// If-None-Match, and checks the answer.
func (s *soak) one(c *counts, n *node, t *target, r *rand.Rand, req *fasthttp.Request, resp *fasthttp.Response, xff string) {
	req.Reset()
	resp.Reset()
	req.SetRequestURI(t.path)
	req.Header.SetHost(n.listen)
	req.Header.Set("X-Forwarded-For", xff)
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
	if s.sink != nil && s.ck.tl.traced.Load() {
		s.sink.traceHeaders(req, r, c)
	}
	c.requests.Add(1)
	pc := s.ck.tl.current()
	start := time.Now()
	err := n.hc.Do(req, resp)
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
	if hm := res.hammer; hm != nil && hm.runs.Load() > 0 {
		if n := hm.c.wrong.Load(); n > 0 {
			res.fail("%d wrong answers to the stale hot keys' hammer", n)
		}
		if n := hm.c.clientErrors.Load(); n > 0 {
			res.fail("%d client errors of the stale hot keys' hammer", n)
		}
	}
	if res.hostile != nil {
		res.hostile.judge(res)
	}
	res.rssBound = 1.5*float64(s.o.maxBytes) + rssBaseline
	for i, n := range s.nodes {
		nr := res.nodes[i]
		samples := n.scr.all()
		if len(samples) == 0 {
			res.fail("%s: no /metrics sample", n.name)
			continue
		}
		nr.rssStart = samples[0].rss
		for _, sm := range samples {
			nr.rssPeak = max(nr.rssPeak, sm.rss)
			nr.gorPeak = max(nr.gorPeak, sm.goroutines)
			nr.cachePeak = max(nr.cachePeak, sm.cacheBytes)
		}
		res.rssPeak, res.gorPeak = max(res.rssPeak, nr.rssPeak), max(res.gorPeak, nr.gorPeak)
		if nr.rssPeak > res.rssBound {
			res.fail("%s: peak RSS %s above the bound %s", n.name, mib(nr.rssPeak), mib(res.rssBound))
		}
		if nr.gorPeak > maxGoroutines {
			res.fail("%s: peak goroutines %.0f above the bound %d", n.name, nr.gorPeak, maxGoroutines)
		}
		q := d / 4
		for _, sm := range samples {
			switch off := sm.at.Sub(loadStart); {
			case off >= q && off < 2*q:
				nr.rssQ2 = max(nr.rssQ2, sm.rss)
			case off >= 3*q && off <= d:
				nr.rssQ4 = max(nr.rssQ4, sm.rss)
			}
		}
		switch {
		case nr.rssQ2 == 0 || nr.rssQ4 == 0:
			nr.rssStable = "n/a (a quarter without samples)"
		case nr.rssQ4 > rssGrowth*nr.rssQ2 && d < rssGrowthMinLoad:
			// Quarters of a few seconds see the transient garbage of one
			// fault phase (a gzip bomb is 4 MiB of it), not a leak; the
			// bound on RSS still holds for them.
			nr.rssStable = fmt.Sprintf("not judged (load under %s): last quarter max %s, second quarter max %s", rssGrowthMinLoad, mib(nr.rssQ4), mib(nr.rssQ2))
		case nr.rssQ4 > rssGrowth*nr.rssQ2:
			nr.rssStable = fmt.Sprintf("NO: last quarter max %s > %.2f x second quarter max %s", mib(nr.rssQ4), rssGrowth, mib(nr.rssQ2))
			res.fail("%s: RSS grew: %s", n.name, nr.rssStable)
		default:
			nr.rssStable = fmt.Sprintf("yes: last quarter max %s <= %.2f x second quarter max %s", mib(nr.rssQ4), rssGrowth, mib(nr.rssQ2))
		}
		if nr.alive && nr.gorAfter > nr.gorBefore+goroutineSlack {
			res.fail("%s: goroutines %v after the load, baseline %v + %d", n.name, nr.gorAfter, nr.gorBefore, goroutineSlack)
		}
		if !nr.alive {
			res.fail("%s: the edge process died", n.name)
		}
		nr.panics = -1
		for _, sm := range samples {
			nr.panics = max(nr.panics, sm.panics)
		}
		if nr.panics > 0 {
			res.fail("%s: explorer_edge_panics_total %.0f: a panic recovered is a bug (its stack is in %s)", n.name, nr.panics, n.proc.logPath)
		}
	}
	res.tracedRun = res.load.traced.Load() > 0
	if st := res.sink; st != nil {
		switch {
		case st.requests == 0 && (s.o.traceRatio > 0 || res.tracedRun):
			res.fail("tracing: the OTLP sink received no export")
		case st.spans == 0:
			res.fail("tracing: the OTLP sink received %d exports without a span", st.requests)
		}
		if st.bad > 0 {
			res.fail("tracing: %d exports the sink could not decode, the first: %s", st.bad, st.firstBad)
		}
		if len(st.unknown) > 0 {
			res.fail("tracing: cache spans with a state of no name: %v", st.unknown)
		}
		alive := true
		for _, nr := range res.nodes {
			alive = alive && nr.alive
		}
		if res.tracedRun && alive {
			for _, k := range cacheStates {
				if st.client[k] == 0 {
					res.fail("tracing: no cache span in state %q in the traces the clients started (%s): the traced phase did not reach every cache state", k, byState(st.client))
				}
			}
		}
	}
	if res.authFailures > 0 {
		res.fail("explorer-sim refused %d of the edge's signatures", res.authFailures)
	}
	if calls, b := float64(res.upstreamCalls), res.budget(); calls > budgetSlack*b {
		res.fail("%.0f upstream calls in %.1fs, %.2f x the budget rate x time + burst = %.0f (at most %.2f x)",
			calls, res.budgetTime.Seconds(), calls/b, b, budgetSlack)
	}
	res.phaseRows = phaseTable(s.ck.tl, s.nodes, res.fleet, res.upRate, float64(res.upBurst))
	for _, line := range overBudget(res.phaseRows, res.upRate, float64(res.upBurst)) {
		res.fail("beyond the budget (at most %.2f x): %s", budgetSlack, line)
	}
	if len(res.panics) > 0 {
		res.fail("%d panic / fatal error lines in the edges' output", len(res.panics))
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

// budget is what the fleet may spend from the stats reset to the last
// read: rate x time + burst.
func (res *result) budget() float64 {
	return res.upRate*res.budgetTime.Seconds() + float64(res.upBurst)
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
	add("quota refusals", "%d (503/50001 upstream quota spent; warm-up %d)", ld.quota.Load(), wm.quota.Load())
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
	if hm := res.hammer; hm != nil {
		hc := hm.c
		add("stale hot keys", "%s, in %d phase(s): %d requests, %d stale, %d upstream failures, %d quota refusals, %d wrong, %d client errors",
			hm.describe(), hm.runs.Load(), hc.requests.Load(), hc.stale.Load(), hc.failures.Load(), hc.quota.Load(), hc.wrong.Load(), hc.clientErrors.Load())
	}
	if h := res.hostile; h != nil {
		h.summary(add)
	}
	if rs := res.redis; rs != nil {
		add("redis faults", "%d CLIENT PAUSEs acknowledged (%d failed), %d SIGSTOPs", rs.pauses.Load(), rs.pauseErrs.Load(), rs.stops.Load())
	}
	b := res.budget()
	add("upstream calls", "%d in %.1fs of load (%.1f per 1000 requests; %d signatures refused)", res.upstreamCalls, res.budgetTime.Seconds(),
		1000*float64(res.upstreamCalls)/float64(max(reqs, 1)), res.authFailures)
	add("  against the budget", "%.2f x rate x time + burst = %.0f/s x %.1fs + %d = %.0f (at most %.2f x)", float64(res.upstreamCalls)/b,
		res.upRate, res.budgetTime.Seconds(), res.upBurst, b, budgetSlack)
	add("peak goroutines", "%.0f (bound %d per node)", res.gorPeak, maxGoroutines)
	add("peak RSS", "%s (bound %s = 1.5 x %s + %s per node)", mib(res.rssPeak), mib(res.rssBound), mib(float64(o.maxBytes)), mib(rssBaseline))
	for _, nr := range res.nodes {
		alive := "running at the end"
		if !nr.alive {
			alive = "DIED"
		}
		add(nr.name, "%s; peak RSS %s (%s at start); goroutines before %.0f, after %.0f (slack +%d, back in %.1fs), peak %.0f", alive,
			mib(nr.rssPeak), mib(nr.rssStart), nr.gorBefore, nr.gorAfter, goroutineSlack, nr.gorSettle.Seconds(), nr.gorPeak)
		add("  RSS stable", "%s", nr.rssStable)
	}
	add("panics", "%d", len(res.panics))
	var recovered []string
	for _, nr := range res.nodes {
		if nr.panics < 0 {
			recovered = append(recovered, nr.name+" n/a (no explorer_edge_panics_total: an edge older than it)")
		} else {
			recovered = append(recovered, fmt.Sprintf("%s %.0f", nr.name, nr.panics))
		}
	}
	add("panics recovered", "%s (explorer_edge_panics_total; each a bug)", strings.Join(recovered, ", "))
	if st := res.sink; st != nil {
		add("tracing", "%d exports to the OTLP sink (%s, %d spans, %d refused); cache spans: %s", st.requests, mib(float64(st.bytes)), st.spans, st.bad, byState(st.states))
		if res.tracedRun {
			add("  traced phase", "%d requests with a sampled traceparent (%d with a tracestate); cache spans of their traces: %s",
				ld.traced.Load(), ld.withTraceState.Load(), byState(st.client))
		} else {
			add("  traced phase", "not run")
		}
	} else {
		add("tracing", "off (-omit-keys tracing)")
	}
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
	for _, nr := range res.nodes {
		if nr.cachePeak > float64(o.maxBytes) {
			// Not a failure of the soak (memory is what RSS bounds), but the
			// gauge is wrong: see cache.Cache.Set, which counts a key stored
			// again after its keep time, before Ristretto's TTL cleanup
			// removed it, as a new entry while Ristretto replaces it in place.
			fmt.Fprintf(w, "NOTE: %s's explorer_edge_cache_bytes gauge peaked at %s, above cache.max_bytes %s\n",
				nr.name, mib(nr.cachePeak), mib(float64(o.maxBytes)))
		}
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

// printPhases writes what the answers were under each fault phase, the
// upstream calls against the phase's budget and the nodes' peaks.
func (res *result) printPhases(w io.Writer) {
	if len(res.phaseRows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\trequests\t200/304 ok\tstale\tstale-if-error\t502/503/504\tquota\tenvelopes\tcalls\t/budget\tgoroutines\tRSS MiB\t\t")
	for i, row := range res.phaseRows {
		pc := row.counts
		calls, ratio := "?", "?"
		if row.calls >= 0 {
			calls, ratio = fmt.Sprint(row.calls), fmt.Sprintf("%.2f", float64(row.calls)/row.budget)
		}
		if row.over {
			ratio += "!"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f\t%.0f\t\t%s\n", i+1, pc.requests.Load(), pc.good.Load(), pc.stale.Load(),
			pc.staleErr.Load(), pc.failures.Load(), pc.quota.Load(), pc.envelopes.Load(), calls, ratio, row.gorPeak, row.rssPeak/(1<<20), row.title)
	}
	tw.Flush()
	fmt.Fprintln(w, "(calls: the sim's count while the phase was in force; /budget: of rate x its time + burst, ! beyond the bound,")
	fmt.Fprintln(w, " a Redis phase counted with the next; goroutines, RSS: the highest of any node)")
	fmt.Fprintln(w, strings.Repeat("-", 78))
}
