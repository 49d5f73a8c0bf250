package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/fleet"
	"explorer-edge/internal/testkit"
	"explorer-edge/metrics"
	"explorer-edge/proxy/node"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// Fleet mode (docs/fleet.md) against a real redis-server on a free
// port: several edges in this process share it and one explorer-sim.

// redisServer is a redis-server child process on a loopback port.
type redisServer struct {
	t     testing.TB
	bin   string
	addr  string
	extra []string // more redis-server arguments
	cmd   *exec.Cmd
}

// startRedis starts redis-server on a free port, without persistence, and
// stops it at the end of the test. Without the binary the test is skipped.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	r := newRedis(t)
	r.start()
	return r
}

// newRedis picks a free port for a redis-server that start runs.
func newRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("fleet mode needs redis-server on PATH (Debian: apt-get install redis-server); skipped")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := &redisServer{t: t, bin: bin, addr: addr}
	t.Cleanup(r.stop)
	return r
}

// start runs redis-server on r.addr and returns once it answers PING.
func (r *redisServer) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command(r.bin, append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, r.extra...)...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	testkit.WaitFor(r.t, "redis-server to answer PING", func() bool { return redisPing(r.addr) })
}

// stop kills redis-server and reaps it; stopping twice is fine.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line == "+PONG\r\n"
}

// fleetEdge is one edge of a fleet; the embedded harness's get and do
// talk to it.
type fleetEdge struct {
	*harness
	shared *fleet.Redis
}

// newFleet starts explorer-sim and n edges in front of it that share rdb.
// opts change the configuration of all of them.
func newFleet(t testing.TB, rdb *redisServer, n int, opts ...harnessOpt) (*harness, []*fleetEdge) {
	t.Helper()
	opts = append([]harnessOpt{func(c *config.Config, _ *sim.Config) {
		// Two cores shared with other builds, and -race: a loopback round
		// trip can exceed the production default of 50ms, and a node that
		// times out goes on alone (by design), which is not what these tests
		// are about. TestFleetGoesOnAloneWhileRedisIsDown stops Redis for that.
		c.Shared.Timeout = time.Second
	}}, opts...)
	opts = append(opts, func(c *config.Config, _ *sim.Config) { c.Shared.RedisAddr = rdb.addr })
	h := newUpstream(t, nil, opts...)
	edges := make([]*fleetEdge, n)
	for i := range edges {
		edges[i] = startFleetEdge(h)
	}
	return h, edges
}

// startFleetEdge starts an edge for h.cfg (in fleet mode: shared.redis_addr
// is set) and serves it on a free port. wrap, if given, stands between the
// edge and the tier.
func startFleetEdge(base *harness, wrap ...func(*fleet.Redis) Tier) *fleetEdge {
	e := &fleetEdge{harness: base.sibling()}
	var o NodeOptions
	if len(wrap) > 0 {
		o.Extend = func(opts *Options) {
			r, ok := opts.Tier.(*fleet.Redis)
			if !ok {
				base.t.Fatalf("the tier Start built is a %T, not the fleet's", opts.Tier)
			}
			for _, w := range wrap {
				opts.Tier = w(r)
			}
		}
	}
	e.shared = e.startNode(o).Fleet()
	return e
}

func (e *fleetEdge) sharedCount(op, outcome string) float64 {
	return testutil.ToFloat64(e.m.SharedRequests.WithLabelValues(op, outcome))
}

