package proxy

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// varnishAnswer is one answer of Varnish as a client saw it.
type varnishAnswer struct {
	hit  bool
	obj  string // the xid of the request that stored the object served (hits only)
	body []byte
	err  error
}

// askVarnish asks Varnish at addr for target; safe from any goroutine.
func askVarnish(c *fasthttp.Client, addr, target string) varnishAnswer {
	var req fasthttp.Request
	var res fasthttp.Response
	req.SetRequestURI("http://" + addr + target)
	if err := c.DoTimeout(&req, &res, 10*time.Second); err != nil {
		return varnishAnswer{err: err}
	}
	if res.StatusCode() != 200 {
		return varnishAnswer{err: fmt.Errorf("%s: status %d", target, res.StatusCode())}
	}
	a := varnishAnswer{hit: string(res.Header.Peek("X-Cache")) == "HIT", body: bytes.Clone(res.Body())}
	// X-Varnish: "<this request>" on a miss, "<this request> <the request
	// that stored the object>" on a hit.
	if f := strings.Fields(string(res.Header.Peek("X-Varnish"))); len(f) == 2 {
		a.obj = f[1]
	}
	return a
}

// histogramP99 is the upper bound of the bucket holding the 99th
// percentile of the observations of hs together (+Inf past the last).
func histogramP99(t *testing.T, hs ...interface{ Write(*dto.Metric) error }) (p99 float64, count uint64) {
	t.Helper()
	var bounds []float64
	var counts []uint64
	for _, h := range hs {
		var m dto.Metric
		if err := h.Write(&m); err != nil {
			t.Fatal(err)
		}
		count += m.GetHistogram().GetSampleCount()
		for i, b := range m.GetHistogram().GetBucket() {
			if len(bounds) <= i {
				bounds, counts = append(bounds, b.GetUpperBound()), append(counts, 0)
			}
			counts[i] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return 0, 0
	}
	need := uint64(math.Ceil(0.99 * float64(count)))
	for i, c := range counts {
		if c >= need {
			return bounds[i], count
		}
	}
	return math.Inf(1), count
}

// TestCDNScenarioVarnishFleet is the measured scenario of docs/cdn.md:
// two edges on redis-server, each behind its own varnishd with the
// shipped VCL (cdn.endpoints names both caches), explorer-sim making a
// block a second (the test clock follows the wall clock), clients reading
// through both Varnishes all along. After each operator purge (url, hash,
// heights, route, route with chain, a heights range too wide for buckets
// that goes as the chain's tag, all) and each reorganization (depths 1,
// 5, 20, 40), once the fleet's sender has had the CDN acknowledge the
// purge and sent it again (cdn.resend_after), neither Varnish serves an
// object of the purged or replaced set: a hit is an object stored after
// the purge, and for a reorganization a body of the new branch. It logs
// the purge lag's p99 (cdn_purge_lag_seconds) and the purge requests
// each reorganization cost (goal: at most 2, one and its resend).
func TestCDNScenarioVarnishFleet(t *testing.T) {
	rdb := startRedis(t)
	va, vb := freeAddr(t), freeAddr(t)
	const resend = 300 * time.Millisecond
	h, edges := newFleet(t, rdb, 2, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.CDN.TagHeader, c.CDN.Provider = "xkey", "varnish"
		c.CDN.Endpoints = []string{"http://" + va + "/", "http://" + vb + "/"}
		c.CDN.ResendAfter, c.CDN.Rate, c.CDN.Burst = resend, 1000, 1000
	})
	startVarnish(t, va, edges[0].addr)
	startVarnish(t, vb, edges[1].addr)
	caches := []string{va, vb}

	// A block a second: the test clock (the sim's and the edges') follows
	// the wall clock; drive is held to read a head and reorganize at it.
	var drive sync.Mutex
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		start, moved := time.Now(), time.Duration(0)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			drive.Lock()
			d := time.Since(start) - moved
			h.clock.Advance(d)
			moved += d
			drive.Unlock()
		}
	}()

	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	for _, e := range edges {
		if r := e.get(blocks); r.status != 200 {
			t.Fatalf("block list: %d %s", r.status, r.body)
		}
	}
	fin := edges[0].p.truth.Final("CHAINX")
	tx := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	}

	// Clients read through both caches all along: the block list (the
	// edges see new blocks and reorganizations in it) and whatever the
	// test is looking at.
	var targets atomic.Pointer[[]string]
	targets.Store(&[]string{blocks})
	var reads, failures atomic.Int64
	var lastErr atomic.Value
	for w := range 4 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			c := &fasthttp.Client{}
			// About 200 reads a second each: load, not a busy loop on two
			// shared cores.
			pace := time.NewTicker(5 * time.Millisecond)
			defer pace.Stop()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				ts := *targets.Load()
				if a := askVarnish(c, caches[i%2], ts[i%len(ts)]); a.err != nil {
					failures.Add(1)
					lastErr.Store(a.err.Error())
				}
				reads.Add(1)
			}
		}()
	}
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); bg.Wait() }
	t.Cleanup(halt)
	watch := func(ts ...string) {
		all := append([]string{blocks}, ts...)
		targets.Store(&all)
	}

	vc := &fasthttp.Client{}
	// held asks each cache for target until it is a hit, and returns
	// each cache's answer.
	held := func(target string) []varnishAnswer {
		t.Helper()
		out := make([]varnishAnswer, len(caches))
		for i, addr := range caches {
			testkit.WaitFor(t, target+" to be a hit in Varnish "+addr, func() bool {
				out[i] = askVarnish(vc, addr, target)
				return out[i].err == nil && out[i].hit
			})
		}
		return out
	}
	ok := func() (n float64) {
		for _, e := range edges {
			n += testutil.ToFloat64(e.m.CDN.Requests.WithLabelValues("ok"))
		}
		return n
	}
	idle := func() bool {
		for _, e := range edges {
			if !e.p.cdn.Idle() {
				return false
			}
		}
		return true
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// settled: every record of the fleet's log acknowledged by the CDN,
	// sent again, and no node holding one.
	logSeq := func() (int64, error) {
		seq, err := rc.Do(context.Background(), rc.B().Get().Key(h.cfg.Shared.Prefix+"{purges}seq").Build()).AsInt64()
		if rueidis.IsRedisNil(err) {
			return 0, nil
		}
		return seq, err
	}
	settled := func() bool {
		seq, err := logSeq()
		cur, err2 := edges[0].shared.CDNCursor()
		return err == nil && err2 == nil && cur == seq && idle()
	}
	// gone fails the test if a cache serves what was purged: the object
	// it held before (or, for a reorganization, a body of the old branch).
	gone := func(what, target string, before []varnishAnswer, oldBody bool) {
		t.Helper()
		for i, addr := range caches {
			a := askVarnish(vc, addr, target)
			if a.err != nil {
				t.Fatalf("%s: %s through Varnish %s: %v", what, target, addr, a.err)
			}
			if a.hit && a.obj == before[i].obj {
				t.Fatalf("%s: Varnish %s still serves the object %s of %s, stored before the purge, after the CDN acknowledged it and its resend", what, addr, a.obj, target)
			}
			if oldBody && bytes.Equal(a.body, before[i].body) {
				t.Fatalf("%s: Varnish %s serves the replaced answer of %s (hit %v)", what, addr, target, a.hit)
			}
		}
	}
	stays := func(what, target string, before []varnishAnswer) {
		t.Helper()
		for i, addr := range caches {
			if a := askVarnish(vc, addr, target); a.err != nil || !a.hit || a.obj != before[i].obj {
				t.Fatalf("%s purged %s from Varnish %s too (hit %v, object %s, was %s, err %v)", what, target, addr, a.hit, a.obj, before[i].obj, a.err)
			}
		}
	}

	cross := h.sim.CrossHashes("TRADE_ZONE", 1)[0]
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + cross
	list := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=5", fin-400)
	for i, c := range []struct {
		name, selector string
		purged, kept   string
	}{
		{"url", `{"url":"` + tx(fin-50) + `"}`, tx(fin - 50), tx(fin - 51)},
		{"hash", `{"hash":"` + cross + `","chain":"TRADE_ZONE"}`, multi, tx(fin - 51)},
		{"heights", fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, fin-100, fin-100), tx(fin - 100), tx(fin - 300)},
		{"route", `{"route":"transaction-list"}`, tx(fin - 120), list},
		{"route+chain", `{"route":"transaction-list","chain":"chainx"}`, tx(fin - 140), list},
		{"chain (heights wider than the buckets)", fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, fin-1200, fin-150), tx(fin - 160), ""},
		{"all", `{"all":true}`, list, ""},
	} {
		testkit.WaitFor(t, "the purges before to be sent and sent again", settled)
		watch(c.purged)
		before := held(c.purged)
		var kept []varnishAnswer
		if c.kept != "" {
			kept = held(c.kept)
		}
		sent := ok()
		res := edges[i%2].purge(c.selector)
		if !res.Fleet || res.Seq == 0 {
			t.Fatalf("%s: the purge did not go through the fleet's log: %+v", c.name, res)
		}
		testkit.WaitFor(t, c.name+" acknowledged by the CDN and sent again", func() bool {
			cur, err := edges[0].shared.CDNCursor()
			return err == nil && cur >= res.Seq && ok() >= sent+2 && idle()
		})
		gone(c.name, c.purged, before, false)
		if c.kept != "" {
			stays(c.name, c.kept, kept)
		}
		t.Logf("purge %s: %v purge requests (each a PURGE to both caches)", c.name, ok()-sent)
	}

	reorgs := func() (n float64) {
		for _, e := range edges {
			n += testutil.ToFloat64(e.m.Reorgs.WithLabelValues("CHAINX"))
		}
		return n
	}
	var perReorg, records []float64
	for _, depth := range []int{1, 5, 20, 40} {
		testkit.WaitFor(t, "the purges before to be sent and sent again", settled)
		// The replaced set: the fork's height and the newest block's, and
		// one below the fork that stays (20 below: the CDN's purge names
		// buckets of 16 heights, docs/cdn.md). Read at the head the
		// reorganization takes.
		drive.Lock()
		head := h.sim.Head("CHAINX")
		fork := head - int64(depth) + 1
		replaced := slices.Compact([]string{tx(fork), tx(head)})
		below := tx(fork - 20)
		watch(append(slices.Clone(replaced), below)...)
		var before [][]varnishAnswer
		for _, target := range replaced {
			before = append(before, held(target))
		}
		keptBelow := held(below)
		if h.sim.Head("CHAINX") != head {
			drive.Unlock()
			t.Fatalf("depth %d: the head moved while the clock was held", depth)
		}
		sent, seen := ok(), reorgs()
		seq0, err := logSeq()
		if err != nil {
			drive.Unlock()
			t.Fatal(err)
		}
		h.sim.Reorg(depth)
		drive.Unlock()
		testkit.WaitFor(t, fmt.Sprintf("the edges to see the reorganization of depth %d", depth), func() bool { return reorgs() > seen })
		testkit.WaitFor(t, fmt.Sprintf("the reorganization of depth %d acknowledged by the CDN and sent again", depth), func() bool {
			return ok() >= sent+2 && idle()
		})
		for i, target := range replaced {
			gone(fmt.Sprintf("a reorganization of depth %d", depth), target, before[i], true)
		}
		if fork-20 <= edges[0].p.truth.Final("CHAINX") {
			// Held a day at the CDN: still the object from before.
			stays(fmt.Sprintf("a reorganization of depth %d", depth), below, keptBelow)
		}
		// Every node that sees it purges it: its records too.
		testkit.WaitFor(t, "the records of the reorganization to be sent and sent again", settled)
		seq1, err := logSeq()
		if err != nil {
			t.Fatal(err)
		}
		perReorg, records = append(perReorg, ok()-sent), append(records, float64(seq1-seq0))
	}
	halt()

	if f := failures.Load(); f > 0 {
		t.Fatalf("%d of %d client reads through Varnish failed; last: %v", f, reads.Load(), lastErr.Load())
	}
	p99, n := histogramP99(t, edges[0].m.CDN.Lag, edges[1].m.CDN.Lag)
	t.Logf("client reads through Varnish: %d, none failed", reads.Load())
	t.Logf("purge lag (cdn_purge_lag_seconds, %d purges): p99 <= %v s (the bucket's upper bound)", n, p99)
	t.Logf("CDN purge requests per reorganization (depths 1, 5, 20, 40): %v, for %v records of the fleet's purge log", perReorg, records)
	// The goal is 2: one and its resend. Each node that sees the
	// reorganization publishes its purge, and the fork search a second
	// (docs/cdn.md: the figures and why); records every node has applied
	// when the first goes are merged, so never more than one request and
	// its resend a record.
	for i, r := range perReorg {
		if r > 2*records[i] {
			t.Errorf("the reorganization of depth %d cost %v CDN purge requests for %v records, want at most 2 a record", []int{1, 5, 20, 40}[i], r, records[i])
		}
	}
}
