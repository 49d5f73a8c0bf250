// Command replay measures how many upstream calls explorer-edge makes per
// 1000 client requests under the finality-aware TTL policy and under a plain
// per-route TTL, side by side. It replays the same Zipf-distributed requests
// over all six routes against explorer-sim, with chain time moving a fixed
// step per request, and counts the calls the sim received.
//
//	go run ./bench/replay -n 100000
//
// With -zipf it measures instead a key space larger than the cache: Zipf
// over -keys settled transaction-list pages against a cache of -cache-mib,
// upstream calls per 1000 requests against the ideal (each distinct key
// fetched once) and the hit ratio, -runs times, as a Markdown table (make
// bench-replay-zipf); -disk-mib puts a disk tier under the cache (make
// bench-replay-zipf DISK_MIB=256).
//
//	go run ./bench/replay -zipf -n 200000 -keys 100000 -cache-mib 4 -runs 3 [-disk-mib 256]
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

func main() {
	n := flag.Int("n", 50_000, "client requests per policy")
	step := flag.Duration("step", 10*time.Millisecond, "chain time between requests (10ms = 100 requests/s)")
	seed := flag.Uint64("seed", 1, "random seed of the request sequence")
	zipf := flag.Bool("zipf", false, "measure a key space larger than the cache instead of the two TTL policies")
	keys := flag.Int("keys", 100_000, "-zipf: distinct settled transaction-list pages")
	cacheMiB := flag.Float64("cache-mib", 4, "-zipf: cache.max_bytes in MiB (at least 1)")
	gzipShare := flag.Float64("gzip", 1, "-zipf: share of requests with Accept-Encoding: gzip (0..1)")
	runs := flag.Int("runs", 3, "-zipf: runs (seeds seed, seed+1, ...); the table ends with the medians")
	maxTime := flag.Duration("max-time", 20*time.Second, "-zipf: bound on each run's time (fewer requests if reached)")
	diskMiB := flag.Float64("disk-mib", 0, "-zipf: the disk tier's cache.disk_max_bytes in MiB, in a temporary directory; 0: no disk tier")
	blocks := flag.Bool("blocks", false, "measure block pages (cache.block_pages off and on) under today's mix and a block-list-heavy one instead of the two TTL policies")
	flag.Parse()

	if *blocks {
		if err := printBlocks(*n, *step, *seed); err != nil {
			log.Fatal(err)
		}
		return
	}

	if *zipf {
		zc := zipfConfig{n: *n, keys: *keys, maxBytes: int64(*cacheMiB * (1 << 20)), diskBytes: int64(*diskMiB * (1 << 20)),
			gzipShare: *gzipShare, seed: *seed, runs: *runs, deadline: *maxTime}
		if err := printZipf(zc); err != nil {
			log.Fatal(err)
		}
		return
	}

	policies := []string{"finality", "route"}
	results := map[string]result{}
	for _, pol := range policies {
		r, err := replay(replayConfig{policy: pol, blockPages: true}, *n, *step, *seed)
		if err != nil {
			log.Fatal(err)
		}
		results[pol] = r
	}
	fmt.Printf("replay: %d requests per policy, chain time step %v (%.0f s of chain time), Zipf s=1.1, seed %d\n\n",
		*n, *step, (time.Duration(*n) * *step).Seconds(), *seed)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "route\trequests\tfinality: upstream/1000\tper-route TTL: upstream/1000\tratio\t")
	// transaction-fills is answered from transaction-multi calls (per-hash
	// cache and batches), so the two cross-chain routes count together.
	for _, r := range results {
		for _, m := range []map[string]int64{r.requests, r.upstream} {
			m["cross-chain (multi+fills)"] = m["transaction-multi"] + m["transaction-fills"]
		}
	}
	rows := []string{"position-list", "block-list", "transaction-list", "cross-chain (multi+fills)", "internal-transaction-multi", "all"}
	for _, route := range rows {
		f, p := results["finality"], results["route"]
		fr, pr := per1000(f.upstream[route], f.requests[route]), per1000(p.upstream[route], p.requests[route])
		ratio := "-"
		if fr > 0 {
			ratio = fmt.Sprintf("%.2fx", pr/fr)
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%s\t\n", route, f.requests[route], fr, pr, ratio)
	}
	w.Flush()
}

func per1000(calls, reqs int64) float64 {
	if reqs == 0 {
		return 0
	}
	return 1000 * float64(calls) / float64(reqs)
}

type result struct {
	requests map[string]int64
	upstream map[string]int64
}

type simClock struct{ ns atomic.Int64 }

