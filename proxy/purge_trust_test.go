package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"explorer-edge/config"
	"explorer-edge/fleet"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/node"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// What Redis holds about purges (fleet/purge.go) is not trusted more than
// its entries are: each test writes a forged purge state into Redis, as
// whoever can write to it could, and checks that the fleet goes on caching,
// following the log and logging within bounds.

// purgeRedis is a client of the test's redis-server, to forge with.
type purgeRedis struct {
	t      *testing.T
	c      rueidis.Client
	prefix string
}

func newPurgeRedis(t *testing.T, h *harness, rdb *redisServer) *purgeRedis {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &purgeRedis{t: t, c: c, prefix: h.cfg.Shared.Prefix + "{purges}"}
}

func (r *purgeRedis) do(cmd rueidis.Completed) rueidis.RedisResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := r.c.Do(ctx, cmd)
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		r.t.Fatal(err)
	}
	return res
}

func (r *purgeRedis) set(name, value string) {
	r.t.Helper()
	r.do(r.c.B().Set().Key(r.prefix + name).Value(value).Build())
}

func (r *purgeRedis) del(name string) {
	r.t.Helper()
	r.do(r.c.B().Del().Key(r.prefix + name).Build())
}

// forge appends records to the log as the publish script does, numbered
// after the counter, which it moves on last (as the script, a node reads
// no record before it counts): record(n) is the member of n.
func (r *purgeRedis) forge(count int, record func(n int64) string) {
	r.t.Helper()
	seq, err := r.do(r.c.B().Get().Key(r.prefix + "seq").Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		r.t.Fatal(err)
	}
	last := seq + int64(count)
	for from := seq + 1; from <= last; from += 500 {
		cmd := r.c.B().Zadd().Key(r.prefix + "log").ScoreMember()
		for n := from; n < from+500 && n <= last; n++ {
			cmd = cmd.ScoreMember(float64(n), record(n))
		}
		r.do(cmd.Build())
	}
	r.do(r.c.B().Incrby().Key(r.prefix + "seq").Increment(int64(count)).Build())
}

// startTrustEdge is startPurgeEdge with the node's logs, the proxy's and
// the shared tier's, written to logs.
func startTrustEdge(base *harness, addr string, logs *testkit.LogBuffer, tune func(*fleet.Config)) *fleetEdge {
	e := &fleetEdge{harness: base.sibling()}
	e.log = slog.New(slog.NewJSONHandler(logs, nil))
	e.cfg.Shared.RedisAddr = addr
	e.shared = e.startNode(NodeOptions{Options: node.Options{Fleet: purgeFleet(tune)}}).Fleet()
	return e
}

// markSeq numbers the purges markRead publishes.
var markSeq struct {
	sync.Mutex
	n int
}

// markRead publishes a url purge through from and waits until to has
// applied it: to has read the log, the counter and the floor since.
func markRead(t *testing.T, from, to *fleetEdge) {
	t.Helper()
	markReadOr(t, from, to, func() string { return "" })
}

// markReadOr is markRead whose failure says state().
func markReadOr(t *testing.T, from, to *fleetEdge, state func() string) {
	t.Helper()
	markSeq.Lock()
	markSeq.n++
	page := markSeq.n
	markSeq.Unlock()
	c := to.m.Purges.WithLabelValues("url", "hard")
	before := testutil.ToFloat64(c)
	from.purge(fmt.Sprintf(`{"url":"/api/v5/chainx/block/block-list?chainShortName=chainx&page=%d"}`, 100+page))
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c) != before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the node to apply a purge published through another %s", state())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *fleetEdge) rejected(reason string) float64 {
	return testutil.ToFloat64(e.m.SharedRejected.WithLabelValues(reason))
}

// cachedTwice asks target twice on e and reports whether the second
// answer was a hit.
func cachedTwice(t *testing.T, e *fleetEdge, target string) bool {
	t.Helper()
	if r := e.get(target); r.status != 200 {
		t.Fatalf("%s: %d %s", target, r.status, r.body)
	}
	r := e.get(target)
	if r.status != 200 {
		t.Fatalf("%s: %d %s", target, r.status, r.body)
	}
	return !isMiss(r)
}

