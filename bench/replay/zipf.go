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
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// zipfResult is one run of the key space larger than the cache.
type zipfResult struct {
	requests, upstream, hits int64
	bodyBytes                int64
	gzipAnswers              int64
	entries, cacheBytes      int64 // held by the cache at the end
	elapsed                  time.Duration
}

// zipfReplay asks n settled transaction-list pages, keys drawn by Zipf
// (s=1.1) over a space of `keys` distinct pages, from an edge whose cache
// holds maxBytes: a key space larger than the cache, so upstream calls are
// the misses of what the cache could not keep. Chain time stands still
// (every page is of a done block, final class): no call is a refresh.
// gzipShare of the requests (0..1) send Accept-Encoding: gzip, as browsers do.
func zipfReplay(n, keys int, maxBytes int64, gzipShare float64, seed uint64, deadline time.Duration) (zipfResult, error) {
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
	p, err := proxy.New(cfg, proxy.Options{Cache: c, Metrics: m, Now: clk})
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
	r := rand.New(rand.NewPCG(seed, 11))
	z := rand.NewZipf(r, 1.1, 1, uint64(keys-1))
	res := zipfResult{}
	var ctx fasthttp.RequestCtx
	start := time.Now()
	for i := 0; i < n; i++ {
		if time.Since(start) > deadline {
			break
		}
		k := int(z.Uint64())
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
	res.entries, res.cacheBytes = c.Entries(), c.Bytes()
	return res, nil
}

// printZipf runs the Zipf replay runs times and prints each and the median
// as a Markdown table.
func printZipf(n, keys int, maxBytes int64, gzipShare float64, seed uint64, runs int, deadline time.Duration) error {
	fmt.Printf("zipf replay: %d requests (at most %v each run), Zipf s=1.1 over %d settled transaction-list pages, cache.max_bytes %d (%.1f MiB), %.0f%% of requests accept gzip, %d runs (seeds %d..%d)\n\n",
		n, deadline, keys, maxBytes, float64(maxBytes)/(1<<20), 100*gzipShare, runs, seed, seed+uint64(runs)-1)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(w, "| run\t requests\t upstream calls\t upstream / 1000\t hit ratio\t entries held\t cache bytes per entry\t mean body bytes\t gzip answers\t seconds\t")
	fmt.Fprintln(w, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	var per, hit []float64
	for i := 0; i < runs; i++ {
		r, err := zipfReplay(n, keys, maxBytes, gzipShare, seed+uint64(i), deadline)
		if err != nil {
			return err
		}
		u := per1000(r.upstream, r.requests)
		h := float64(r.hits) / float64(max(r.requests, 1))
		per, hit = append(per, u), append(hit, h)
		fmt.Fprintf(w, "| %d\t %d\t %d\t %.1f\t %.3f\t %d\t %.0f\t %.0f\t %d\t %.1f\t\n", i+1, r.requests, r.upstream, u, h,
			r.entries, float64(r.cacheBytes)/float64(max(r.entries, 1)),
			float64(r.bodyBytes)/float64(max(r.requests, 1)), r.gzipAnswers, r.elapsed.Seconds())
	}
	fmt.Fprintf(w, "| median\t \t \t %.1f\t %.3f\t \t \t \t \t \t\n", median(per), median(hit))
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
