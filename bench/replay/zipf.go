package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/cache/disk"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// zipfConfig is what the Zipf replay asks and of what edge.
type zipfConfig struct {
	n, keys   int           // requests, distinct settled transaction-list pages
	maxBytes  int64         // cache.max_bytes
	diskBytes int64         // cache.disk_max_bytes, in a temporary directory; 0: no disk tier
	gzipShare float64       // share of requests with Accept-Encoding: gzip (0..1)
	seed      uint64        // of the first run; run i has seed+i
	runs      int           // runs; the table ends with the medians
	deadline  time.Duration // bound on each run's time
}

// zipfResult is one run of the key space larger than the cache.
type zipfResult struct {
	requests, upstream, hits int64
	distinct                 int64 // distinct keys asked: the ideal count of upstream calls
	bodyBytes                int64
	gzipAnswers              int64
	entries, cacheBytes      int64 // held by the cache at the end
	disk                     disk.Stats
	elapsed                  time.Duration
}

// zipfReplay asks n settled transaction-list pages, keys drawn by Zipf
// (s=1.1) over a space of `keys` distinct pages, from an edge whose cache
// holds maxBytes: a key space larger than the cache, so upstream calls are
// the misses of what the cache could not keep. Chain time stands still
// (every page is of a done block, final class): no call is a refresh.
// gzipShare of the requests (0..1) send Accept-Encoding: gzip, as browsers do.
// With a disk tier (zc.diskBytes) the cache's evictions are disk hits
// when asked again: every final answer is written there once decided.
func zipfReplay(zc zipfConfig, seed uint64) (zipfResult, error) {
	n, keys, maxBytes, gzipShare, deadline := zc.n, zc.keys, zc.maxBytes, zc.gzipShare, zc.deadline
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	s, err := sim.Start(sim.Config{Auth: true, Now: clk})
	if err != nil {
		return zipfResult{}, err
	}
	defer s.Close()

	cfg := config.Default()
	cfg.Upstream.BaseURL = s.URL()
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase
	cfg.Upstream.Rate, cfg.Upstream.Burst = 1e6, 1e6 // count calls, do not limit them
	cfg.Log.Level = "error"
	cfg.Cache.MaxBytes = maxBytes
	c, err := cache.New(cache.Config{MaxBytes: maxBytes})
	if err != nil {
		return zipfResult{}, err
	}
	defer c.Close()
	m := metrics.New(route.Names(), cfg.Chains, c)
	o := proxy.Options{Cache: c, Metrics: m, Now: clk}
	if zc.diskBytes > 0 {
		dir, err := os.MkdirTemp("", "replay-disk-")
		if err != nil {
			return zipfResult{}, err
		}
		defer os.RemoveAll(dir)
		if o.Disk, err = disk.Open(disk.Options{Dir: dir, MaxBytes: zc.diskBytes, Now: clk}); err != nil {
			return zipfResult{}, err
		}
		defer o.Disk.Close()
	}
	p, err := proxy.New(cfg, o)
	if err != nil {
		return zipfResult{}, err
	}

	// Keys: 10 limits (20 down to 11) x heights below the head, rank 0 the
	// hottest; the hot keys are limit-20 pages (about 10 KB).
	heights := (keys + 9) / 10
	top := s.Head("CHAINX") - 100
	if int64(heights) >= top {
		return zipfResult{}, fmt.Errorf("-keys %d needs %d heights; the sim has %d", keys, heights, top)
	}
	// The newest block page first: the edge learns the finalized height,
	// so the pages below it are final (else they would be head: fresh for
	// ever under a clock that stands still, but not final). Its call is
	// not counted.
	var first fasthttp.RequestCtx
	first.Request.SetRequestURI("/api/v5/chainx/block/block-list?chainShortName=chainx")
	first.Request.Header.SetMethod("GET")
	p.Handle(&first)
	if first.Response.StatusCode() != 200 {
		return zipfResult{}, fmt.Errorf("block list: %d %s", first.Response.StatusCode(), first.Response.Body())
	}
	s.ResetStats()
	r := rand.New(rand.NewPCG(seed, 11))
	z := rand.NewZipf(r, 1.1, 1, uint64(keys-1))
	res := zipfResult{}
	asked := map[uint64]struct{}{}
	var ctx fasthttp.RequestCtx
	start := time.Now()
	for i := 0; i < n; i++ {
		if time.Since(start) > deadline {
			break
		}
		k := int(z.Uint64())
		asked[uint64(k)] = struct{}{}
		target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&limit=%d&height=%d", 20-k/heights, top-int64(k%heights))
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI(target)
		ctx.Request.Header.SetMethod("GET")
		if r.Float64() < gzipShare {
			ctx.Request.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
		}
		p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			return res, fmt.Errorf("%s: %d %s", target, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		res.requests++
		res.bodyBytes += int64(len(ctx.Response.Body()))
		if bytes.Equal(ctx.Response.Header.Peek("Content-Encoding"), []byte("gzip")) {
			res.gzipAnswers++
		}
		if bytes.Contains(bytes.ToLower(ctx.Response.Header.Peek("Cache-Status")), []byte("hit")) {
			res.hits++
		}
	}
	res.elapsed = time.Since(start)
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
	res.upstream = st.RequestsTotal
	res.distinct = int64(len(asked))
	res.entries, res.cacheBytes = c.Entries(), c.Bytes()
	if o.Disk != nil {
		o.Disk.Flush()
		res.disk = o.Disk.Stats()
	}
	return res, nil
}

// printZipf runs the Zipf replay zc.runs times and prints each and the
// median as a Markdown table. The ideal is one upstream call per distinct
// key asked (each final answer fetched once); "x ideal" is the calls
// made over it.
func printZipf(zc zipfConfig) error {
	tier := "no disk tier"
	if zc.diskBytes > 0 {
		tier = fmt.Sprintf("disk tier of %.0f MiB", float64(zc.diskBytes)/(1<<20))
	}
	fmt.Printf("zipf replay: %d requests (at most %v each run), Zipf s=1.1 over %d settled transaction-list pages, cache.max_bytes %d (%.1f MiB), %s, %.0f%% of requests accept gzip, %d runs (seeds %d..%d)\n\n",
		zc.n, zc.deadline, zc.keys, zc.maxBytes, float64(zc.maxBytes)/(1<<20), tier, 100*zc.gzipShare, zc.runs, zc.seed, zc.seed+uint64(zc.runs)-1)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(w, "| run\t requests\t upstream calls\t upstream / 1000\t ideal / 1000\t x ideal\t hit ratio\t entries held\t cache bytes per entry\t disk hits\t disk writes\t disk drops\t mean body bytes\t gzip answers\t seconds\t")
	fmt.Fprintln(w, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	var per, ideal, over, hit []float64
	for i := 0; i < zc.runs; i++ {
		r, err := zipfReplay(zc, zc.seed+uint64(i))
		if err != nil {
			return err
		}
		u, id := per1000(r.upstream, r.requests), per1000(r.distinct, r.requests)
		x := float64(r.upstream) / float64(max(r.distinct, 1))
		h := float64(r.hits) / float64(max(r.requests, 1))
		per, ideal, over, hit = append(per, u), append(ideal, id), append(over, x), append(hit, h)
		fmt.Fprintf(w, "| %d\t %d\t %d\t %.1f\t %.1f\t %.3f\t %.3f\t %d\t %.0f\t %d\t %d\t %d\t %.0f\t %d\t %.1f\t\n", i+1, r.requests, r.upstream, u, id, x, h,
			r.entries, float64(r.cacheBytes)/float64(max(r.entries, 1)), r.disk.Hits, r.disk.Writes, r.disk.Drops,
			float64(r.bodyBytes)/float64(max(r.requests, 1)), r.gzipAnswers, r.elapsed.Seconds())
	}
	fmt.Fprintf(w, "| median\t \t \t %.1f\t %.1f\t %.3f\t %.3f\t \t \t \t \t \t \t \t \t\n", median(per), median(ideal), median(over), median(hit))
	return w.Flush()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s { // insertion sort: a handful of runs
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