const tenYears = 10 * 365 * 24 * time.Hour

// TestFleetPurgeFloorFromTheFutureRefused: a floor ten years ahead made
// every node store nothing for ever (before: every request of a done
// block went upstream, twice per key; deleting the key did not heal).
// Now it is refused and counted once; a floor within the skew is taken,
// and deleting it heals at the next read.
func TestFleetPurgeFloorFromTheFutureRefused(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withPurgeToken)
	confirmHeads(t, "CHAINX", edges...)
	rc := newPurgeRedis(t, h, rdb)
	e := edges[0]

	rc.set("floor", strconv.FormatInt(h.clock.Now().Add(tenYears).UnixNano(), 10))
	markRead(t, edges[1], e)
	target := finalTarget(h, 3)
	before := h.upstreamCalls()
	if !cachedTwice(t, e, target) {
		t.Fatal("a floor ten years ahead was taken: the node keeps nothing")
	}
	if r := edges[1].get(target); isMiss(r) || !strings.Contains(r.header["Cache-Status"], "shared") {
		t.Fatalf("the other node: %q, want the entry the first stored in Redis", r.header["Cache-Status"])
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("%d upstream calls for one key on two nodes, want 1", n)
	}
	markRead(t, edges[1], e) // more reads of the same floor: said once
	if n := e.rejected("purge_floor"); n != 1 {
		t.Fatalf("shared_rejected_total{reason=purge_floor} = %v, want 1", n)
	}

	// Within the skew a floor is taken (it may be a node's whose clock is
	// a little ahead)...
	rc.set("floor", strconv.FormatInt(h.clock.Now().Add(purge.Skew/2).UnixNano(), 10))
	markRead(t, edges[1], e)
	target = finalTarget(h, 4)
	if cachedTwice(t, e, target) {
		t.Fatal("a floor within the skew was not taken")
	}
	// ... and the node follows it down: deleted, it holds nothing back.
	rc.del("floor")
	markRead(t, edges[1], e)
	if !cachedTwice(t, e, target) {
		t.Fatal("the floor was deleted from Redis, and the node still keeps nothing")
	}
}

// TestFleetPurgeRecordFromTheFutureRefused: a forged {"all":true} ten
// years ahead purged every node's memory and never aged out of their
// logs, so that every entry read from Redis was purged. Now it is refused
// and counted; the nodes keep what they hold and go on storing.
func TestFleetPurgeRecordFromTheFutureRefused(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withPurgeToken)
	rc := newPurgeRedis(t, h, rdb)
	e := edges[0]
	held := finalTarget(h, 3)
	warmAll(t, held, edges...)

	at := h.clock.Now().Add(tenYears).UnixNano()
	rc.forge(1, func(n int64) string { return fmt.Sprintf(`%d %d {"all":true}`, n, at) })
	markRead(t, edges[1], e)
	if e.cache.GetString(cacheKey(t, e.p, held)) == nil {
		t.Fatal("a record ten years ahead purged the node's memory")
	}
	if n := testutil.ToFloat64(e.m.Purges.WithLabelValues("all", "hard")); n != 0 {
		t.Fatalf("purges_total{selector=all} = %v, want 0", n)
	}
	if n := e.rejected("purge_record"); n != 1 {
		t.Fatalf("shared_rejected_total{reason=purge_record} = %v, want 1", n)
	}
	target := finalTarget(h, 4)
	before := h.upstreamCalls()
	if !cachedTwice(t, e, target) {
		t.Fatal("the node keeps nothing after the forged record")
	}
	if r := edges[1].get(target); isMiss(r) {
		t.Fatalf("the other node: %q, want the entry the first stored in Redis", r.header["Cache-Status"])
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("%d upstream calls for one key on two nodes, want 1", n)
	}
}