func TestFleetFillByOneNodeIsAHitOnAll(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 3)
	confirmHeads(t, "CHAINX", edges...)
	height := h.sim.FinalizedHeight("CHAINX") - 5
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	// A block list teaches edge 0 the finalized height, so the block's
	// transactions are final (24h); the others learn the class from Redis.
	if r := edges[0].get("/api/v5/chainx/block/block-list?chainShortName=chainx"); r.status != 200 {
		t.Fatalf("block list: %d %s", r.status, r.body)
	}
	before := h.upstreamCalls()
	first := edges[0].get(target)
	if first.status != 200 || !strings.Contains(first.header["Cache-Status"], "fwd=miss") {
		t.Fatalf("first answer: %d %q %s", first.status, first.header["Cache-Status"], first.body)
	}
	// Age and TTL come from the entry's absolute times, so they carry over.
	h.clock.Advance(7 * time.Second)
	for i, e := range edges[1:] {
		r := e.get(target)
		if r.status != 200 || !bytes.Equal(r.body, first.body) {
			t.Fatalf("edge %d: %d %s", i+1, r.status, r.body)
		}
		if cs := r.header["Cache-Status"]; !strings.HasPrefix(cs, "explorer-edge; hit; ttl=86393") || !strings.Contains(cs, "detail=shared") {
			t.Errorf("edge %d Cache-Status = %q, want a shared hit with 24h-7s left", i+1, cs)
		}
		if r.header["Age"] != "7" || r.header["Etag"] != first.header["Etag"] {
			t.Errorf("edge %d: Age %q ETag %q, want 7 and %q", i+1, r.header["Age"], r.header["Etag"], first.header["Etag"])
		}
		// Now in its own Ristretto: a plain hit.
		if cs := e.get(target).header["Cache-Status"]; strings.Contains(cs, "shared") {
			t.Errorf("edge %d: second request still went to Redis: %q", i+1, cs)
		}
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("one key on three nodes cost %d upstream calls, want 1", n)
	}

	// Per-hash items go through the shared tier too: a hash that one node
	// fetched in a batch is a hit for transaction-fills on another.
	hashes := h.sim.CrossHashes("TRADE_ZONE", 2)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ",")
	if r := edges[0].get(multi); r.status != 200 {
		t.Fatalf("transaction-multi: %d %s", r.status, r.body)
	}
	before = h.upstreamCalls()
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hashes[1]
	if r := edges[2].get(fills); r.status != 200 || !bytes.Equal(r.body, h.simGet(fills)) {
		t.Fatalf("transaction-fills from the shared tier: %d %s", r.status, r.body)
	}
	if n := h.upstreamCalls() - before - 1; n != 0 { // the -1 is simGet's own call
		t.Fatalf("a hash cached by another node cost %d upstream calls", n)
	}
}

// countingTier counts an edge's lookups in the shared tier.
type countingTier struct {
	*fleet.Redis
	gets, getManys, keys atomic.Int64
}

func (c *countingTier) Get(key string, now time.Time) *cache.Entry {
	c.gets.Add(1)
	return c.Redis.Get(key, now)
}

func (c *countingTier) GetMany(keys []string, now time.Time) []*cache.Entry {
	c.getManys.Add(1)
	c.keys.Add(int64(len(keys)))
	return c.Redis.GetMany(keys, now)
}

// A per-hash request looks up every hash missing from Ristretto in one
// pipelined round trip to Redis, not one per hash, and asks the upstream
// only for the hashes Redis did not have.
func TestFleetLooksUpMissingHashesInOneRoundTrip(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 1)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 20)
	multi := func(hs []string) string {
		return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hs, ",")
	}
	if r := edges[0].get(multi(hashes[:12])); r.status != 200 {
		t.Fatalf("first node: %d %s", r.status, r.body)
	}
	var counts *countingTier
	other := startFleetEdge(h, func(r *fleet.Redis) Tier {
		counts = &countingTier{Redis: r}
		return counts
	})
	before := len(h.rec.all())
	r := other.get(multi(hashes))
	calls := h.rec.all()[before:]
	if want := h.simGet(multi(hashes)); r.status != 200 || !bytes.Equal(r.body, want) {
		t.Fatalf("second node: %d %s\nwant %s", r.status, r.body, want)
	}
	if g, m, k := counts.gets.Load(), counts.getManys.Load(), counts.keys.Load(); g != 0 || m != 1 || k != 20 {
		t.Fatalf("lookups in Redis: %d Get, %d GetMany for %d keys; want 0, 1 for 20", g, m, k)
	}
	if len(calls) != 1 {
		t.Fatalf("upstream calls %q, want one for the 8 hashes Redis lacked", calls)
	}
	u, err := url.Parse(calls[0])
	if err != nil {
		t.Fatal(err)
	}
	asked := strings.Split(u.Query().Get("txId"), ",")
	slices.Sort(asked)
	want := slices.Clone(hashes[12:])
	slices.Sort(want)
	if !slices.Equal(asked, want) {
		t.Fatalf("upstream asked for %v, want the 8 hashes not in Redis %v", asked, want)
	}
}

