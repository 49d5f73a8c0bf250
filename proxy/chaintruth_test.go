package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// startSecondSimAt is startSecondSim on a clock of its own.
func startSecondSimAt(t *testing.T, now func() time.Time) *secondSim {
	t.Helper()
	s := sim.New(sim.Config{Auth: true, Credentials: mirrorCreds, Now: now})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(ln)
	var once sync.Once
	stop := func() { once.Do(func() { hs.Close(); s.Close() }) }
	t.Cleanup(stop)
	return &secondSim{Server: s, url: "http://" + ln.Addr().String(), close: stop}
}

// The chain-truth cases: each fails on 6858c2c.

// TestFleetPurgeOutlivesWhatItPurged: a purge by route leaves the Redis
// copy of a final answer in place (only a purge by url or hash deletes by
// key); a node started after the purge record's old retention (601 s with
// the shipped configuration: the overrides' TTLs only, while a final entry
// lives 24 h 10 min) still judges that copy purged, also after one more
// purge. On 6858c2c it served the purged answer as "hit; detail=shared",
// max-age=86400.
func TestFleetPurgeOutlivesWhatItPurged(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withPurgeToken)
	target := finalTarget(h, 3)
	warmAll(t, target, edges...)
	h.clock.Advance(30 * time.Second)
	edges[0].purge(`{"route":"transaction-list"}`)
	h.clock.Advance(20 * time.Minute)
	late := startPurgeEdge(h, rdb.addr, nil)
	// One more purge, of something else, reaches every node: on 6858c2c it
	// made each drop the first record, as aged out.
	edges[0].purge(`{"url":"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=3"}`)
	testkit.WaitFor(t, "the second purge on the new node", func() bool {
		return testutil.ToFloat64(late.m.Purges.WithLabelValues("url", "hard")) == 1
	})
	before := h.upstreamCalls()
	r := late.get(target)
	if r.status != 200 || strings.Contains(r.header["Cache-Status"], "shared") || h.upstreamCalls() != before+1 {
		t.Fatalf("a node started 20 min after the purge: %q (Age %s), %d upstream calls: the purged copy from Redis",
			r.header["Cache-Status"], r.header["Age"], h.upstreamCalls()-before)
	}
}