// TestFleetPurgeLogLargeRecordsPaged: 2,000 records of 20 KB (40 MB)
// made every read of the log time out, so the node left the fleet and
// never came back (its catch-up read timed out too). Now the log is read
// a page at a time and a record over fleet.MaxPurgeRecord is not even
// carried: the node stays in the fleet, reconnects after a cut, counts
// each record once and applies the purges published after them.
func TestFleetPurgeLogLargeRecordsPaged(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 1, withPurgeToken)
	rc := newPurgeRedis(t, h, rdb)
	cut := newCutProxy(t, rdb.addr)
	// The production shared.timeout is 50ms; 250ms leaves room for -race
	// on two busy cores, and far less than 40 MB needs.
	e := startPurgeEdge(h, cut.addr(), func(c *fleet.Config) { c.Timeout = 250 * time.Millisecond })
	up := func(want float64) func() bool {
		return func() bool { return testutil.ToFloat64(e.m.SharedUp) == want }
	}
	testkit.WaitFor(t, "the node to join", up(1))

	big := strings.Repeat("x", 20<<10)
	rc.forge(2000, func(n int64) string {
		return fmt.Sprintf(`%d %d {"url":"/api/v5/chainx/block/block-list?chainShortName=chainx&x=%s"}`, n, h.clock.Now().UnixNano(), big)
	})
	markReadOr(t, edges[0], e, func() string {
		return fmt.Sprintf("(shared_up %v, purge log reads timed out %v)", testutil.ToFloat64(e.m.SharedUp), e.sharedCount("get", "timeout"))
	})
	if n := e.rejected("purge_record"); n != 2000 {
		t.Fatalf("shared_rejected_total{reason=purge_record} = %v, want 2000", n)
	}
	if !up(1)() {
		t.Fatal("the node left the fleet reading the log")
	}

	// Cut off and back: the catch-up read before it uses Redis again
	// reads the log from its last place, and is bounded too.
	cut.setCut(true)
	testkit.WaitFor(t, "the node to notice the cut", up(0))
	rc.forge(500, func(n int64) string {
		return fmt.Sprintf(`%d %d {"url":"/api/v5/chainx/block/block-list?chainShortName=chainx&y=%s"}`, n, h.clock.Now().UnixNano(), big)
	})
	cut.setCut(false)
	testkit.WaitFor(t, "the node to rejoin the fleet", up(1))
	markRead(t, edges[0], e)
	if n := e.rejected("purge_record"); n != 2500 {
		t.Fatalf("shared_rejected_total{reason=purge_record} = %v, want 2500", n)
	}
	target := finalTarget(h, 3)
	if !cachedTwice(t, e, target) {
		t.Fatal("the node keeps nothing")
	}
}

// TestFleetPurgeUnreadableRecordsSampled: 10,000 unreadable records gave
// 10,000 WARN lines on every node. Now each is counted, and the lines
// are sampled as the other lines a writer can repeat at will. (9,999 and
// the marker purge: the log keeps 10,000, none is trimmed unread.)
func TestFleetPurgeUnreadableRecordsSampled(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 1, withPurgeToken)
	rc := newPurgeRedis(t, h, rdb)
	var logs testkit.LogBuffer
	e := startTrustEdge(h, rdb.addr, &logs, nil)
	now := h.clock.Now().UnixNano()
	rc.forge(9_999, func(n int64) string {
		if n%2 == 0 {
			return fmt.Sprintf("%d garbage", n) // not "seq at request"
		}
		return fmt.Sprintf("%d %d {not json", n, now) // not a purge
	})
	markRead(t, edges[0], e)
	var warns int
	for _, l := range logs.Lines(t, "") {
		if l["level"] == "WARN" {
			warns++
		}
	}
	if warns > 2 {
		t.Fatalf("%d WARN lines for 9,999 unreadable records, want at most 2 (sampled)", warns)
	}
	if n := e.rejected("purge_record"); n != 9_999 {
		t.Fatalf("shared_rejected_total{reason=purge_record} = %v, want 9999", n)
	}
	if n := testutil.ToFloat64(e.m.LogSuppressed); n < 9_997 {
		t.Fatalf("log_suppressed_total = %v, want the lines left out counted", n)
	}
	t.Logf("%d WARN lines, %v left out", warns, testutil.ToFloat64(e.m.LogSuppressed))
}