// A node with no copy of its own (started during an upstream outage, say)
// serves the copy another node keeps in Redis within stale_if_error, as it
// would its own, for a failed fetch and for an envelope that says the
// upstream is failing.
func TestFleetServesTheSharedStaleCopyWhenTheUpstreamFails(t *testing.T) {
	for _, k := range []struct {
		name   string
		fault  sim.Faults
		detail string
	}{
		{"http500", sim.Faults{HTTP500: 1}, "stale-if-error-upstream-error"},
		{"envelope", sim.Faults{Envelope: 1}, "stale-if-error-upstream-envelope"},
	} {
		t.Run(k.name, func(t *testing.T) {
			rdb := startRedis(t)
			h, edges := newFleet(t, rdb, 1, func(c *config.Config, _ *sim.Config) {
				c.Cache.StaleWhileRevalidate = config.SameForAll(time.Second)
				c.Cache.StaleIfError = time.Minute
				c.Upstream.Retries = 0
				c.Upstream.BreakerFailures = 100
			})
			target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
			good := edges[0].get(target)
			if good.status != 200 {
				t.Fatalf("first node: %d %s", good.status, good.body)
			}
			h.sim.SetFaults(k.fault)
			h.clock.Advance(5 * time.Second) // expired, within stale_if_error
			late := startFleetEdge(h)
			for i := range 2 { // from Redis, then from its own Ristretto
				r := late.get(target)
				if r.status != 200 || !bytes.Equal(r.body, good.body) || !strings.Contains(r.header["Cache-Status"], "detail="+k.detail) {
					t.Fatalf("request %d on the new node: %d %q %.80s", i, r.status, r.header["Cache-Status"], r.body)
				}
			}
			h.clock.Advance(2 * time.Minute) // beyond stale_if_error
			if r := late.get(target); r.code() == "0" {
				t.Fatalf("beyond stale_if_error: %d %q %.80s", r.status, r.header["Cache-Status"], r.body)
			}
		})
	}
}

// A node with no copy of its own serves the copy in Redis within
// stale_while_revalidate at once, as it would its own, and refreshes it
// once behind the answer.
func TestFleetServesTheSharedCopyWhileRevalidating(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 1, func(c *config.Config, _ *sim.Config) {
		c.Cache.StaleWhileRevalidate = config.SameForAll(time.Minute)
	})
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	good := edges[0].get(target) // the head page: fresh for 1 s
	if good.status != 200 {
		t.Fatalf("first node: %d %s", good.status, good.body)
	}
	late := startFleetEdge(h)
	confirmHeads(t, "CHAINX", late)  // the head of the page in Redis (docs/design.md, "Chain truth")
	h.clock.Advance(5 * time.Second) // stale, within stale_while_revalidate
	before := h.upstreamCalls()
	// The refresh must not finish while the 20 are answered (a -race run
	// with one CPU saw it do so with a 500 ms delay): it is held until then.
	gate := h.holdUpstream()
	defer gate.release()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := late.get(target)
			if r.status != 200 || !bytes.Equal(r.body, good.body) || !strings.Contains(r.header["Cache-Status"], "detail=stale-while-revalidate") {
				t.Errorf("new node: %d %q %.80s", r.status, r.header["Cache-Status"], r.body)
			}
		}()
	}
	wg.Wait()
	gate.release()
	key := cacheKey(t, late.p, target)
	testkit.WaitFor(t, "the refresh", func() bool {
		return late.cache.GetString(key).StateAt(h.clock.Now().UnixNano()) == cache.Fresh
	})
	r := late.get(target)
	if !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") || strings.Contains(r.header["Cache-Status"], "detail=") {
		t.Fatalf("after the refresh: %q, want a plain hit", r.header["Cache-Status"])
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("%d upstream calls, want exactly one refresh", n)
	}
}