// blockListOf reads the heights and hashes of a block-list answer, newest
// first.
func blockListOf(t *testing.T, body []byte) (heights []int64, hashes []string) {
	t.Helper()
	var env struct {
		Data []struct {
			BlockList []struct {
				Height string `json:"height"`
				Hash   string `json:"hash"`
			} `json:"blockList"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || len(env.Data) != 1 {
		t.Fatalf("not a block list: %.200s", body)
	}
	for _, b := range env.Data[0].BlockList {
		h, _ := strconv.ParseInt(b.Height, 10, 64)
		heights, hashes = append(heights, h), append(hashes, b.Hash)
	}
	return heights, hashes
}

// TestReorgDeeperThanThePageIsProbedToItsFork: clients ask the 20 newest
// blocks while the chain moves; a reorganization of 41 blocks replaces
// every row of that page. The edge asks further back until the hashes
// agree, counts the reorg once with its fork and depth, and no final
// answer of the replaced branch is served again. On 6858c2c nothing below
// the page was purged: the old branch's transaction lists stayed final
// for a day.
func TestReorgDeeperThanThePageIsProbedToItsFork(t *testing.T) {
	const depth = 41
	// The default page (20) asked as it is (cache.block_pages off): with
	// it on, the page of 100 holds a 41-block reorganization's fork
	// (TestForkSearchFindsTheTrueFork has one deeper than 100).
	h := newHarness(t, withBlockPagesOff)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	tx := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	}
	// The head page as the chain moves, 60 blocks: the edge sees the
	// hashes of every height, and clients read the transactions of each.
	start := h.sim.Head("CHAINX")
	for range 60 {
		h.clock.Advance(3 * time.Second) // one block (explorer-sim's default interval)
		h.get(blocks)
	}
	head := h.sim.Head("CHAINX")
	if head < start+50 {
		t.Fatalf("the chain moved from %d to %d only", start, head)
	}
	var old []string
	for hh := head - depth - 5; hh <= h.p.truth.Final("CHAINX"); hh++ {
		h.get(tx(hh))
		old = append(old, tx(hh))
	}
	h.sim.SetFaults(sim.Faults{Reorg: depth})
	fork := head - depth + 1
	h.clock.Advance(time.Second + time.Millisecond) // the head page is stale: the next ask refreshes it
	h.get(blocks)
	probes := func() float64 { return testutil.ToFloat64(h.m.ReorgProbes.WithLabelValues("CHAINX")) }
	reorgs := func() float64 { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) }
	testkit.WaitFor(t, "the reorg found by a probe", func() bool { return reorgs() > 0 })
	if reorgs() != 1 || probes() < 1 {
		t.Fatalf("reorgs_total %v, probes %v: want the reorg found once, by a probe", reorgs(), probes())
	}
	wrong := 0
	for _, target := range old {
		want := h.simGet(target)
		r := h.get(target)
		if !bytes.Equal(r.body, want) {
			wrong++
			t.Errorf("%s after the reorg (fork %d): %q, not what the upstream says now", target, fork, r.header["Cache-Status"])
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d answers of the replaced branch served after the reorg", wrong, len(old))
	}
	// Below the fork, the final answers are still hits.
	below := tx(fork - 2)
	h.get(below)
	if r := h.get(below); isMiss(r) {
		t.Errorf("a final answer below the fork: %q, want a hit", r.header["Cache-Status"])
	}
}

// TestReorgCountedOnceAtItsFork: reorganizations of 1 to 6 blocks, each
// seen by several block lists (pages of the newest blocks of several
// sizes, asked one after the other), are each counted once, and each
// logged with its fork height. On 6858c2c 6 reorgs counted 22 times.
func TestReorgCountedOnceAtItsFork(t *testing.T) {
	h := newHarness(t)
	lists := []string{"", "&limit=5", "&limit=50", "&limit=100"}
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	for _, l := range lists {
		h.get(blocks + l)
	}
	for depth := 1; depth <= 6; depth++ {
		h.clock.Advance(3 * time.Second)
		for _, l := range lists {
			h.get(blocks + l)
		}
		h.sim.SetFaults(sim.Faults{Reorg: depth})
		h.clock.Advance(1100 * time.Millisecond)
		for _, l := range lists {
			h.get(blocks + l)
		}
		// The lists are stale, not expired: their refreshes run behind.
		reorgs := func() float64 { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) }
		testkit.WaitFor(t, fmt.Sprintf("reorg %d found", depth), func() bool { return reorgs() >= float64(depth) })
		h.clock.Advance(3 * time.Second) // expired: the next asks wait for their answers
		for _, l := range lists {
			h.get(blocks + l)
		}
		if n := reorgs(); n != float64(depth) {
			t.Fatalf("after %d reorgs: reorgs_total %v", depth, n)
		}
	}
}

// withLaggingMirror adds a second account whose explorer-sim runs behind
// the harness's clock (set in *clk once the harness is made) by lag.
func withLaggingMirror(t *testing.T, clk *atomic.Pointer[clock], lag time.Duration) (harnessOpt, *secondSim) {
	start := newClock()
	m := startSecondSimAt(t, func() time.Time {
		if c := clk.Load(); c != nil {
			return c.Now().Add(-lag)
		}
		return start.Now().Add(-lag)
	})
	return func(c *config.Config, _ *sim.Config) {
		c.Upstream.Accounts = []config.Account{{Name: "mirror", BaseURL: m.url, APIKey: mirrorCreds.APIKey,
			SecretKey: mirrorCreds.SecretKey, Passphrase: mirrorCreds.Passphrase, Rate: 10000, Burst: 10000}}
	}, m
}

// TestHeadNeverGoesBack: two accounts, one of them 20 blocks behind. A
// client polling the newest page never gets an older head than it got
// before, as the chain moves; the lagging account's lag is a gauge, and
// it answers no head question while it lags. On 6858c2c the newest page
// went back thousands of times, by up to 19 blocks, as fresh hits.
func TestHeadNeverGoesBack(t *testing.T) {
	var clk atomic.Pointer[clock]
	opt, m := withLaggingMirror(t, &clk, 60*time.Second)
	h := newHarness(t, opt)
	clk.Store(h.clock)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	var last int64
	back := 0
	for i := range 60 {
		h.clock.Advance(1100 * time.Millisecond)
		r := h.get(blocks)
		if r.status != 200 {
			t.Fatalf("poll %d: %d %s", i, r.status, r.body)
		}
		heights, _ := blockListOf(t, r.body)
		if len(heights) == 0 {
			t.Fatalf("poll %d: an empty page", i)
		}
		if heights[0] < last {
			back++
			t.Errorf("poll %d: head %d after %d (%q)", i, heights[0], last, r.header["Cache-Status"])
		}
		last = max(last, heights[0])
	}
	if back > 0 {
		t.Fatalf("the newest page went back %d times in 60 polls", back)
	}
	lag := gathered(t, h).value(t, "explorer_edge_upstream_account_head_lag_blocks", "account", "mirror", "chain", "CHAINX")
	if calls(m.Server) > 0 && lag < 15 {
		t.Errorf("the lagging account answered %d calls; its lag gauge says %v blocks, want about 20", calls(m.Server), lag)
	}
}

// TestTipDoesNotFreezeUnderMisses: a busy client walks uncached
// transaction lists (four at a time) at a budget they saturate, while two
// clients poll the newest block page and the chain moves a block a second.
// The refreshes of the page go ahead of the misses for the budget, so the
// page stays within 2 blocks of the upstream's head (3 allowed here for a
// loaded machine). On 6858c2c the page's refreshes never won a token while
// misses queued: most answers were stale-if-error-quota and the lag grew
// to tens of blocks.
func TestTipDoesNotFreezeUnderMisses(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = 10, 10
		c.Upstream.BudgetWait = 2 * time.Second
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	// The test clock follows real time, so the chain moves as the budget
	// refills.
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Now()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				h.clock.Advance(now.Sub(last))
				last = now
			}
		}
	}()
	final := h.sim.FinalizedHeight("CHAINX")
	var next atomic.Int64
	next.Store(final - 5000)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.get(fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", next.Add(1)))
			}
		}()
	}
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	type poll struct {
		lag    int64
		status string
	}
	polls := make(chan poll, 1000)
	deadline := time.Now().Add(8 * time.Second)
	var pw sync.WaitGroup
	for range 2 {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for time.Now().Before(deadline) {
				head := h.sim.Head("CHAINX")
				r := h.get(blocks)
				if r.status != 200 {
					continue
				}
				heights, _ := blockListOf(t, r.body)
				if len(heights) > 0 && time.Until(deadline) < 6*time.Second { // after 2 s of warming up
					polls <- poll{head - heights[0], r.header["Cache-Status"]}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	pw.Wait()
	close(polls)
	n, over, worst := 0, 0, int64(0)
	for p := range polls {
		n++
		worst = max(worst, p.lag)
		if p.lag > 3 {
			over++
			if over <= 5 {
				t.Logf("lag %d blocks: %q", p.lag, p.status)
			}
		}
	}
	t.Logf("%d polls, %d more than 3 blocks behind, worst %d; %d upstream calls", n, over, worst, h.upstreamCalls())
	if n < 20 {
		t.Fatalf("%d polls only", n)
	}
	if age := gathered(t, h).value(t, "explorer_edge_head_age_seconds", "chain", "CHAINX"); age < 0 || age > 4 {
		t.Errorf("head_age_seconds{chain=CHAINX} = %v at the end, want the age of a page refreshed every second or two", age)
	}
	if over > n/20 {
		t.Fatalf("%d of %d polls of the newest page more than 3 blocks behind (worst %d): the tip froze under misses", over, n, worst)
	}
}

// TestFleetReorgReachesALateNode: two nodes see a reorganization of 5
// blocks (3 of them done); a third, started afterwards, never serves the
// replaced blocks' transaction lists, neither from Redis nor, once it has
// seen the new head, from memory. On 6858c2c it served them from Redis as
// final answers (each node found reorgs alone, and published none).
func TestFleetReorgReachesALateNode(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	tx := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	}
	for _, e := range edges {
		e.get(blocks)
	}
	head := h.sim.Head("CHAINX")
	var txs []string
	for hh := head - 4; hh <= head; hh++ {
		txs = append(txs, tx(hh))
		for _, e := range edges {
			e.get(tx(hh))
		}
	}
	h.sim.SetFaults(sim.Faults{Reorg: 5})
	h.clock.Advance(1100 * time.Millisecond)
	for _, e := range edges {
		e.get(blocks)
	}
	testkit.WaitFor(t, "the reorg found", func() bool {
		return testutil.ToFloat64(edges[0].m.Reorgs.WithLabelValues("CHAINX")) == 1
	})
	late := startFleetEdge(h)
	check := func(when string) {
		for _, target := range txs {
			if r := late.get(target); !bytes.Equal(r.body, h.simGet(target)) {
				t.Errorf("%s, %s: %q (Age %s), an answer of the replaced branch", when, target, r.header["Cache-Status"], r.header["Age"])
			}
		}
	}
	check("a node started after the reorg")
	late.get(blocks)
	check("the late node after the new head")
}

// TestReplacedAnswerNeverStandsIn: after a reorganization, an answer of
// the replaced branch is not served in place of a failure: with the
// upstream failing, the client gets the error, not the old branch. On
// 6858c2c the reorg soft-purged it, and it was served as
// stale-if-error.
func TestReplacedAnswerNeverStandsIn(t *testing.T) {
	h := newHarness(t)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	h.get(blocks)
	head := h.sim.Head("CHAINX")
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", head)
	old := h.get(target)
	h.sim.SetFaults(sim.Faults{Reorg: 2})
	h.clock.Advance(1100 * time.Millisecond)
	h.get(blocks) // stale: its refresh shows the reorg
	testkit.WaitFor(t, "the reorg found", func() bool { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) == 1 })
	h.sim.SetFaults(sim.Faults{HTTP500: 1})
	h.clock.Advance(10 * time.Second) // past the head class's fresh and stale-while-revalidate times
	r := h.get(target)
	if bytes.Equal(r.body, old.body) {
		t.Fatalf("the replaced branch's answer served while the upstream fails: %q", r.header["Cache-Status"])
	}
	if r.status != 502 {
		t.Errorf("%d %q, want 502: nothing may stand in", r.status, r.header["Cache-Status"])
	}
}

// TestFleetNodeLearnsFinalityFromRedis: a node that reads the newest
// block list only from Redis (another node fetched it) learns the
// finalized height from it, up to the height it confirmed from the
// upstream itself (docs/design.md, "Chain truth": here one block at the
// head, asked of the upstream, none of it done), and so classes a done
// block's transactions final. On 6858c2c only the node that fetched a
// block list from the upstream learned it.
func TestFleetNodeLearnsFinalityFromRedis(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2)
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	edges[0].get(blocks)
	edges[1].get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=1", h.sim.Head("CHAINX")))
	if f := edges[1].p.truth.Final("CHAINX"); f != 0 {
		t.Fatalf("finalized height %d from a block not done", f)
	}
	if r := edges[1].get(blocks); !strings.Contains(r.header["Cache-Status"], "shared") {
		t.Fatalf("the second node's block list: %q, want it from Redis", r.header["Cache-Status"])
	}
	want := h.sim.FinalizedHeight("CHAINX")
	if got := edges[1].p.truth.Final("CHAINX"); got != want {
		t.Fatalf("finalized height %d on the node that read the block list from Redis, want %d", got, want)
	}
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", want-1)
	if r := edges[1].get(target); !strings.Contains(r.header["Cache-Control"], "max-age=86400") {
		t.Errorf("a done block's transactions on that node: %q, want final (max-age=86400)", r.header["Cache-Control"])
	}
}