// TestFleetPurgeAppliedOnce: a node read the counter, then the records,
// and took the counter as its place: records published between the two
// reads were applied again at the next poll (10,006 applied of 10,000).
// Now the counter and a page of records are one read, and each record is
// applied once.
func TestFleetPurgeAppliedOnce(t *testing.T) {
	rdb := startRedis(t)
	h := newHarness(t, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.Shared.RedisAddr = rdb.addr
		c.Shared.Timeout = time.Second // see newFleet
	})
	fast := func(c *fleet.Config) { c.PurgePoll = 2 * time.Millisecond }
	edges := []*fleetEdge{startPurgeEdge(h, rdb.addr, fast), startPurgeEdge(h, rdb.addr, fast), startPurgeEdge(h, rdb.addr, fast)}
	const each = 1000
	var wg sync.WaitGroup
	for _, e := range edges[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				sel, perr := purge.Parse([]byte(`{"all":true}`), e.p.settings.Load().chains)
				if perr != nil {
					t.Error(perr)
					return
				}
				if _, err := e.p.purges.Purge(sel); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	markRead(t, edges[0], edges[2]) // a read after the last of them
	markRead(t, edges[1], edges[2])
	for i, e := range edges {
		if n := testutil.ToFloat64(e.m.Purges.WithLabelValues("all", "hard")); n != 2*each {
			t.Errorf("edge %d: purges_total{selector=all} = %v, want %d: each purge once", i, n, 2*each)
		}
	}
}

// TestFleetPurgeRecordBoundFitsTheLongestPurge: fleet.MaxPurgeRecord
// refuses no purge a node publishes. The longest is a soft url purge of
// a per-hash route with its 20 hashes and every parameter.
func TestFleetPurgeRecordBoundFitsTheLongestPurge(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	hashes := make([]string, route.MaxHashes)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("0x%064x", i+1)
	}
	url := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&page=999999&limit=100&txId=" + strings.Join(hashes, ",")
	sel, perr := purge.Parse([]byte(`{"url":"`+url+`","soft":true}`), h.p.settings.Load().chains)
	if perr != nil {
		t.Fatal(perr)
	}
	req, _ := json.Marshal(sel.Request())
	// "seq at request": two int64s and two spaces.
	if n := 19 + 1 + 19 + 1 + len(req); n > fleet.MaxPurgeRecord/2 {
		t.Fatalf("the longest purge record is %d bytes: fleet.MaxPurgeRecord (%d) leaves less than twice its room", n, fleet.MaxPurgeRecord)
	} else {
		t.Logf("the longest purge record: %d bytes of %d", n, fleet.MaxPurgeRecord)
	}
}

// TestFleetPurgeCounterNotANumberRefused: a counter that is no number
// failed every read of the log as an error, which took every node off
// Redis, and the catch-up before it rejoined failed the same way: the
// fleet served alone for good. Now it reads as no counter, refused and
// counted once; deleted, the log goes on.
func TestFleetPurgeCounterNotANumberRefused(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withPurgeToken)
	rc := newPurgeRedis(t, h, rdb)
	e := edges[0]
	rc.set("seq", "not a number")
	deadline := time.Now().Add(10 * time.Second)
	for e.rejected("purge_seq") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the node to refuse the counter (shared_up %v)", testutil.ToFloat64(e.m.SharedUp))
		}
		time.Sleep(2 * time.Millisecond)
	}
	target := finalTarget(h, 3)
	if !cachedTwice(t, e, target) {
		t.Fatal("the node keeps nothing")
	}
	if r := edges[1].get(target); !strings.Contains(r.header["Cache-Status"], "shared") {
		t.Fatalf("the other node: %q, want the entry the first stored in Redis", r.header["Cache-Status"])
	}
	if up, n := testutil.ToFloat64(e.m.SharedUp), e.rejected("purge_seq"); up != 1 || n != 1 {
		t.Fatalf("shared_up %v, shared_rejected_total{reason=purge_seq} %v: want 1 and 1", up, n)
	}
	rc.del("seq")
	markRead(t, edges[1], e)
}