func TestFleetConcurrentColdRequestsCostOneCall(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 3, func(_ *config.Config, s *sim.Config) {
		s.Faults = sim.Faults{Latency: 100 * time.Millisecond} // keep the fetch open while all arrive
	})
	confirmHeads(t, "CHAINX", edges...)
	confirmed := h.upstreamCalls()
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=30"
	var wg sync.WaitGroup
	bodies := make([][]byte, 90)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := edges[i%len(edges)].get(target)
			if r.status != 200 {
				t.Errorf("status %d %s", r.status, r.body)
			}
			bodies[i] = r.body
		}()
	}
	wg.Wait()
	logShared(t, edges)
	if n := h.upstreamCalls() - confirmed; n != 1 {
		t.Fatalf("90 cold requests over 3 nodes cost %d upstream calls, want 1", n)
	}
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatal("answers differ between nodes")
		}
	}
	waits := 0.0
	for _, e := range edges {
		waits += testutil.ToFloat64(e.m.SharedLockWait.WithLabelValues("filled"))
	}
	if waits < 1 {
		t.Errorf("no node waited for another's fetch (shared_lock_waits_total{outcome=filled} = %v)", waits)
	}
}

func TestFleetSharesOneUpstreamBudget(t *testing.T) {
	rdb := startRedis(t)
	const rate, burst = 20, 20
	h, edges := newFleet(t, rdb, 3, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = rate, burst
	})
	// Hundreds of distinct keys from many clients for a bounded time: far
	// more misses than the quota allows.
	var next, ok, refused atomic.Int64
	start := time.Now()
	stop := start.Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				page := next.Add(1)%500 + 1
				r := edges[w%len(edges)].get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&page=%d", page))
				switch {
				case r.status == 200 && r.code() == "0":
					ok.Add(1)
				case r.status == 503 && r.code() == "50001" && r.header["Retry-After"] != "":
					refused.Add(1)
				default:
					t.Errorf("neither data nor a well-formed 503/50001: %d %v %s", r.status, r.header, r.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	calls := h.upstreamCalls()
	logShared(t, edges)
	limit := int64(rate*elapsed) + burst
	t.Logf("%.2fs: %d answers, %d refused, %d upstream calls (limit %d)", elapsed, ok.Load(), refused.Load(), calls, limit)
	if calls > limit {
		t.Fatalf("3 nodes made %d upstream calls in %.2fs, more than rate*seconds+burst = %d", calls, elapsed, limit)
	}
	if calls < burst || refused.Load() == 0 {
		t.Fatalf("%d upstream calls, %d refused: the test did not reach the budget", calls, refused.Load())
	}
}

func TestFleetGoesOnAloneWhileRedisIsDown(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withBlockPagesOff) // a miss per question, as it counts
	confirmHeads(t, "CHAINX", edges...)
	a, b := edges[0], edges[1]
	page := 0
	target := func() string {
		page++
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&page=%d&limit=10", page)
	}
	cached := target()
	if r := a.get(cached); r.status != 200 {
		t.Fatalf("fill: %d %s", r.status, r.body)
	}
	if r := b.get(cached); !strings.Contains(r.header["Cache-Status"], "shared") {
		t.Fatalf("not shared before the outage: %q", r.header["Cache-Status"])
	}

	rdb.stop()
	for i := 0; i < 20; i++ {
		for _, e := range edges {
			if r := e.get(cached); r.status != 200 || !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") {
				t.Fatalf("cached key while Redis is down: %d %q %s", r.status, r.header["Cache-Status"], r.body)
			}
			before := h.upstreamCalls()
			if r := e.get(target()); r.status != 200 || r.code() != "0" {
				t.Fatalf("miss while Redis is down: %d %s", r.status, r.body)
			}
			if h.upstreamCalls() != before+1 {
				t.Fatal("a miss while Redis is down was not fetched from the upstream")
			}
		}
	}
	for i, e := range edges {
		if up := testutil.ToFloat64(e.m.SharedUp); up != 0 {
			t.Errorf("edge %d: shared_up = %v while Redis is down", i, up)
		}
		// After the first failure a node leaves Redis alone: 40 requests
		// did not each spend a round trip (or shared.timeout) on it.
		failed := 0.0
		for _, op := range []string{"get", "set", "lock", "rate"} {
			failed += e.sharedCount(op, "error") + e.sharedCount(op, "timeout")
		}
		if failed == 0 || failed > 4 {
			t.Errorf("edge %d: %v failed Redis operations during the outage, want a few", i, failed)
		}
	}

	rdb.start() // same port, empty
	testkit.WaitFor(t, "fleet mode to resume", func() bool {
		k := target()
		if r := a.get(k); r.status != 200 {
			t.Fatalf("fill after restart: %d %s", r.status, r.body)
		}
		return strings.Contains(b.get(k).header["Cache-Status"], "detail=shared")
	})
	// Each node finds Redis by its own probe; one whose purge-log poll
	// met the restart may take one more probe interval (a -race -cpu 1 run
	// saw shared_up 0 on one node at the moment the other was back).
	for i, e := range edges {
		testkit.WaitFor(t, fmt.Sprintf("edge %d: shared_up back to 1", i), func() bool { return testutil.ToFloat64(e.m.SharedUp) == 1 })
	}
}