func (c *simClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// replayConfig is what one replay varies: the TTL policy, block pages,
// and the mix of requests (blockHeavy: mostly block lists of every limit).
type replayConfig struct {
	policy     string
	blockPages bool
	blockHeavy bool
}

func replay(rc replayConfig, n int, step time.Duration, seed uint64) (result, error) {
	clk := &simClock{}
	clk.ns.Store(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, err := sim.Start(sim.Config{Auth: true, Now: clk.Now})
	if err != nil {
		return result{}, err
	}
	defer s.Close()

	cfg := config.Default()
	cfg.Upstream.BaseURL = s.URL()
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase
	cfg.Upstream.Rate, cfg.Upstream.Burst = 1e6, 1e6 // count calls, do not limit them
	cfg.Cache.Policy = rc.policy
	cfg.Cache.BlockPages = rc.blockPages
	cfg.Cache.BatchWindow = 100 * time.Microsecond
	cfg.Log.Level = "error"
	c, err := cache.New(cache.Config{MaxBytes: 256 << 20})
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	m := metrics.New(route.Names(), cfg.Chains, c)
	p, err := proxy.New(cfg, proxy.Options{Cache: c, Metrics: m, Now: clk.Now})
	if err != nil {
		return result{}, err
	}

	w := newWorkload(s, seed)
	w.blockHeavy = rc.blockHeavy
	res := result{requests: map[string]int64{}, upstream: map[string]int64{}}
	var ctx fasthttp.RequestCtx
	for i := 0; i < n; i++ {
		route, target := w.next()
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI(target)
		ctx.Request.Header.SetMethod("GET")
		p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			return res, fmt.Errorf("%s: %d %s", target, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		res.requests[route]++
		res.requests["all"]++
		clk.ns.Add(int64(step))
	}
	// Background refreshes may still be under way: read the sim's counts
	// once they have stopped moving.
	st := s.Stats()
	for still := 0; still < 5; {
		time.Sleep(20 * time.Millisecond)
		next := s.Stats()
		if next.RequestsTotal == st.RequestsTotal {
			still++
		} else {
			still = 0
		}
		st = next
	}
	for route, calls := range st.Routes {
		res.upstream[route] = calls
	}
	res.upstream["all"] = st.RequestsTotal
	return res, nil
}

// workload draws requests: route by a fixed mix, key by Zipf rank, so a few
// keys are hot and most are cold, as on a public explorer.
type workload struct {
	s      *sim.Server
	r      *rand.Rand
	tokens []string
	cross  []string
	intern []string
	zipf   map[int]*rand.Zipf
	// blockHeavy: 70% block lists (newest pages of limit 5 to 100, pages
	// 1 to 5, and blocks at a height), the rest as today's mix.
	blockHeavy bool
}

func newWorkload(s *sim.Server, seed uint64) *workload {
	r := rand.New(rand.NewPCG(seed, 7))
	return &workload{s: s, r: r, tokens: s.TokenContracts("CHAINX"), cross: s.CrossHashes("TRADE_ZONE", 5000),
		intern: s.InternalTxHashes("CHAINX", 2000), zipf: map[int]*rand.Zipf{}}
}

// rank draws 0..n-1, 0 the most frequent.
func (w *workload) rank(n int) int {
	z, ok := w.zipf[n]
	if !ok {
		z = rand.NewZipf(w.r, 1.1, 1, uint64(n-1))
		w.zipf[n] = z
	}
	return int(z.Uint64())
}

var blockLimits = []int{5, 10, 20, 25, 50, 100}

func (w *workload) next() (string, string) {
	head := w.s.Head("CHAINX")
	if w.blockHeavy && w.r.IntN(100) < 60 {
		if w.r.IntN(5) > 0 {
			return "block-list", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d&page=%d",
				blockLimits[w.rank(len(blockLimits))], 1+w.rank(5))
		}
		return "block-list", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", head-int64(w.rank(2000)))
	}
	switch x := w.r.IntN(100); {
	case x < 25: // block list: mostly the newest pages, some at a height
		if w.r.IntN(3) > 0 {
			return "block-list", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&page=%d", 1+w.rank(5))
		}
		return "block-list", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", head-int64(w.rank(2000)))
	case x < 50: // a block's transactions: recent blocks are hot
		return "transaction-list", fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", head-int64(w.rank(3000)))
	case x < 62:
		return "position-list", fmt.Sprintf("/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=%s&page=%d",
			w.tokens[w.rank(len(w.tokens))], 1+w.rank(20))
	case x < 75:
		k := 1 + w.r.IntN(5)
		hs := ""
		for i := 0; i < k; i++ {
			if i > 0 {
				hs += ","
			}
			hs += w.cross[w.rank(len(w.cross))]
		}
		return "transaction-multi", "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hs
	case x < 90:
		return "transaction-fills", "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + w.cross[w.rank(len(w.cross))]
	default:
		return "internal-transaction-multi", "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + w.intern[w.rank(len(w.intern))]
	}
}

// printBlocks replays today's mix and a block-list-heavy one, each with
// block pages off and on (cache.block_pages), and prints upstream calls
// per 1000 requests: block-list's and all routes'.
func printBlocks(n int, step time.Duration, seed uint64) error {
	fmt.Printf("replay -blocks: %d requests per run, chain time step %v (%.0f s of chain time), Zipf s=1.1, seed %d\n\n",
		n, step, (time.Duration(n) * step).Seconds(), seed)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "mix\tblock-list requests\tblock pages off: block-list/1000\ton: block-list/1000\toff: all/1000\ton: all/1000\t")
	for _, heavy := range []bool{false, true} {
		var res [2]result
		for i, on := range []bool{false, true} {
			r, err := replay(replayConfig{policy: "finality", blockPages: on, blockHeavy: heavy}, n, step, seed)
			if err != nil {
				return err
			}
			res[i] = r
		}
		mix := "today's"
		if heavy {
			mix = "block-list-heavy"
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", mix, res[0].requests["block-list"],
			per1000(res[0].upstream["block-list"], res[0].requests["block-list"]), per1000(res[1].upstream["block-list"], res[1].requests["block-list"]),
			per1000(res[0].upstream["all"], res[0].requests["all"]), per1000(res[1].upstream["all"], res[1].requests["all"]))
	}
	return w.Flush()
}