func TestFleetEntryOfUnknownVersionIsAMiss(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withBlockPagesOff) // each question its own entry in Redis
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=40"
	want := edges[0].get(target)
	if want.status != 200 {
		t.Fatalf("fill: %d %s", want.status, want.body)
	}
	// Rewrite the stored entry as a future format would: same bytes, next
	// version byte.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Do(ctx, rc.B().Keys().Pattern(h.cfg.Shared.Prefix+"{*}").Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("entries in Redis: %v %v", keys, err)
	}
	v, err := rc.Do(ctx, rc.B().Get().Key(keys[0]).Build()).AsBytes()
	if err != nil || len(v) == 0 || v[0] != 1 {
		t.Fatalf("stored entry: % x %v", v[:min(len(v), 8)], err)
	}
	v[0] = 2
	if err := rc.Do(ctx, rc.B().Set().Key(keys[0]).Value(rueidis.BinaryString(v)).Keepttl().Build()).Error(); err != nil {
		t.Fatal(err)
	}

	r := edges[1].get(target)
	if r.status != 200 || !bytes.Equal(r.body, want.body) || !strings.Contains(r.header["Cache-Status"], "fwd=miss") {
		t.Fatalf("entry of version 2: %d %q %s", r.status, r.header["Cache-Status"], r.body)
	}
	if n := h.upstreamCalls(); n != 2 {
		t.Fatalf("%d upstream calls, want 2: the unreadable entry must be a miss", n)
	}
	// The node that missed stored its own answer over it.
	if v, _ := rc.Do(ctx, rc.B().Get().Key(keys[0]).Build()).AsBytes(); len(v) == 0 || v[0] != 1 {
		t.Fatalf("entry not rewritten in the current format: % x", v[:min(len(v), 8)])
	}
}

// The fetch lock on its own: bounded waits, the holder's answer handed to
// the waiter, a dead holder's lock taken over, and no wait at all without
// Redis.
func TestFleetLockBounds(t *testing.T) {
	rdb := startRedis(t)
	cfg := config.Default()
	cfg.Shared.RedisAddr = rdb.addr
	cfg.Shared.Timeout = time.Second // see newFleet
	cfg.Shared.LockTTL = 600 * time.Millisecond
	cfg.Shared.LockWait = 300 * time.Millisecond
	node := func(cfg config.Config) (*fleet.Redis, *metrics.Metrics) {
		c, _ := cache.New(cache.Config{MaxBytes: 1 << 20})
		t.Cleanup(c.Close)
		m := metrics.New(route.Names(), cfg.Chains, c)
		m.RegisterShared()
		r, err := fleet.New(node.FleetConfig(cfg), m, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r, m
	}
	a, _ := node(cfg)
	b, bm := node(cfg)
	clk := newClock()
	entry := func(key string) *cache.Entry {
		return cache.NewEntry(key, []byte(`{"code":"0","data":[]}`), cache.Head, clk.Now(), time.Minute, 0, 0)
	}

	unlockA, filled := a.Lock("k1", clk.Now)
	if filled != nil {
		t.Fatal("a free lock came with an entry")
	}
	start := time.Now()
	if unlock, e := b.Lock("k1", clk.Now); e != nil {
		t.Fatal("a held lock without an answer gave an entry")
	} else {
		unlock()
	}
	// At least lock_wait (it waited); the upper bound only tells "gave up"
	// from "waited for ever", so it is generous for a busy machine.
	if took := time.Since(start); took < cfg.Shared.LockWait || took > cfg.Shared.LockWait+30*time.Second {
		t.Errorf("waiting for a busy holder took %s, want lock_wait (%s), then give up", took, cfg.Shared.LockWait)
	}
	if n := testutil.ToFloat64(bm.SharedLockWait.WithLabelValues("timeout")); n != 1 {
		t.Errorf("shared_lock_waits_total{outcome=timeout} = %v, want 1", n)
	}

	// The holder stores and unlocks while the other node waits.
	got := make(chan *cache.Entry)
	go func() {
		_, e := b.Lock("k1", clk.Now)
		got <- e
	}()
	want := entry("k1")
	a.Set(want, clk.Now())
	unlockA()
	unlockA() // safe to call again
	if e := <-got; e == nil || e.Key != "k1" || !bytes.Equal(e.Body, want.Body) || e.Fresh != want.Fresh {
		t.Fatalf("waiter got %+v, want the holder's entry", e)
	}

	// A holder that dies never unlocks: its lock expires after lock_ttl and
	// a node that waits longer than that takes over.
	patient := cfg
	patient.Shared.LockWait = time.Minute // never reached unless the takeover is broken
	c, _ := node(patient)
	a.Lock("k2", clk.Now)
	start = time.Now()
	unlockC, e := c.Lock("k2", clk.Now)
	if took := time.Since(start); e != nil || took < cfg.Shared.LockTTL/2 || took >= patient.Shared.LockWait {
		t.Fatalf("after the holder died: entry %v after %s, want the lock after about lock_ttl", e, took)
	}
	unlockC()
	if unlock, _ := a.Lock("k2", clk.Now); unlock == nil {
		t.Fatal("nil unlock")
	} else {
		unlock()
	}

	// Without Redis, nobody waits.
	rdb.stop()
	b.Get("k3", clk.Now()) // the first failure takes the node off Redis
	start = time.Now()
	unlock, e := b.Lock("k3", clk.Now)
	unlock()
	// Waiting would take lock_wait at least (the busy holder above did):
	// the bound tells "did not wait" from "waited", not a speed.
	if took := time.Since(start); e != nil || took >= cfg.Shared.LockWait {
		t.Fatalf("Lock without Redis took %s, lock_wait is %s: it waited", took, cfg.Shared.LockWait)
	}
}

// A node whose Redis is not up yet starts alone and joins when it is.
func TestFleetStartsBeforeRedis(t *testing.T) {
	rdb := newRedis(t)
	cfg := config.Default()
	cfg.Shared.RedisAddr = rdb.addr
	c, _ := cache.New(cache.Config{MaxBytes: 1 << 20})
	defer c.Close()
	m := metrics.New(route.Names(), cfg.Chains, c)
	m.RegisterShared()
	r, err := fleet.New(node.FleetConfig(cfg), m, nil)
	if err != nil {
		t.Fatalf("Redis down at start must not stop the node: %v", err)
	}
	defer r.Close()
	if up := testutil.ToFloat64(m.SharedUp); up != 0 {
		t.Fatalf("shared_up = %v before Redis runs", up)
	}
	if ok, _ := r.Budget().Take(0, false); !ok {
		t.Fatal("no local budget while Redis is down")
	}
	rdb.start()
	testkit.WaitFor(t, "shared_up to become 1", func() bool { return testutil.ToFloat64(m.SharedUp) == 1 })
	e := cache.NewEntry("k", []byte(`{"code":"0"}`), cache.Head, time.Now(), time.Minute, 0, 0)
	r.Set(e, time.Now())
	if got := r.Get("k", time.Now()); got == nil || got.ETag == nil || string(got.Body) != `{"code":"0"}` {
		t.Fatalf("after joining: got %+v", got)
	}
}

// Cluster mode on a one-node Redis Cluster that owns every slot: the
// cluster client, slot routing of entries, locks and the budget script.
func TestFleetClusterMode(t *testing.T) {
	rdb := newRedis(t)
	rdb.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", t.TempDir() + "/nodes.conf"}
	rdb.start()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Do(ctx, rc.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(0, 16383).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the cluster to be ok", func() bool {
		info, _ := rc.Do(ctx, rc.B().ClusterInfo().Build()).ToString()
		return strings.Contains(info, "cluster_state:ok")
	})

	h, edges := newFleet(t, rdb, 2, func(c *config.Config, _ *sim.Config) {
		c.Shared.RedisCluster = true
		c.Upstream.Rate, c.Upstream.Burst = 50, 50
	})
	confirmHeads(t, "CHAINX", edges...)
	confirmed, rated := h.upstreamCalls(), edges[0].sharedCount("rate", "ok")
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=25"
	if r := edges[0].get(target); r.status != 200 {
		t.Fatalf("fill: %d %s", r.status, r.body)
	}
	if r := edges[1].get(target); !strings.Contains(r.header["Cache-Status"], "detail=shared") {
		t.Fatalf("not shared in cluster mode: %q", r.header["Cache-Status"])
	}
	if n := h.upstreamCalls() - confirmed; n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
	if edges[0].sharedCount("rate", "ok") != rated+1 || edges[0].sharedCount("lock", "ok") == 0 {
		logShared(t, edges)
		t.Fatal("the filling node did not take the shared budget and lock")
	}
	for i, e := range edges {
		failed := 0.0
		for _, op := range []string{"get", "set", "lock", "rate"} {
			failed += e.sharedCount(op, "error") + e.sharedCount(op, "timeout")
		}
		if failed > 0 || testutil.ToFloat64(e.m.SharedUp) != 1 {
			logShared(t, edges)
			t.Fatalf("edge %d: shared tier failed in cluster mode", i)
		}
	}
	// A key and its lock hash to one slot (their common hash tag).
	// The confirmations' newest page (limit=20) is there too.
	keys, _ := rc.Do(ctx, rc.B().Keys().Pattern(h.cfg.Shared.Prefix+"{*limit=25}").Build()).AsStrSlice()
	if len(keys) != 1 {
		t.Fatalf("entries: %v", keys)
	}
	slot := func(k string) int64 {
		n, err := rc.Do(ctx, rc.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := slot(keys[0]), slot(keys[0]+":lock"); a != b {
		t.Fatalf("entry in slot %d, its lock in slot %d", a, b)
	}
}

// L2 hit against L1 hit: the same request on an edge in fleet mode, served
// from its Ristretto, or (the key deleted from Ristretto before each
// request) from Redis. The difference is what the shared tier adds to a
// request that another node has filled.
//
// The client takes no gzip (the answer, read compressed, is inflated for
// it); the Gzip variants are a client that takes gzip.
//
//	go test -run '^$' -bench 'L[12]Hit' -benchmem ./proxy
func BenchmarkL1Hit(b *testing.B)     { benchmarkTierHit(b, false) }
func BenchmarkL2Hit(b *testing.B)     { benchmarkTierHit(b, true) }
func BenchmarkL1HitGzip(b *testing.B) { benchmarkTierHit(b, false, "Accept-Encoding", "gzip") }
func BenchmarkL2HitGzip(b *testing.B) { benchmarkTierHit(b, true, "Accept-Encoding", "gzip") }

func benchmarkTierHit(b *testing.B, fromRedis bool, headers ...string) {
	rdb := startRedis(b)
	_, edges := newFleet(b, rdb, 1)
	e := edges[0]
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	if r := e.get(target); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	key := cacheKey(b, e.p, target)
	if e.cache.GetString(key) == nil {
		b.Fatalf("key %q not in the cache after warming", key)
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(target)
	ctx.Request.Header.SetMethod("GET")
	for i := 0; i+1 < len(headers); i += 2 {
		ctx.Request.Header.Set(headers[i], headers[i+1])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if fromRedis {
			e.cache.Del(key)
		}
		ctx.Response.Reset()
		e.p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
	b.StopTimer()
	if fromRedis && !strings.Contains(string(ctx.Response.Header.Peek("Cache-Status")), "shared") {
		b.Fatalf("not served from Redis: %s", ctx.Response.Header.Peek("Cache-Status"))
	}
}

// BenchmarkL2HitMulti is a 20-hash transaction-multi whose hashes another
// node filled: each request finds neither the answer nor its hashes in
// Ristretto (deleted before it) and all 20 hashes in Redis.
//
//	go test -run '^$' -bench 'L2HitMulti' -benchmem ./proxy
func BenchmarkL2HitMulti(b *testing.B) {
	rdb := startRedis(b)
	h, edges := newFleet(b, rdb, 1)
	e := edges[0]
	hashes := h.sim.CrossHashes("TRADE_ZONE", 20)
	target := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ",")
	if r := e.get(target); r.status != 200 {
		b.Fatalf("warm: %d %s", r.status, r.body)
	}
	q := parseTarget(b, e.p, target)
	whole := string(q.Key) // the assembled answer is cached too
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(target)
	ctx.Request.Header.SetMethod("GET")
	calls, gets := h.upstreamCalls(), e.sharedCount("get", "ok")
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		e.cache.Del(whole)
		for i := range q.NHashes {
			e.cache.Del(route.HashKey(string(q.Chain), string(q.Hash(i))))
		}
		ctx.Response.Reset()
		e.p.Handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
	b.StopTimer()
	if c := h.upstreamCalls() - calls; c != 0 {
		b.Fatalf("%d upstream calls: not served from Redis", c)
	}
	if g := e.sharedCount("get", "ok") - gets; g != float64(20*n) {
		b.Fatalf("%v hashes found in Redis in %d requests, want 20 each", g, n)
	}
}

// cacheKey is the cache key p makes of target.
func cacheKey(tb testing.TB, p *Proxy, target string) string {
	tb.Helper()
	return string(parseTarget(tb, p, target).Key)
}

// parseTarget is target's parameters as p checks and normalizes them.
func parseTarget(tb testing.TB, p *Proxy, target string) *query {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	var args fasthttp.Args
	args.Parse(u.RawQuery)
	q := new(query)
	if err := q.Parse(route.ByPath([]byte(u.Path)), &args, p.settings.Load().chains); err != nil {
		tb.Fatal(err)
	}
	return q
}

func logShared(t testing.TB, edges []*fleetEdge) {
	for i, e := range edges {
		var b strings.Builder
		for _, op := range []string{"get", "set", "lock", "rate"} {
			for _, o := range []string{"ok", "miss", "error", "timeout"} {
				if v := e.sharedCount(op, o); v > 0 {
					fmt.Fprintf(&b, " %s/%s=%v", op, o, v)
				}
			}
		}
		t.Logf("edge %d:%s", i, b.String())
	}
}
