package proxy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
)

// heads reads s's head events of chain until one at height until, and
// fails on a head that does not go up (a repeat, or one out of order).
func (s *sseStream) heads(t testing.TB, after, until int64) (last sseEvent) {
	t.Helper()
	for after < until {
		ev := s.next(t)
		if ev.typ != "head" {
			continue
		}
		h, _ := decodeHead(t, ev)
		if h.Height <= after {
			t.Fatalf("head %d after %d: repeated or out of order", h.Height, after)
		}
		after, last = h.Height, ev
	}
	return last
}

func decodeHead(t testing.TB, ev sseEvent) (headEvent, sseEvent) {
	t.Helper()
	var h headEvent
	if err := json.Unmarshal([]byte(ev.data), &h); err != nil {
		t.Fatalf("head %q: %v", ev.data, err)
	}
	return h, ev
}

// TestFleetEventsOnePoller: three nodes share Redis, each with streams
// open; one node polls (it holds the lease), the others announce what it
// stored, as hits in their own caches; the upstream is asked once per
// poll for the whole fleet. Closed, the polling node hands over: another
// polls within a few seconds, and the streams on the others go on without
// a head repeated or out of order; a stream of the closed node resumes on
// another without a reset (ids come from the chain, not the node): the
// heads it missed, each once.
func TestFleetEventsOnePoller(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 3, withStream)
	streams := make([][]*sseStream, len(edges))
	for i, e := range edges {
		for range 2 {
			streams[i] = append(streams[i], openStream(t, e.addr, "/edge/v1/events?chains=CHAINX"))
		}
	}
	def := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	seen := make([][]int64, len(edges)) // the newest head each stream saw
	for i := range seen {
		seen[i] = make([]int64, 2)
	}
	lastID := make([][]string, len(edges))
	for i := range lastID {
		lastID[i] = make([]string, 2)
	}
	advance := func(alive []int) {
		t.Helper()
		h.clock.Advance(time.Second)
		want := h.sim.Head("CHAINX")
		for _, i := range alive {
			for j, s := range streams[i] {
				ev := s.heads(t, seen[i][j], want)
				seen[i][j], lastID[i][j] = want, ev.id
			}
			if r := edges[i].get(def); !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") || newestHeight(t, r.body) != want {
				t.Fatalf("node %d on head %d: %q holding %d", i, want, r.header["Cache-Status"], newestHeight(t, r.body))
			}
		}
	}
	all := []int{0, 1, 2}
	// The heads announced before: each stream reads up to the current one.
	h.clock.Advance(time.Second)
	for i := range edges {
		for j, s := range streams[i] {
			_, ev := s.nextHead(t, h.sim.Head("CHAINX")-1)
			seen[i][j], lastID[i][j] = h.sim.Head("CHAINX"), ev.id
		}
	}
	// Until its subscription is confirmed a node polls alone: counted
	// from here.
	before := make([]float64, len(edges))
	for i, e := range edges {
		before[i] = polls(t, e.harness, "CHAINX")
	}
	for range 3 {
		advance(all)
	}
	leader := -1
	for i, e := range edges {
		if polls(t, e.harness, "CHAINX") > before[i] {
			if leader >= 0 {
				t.Fatalf("nodes %d and %d both polled", leader, i)
			}
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node polled")
	}
	// Polls, and the followers' confirmations of the head they take from
	// Redis (docs/design.md, "Chain truth"): both ask the default page.
	total := func() (n float64) {
		for _, e := range edges {
			n += polls(t, e.harness, "CHAINX") + confirms(e.harness, "CHAINX")
		}
		return n
	}
	// A poll is counted after its call: one in flight is in the calls and
	// not yet in the polls.
	calls, _ := headCalls(h)
	if n := total(); float64(calls) > n+1 || float64(calls) < n-1 {
		t.Fatalf("%d upstream calls of the newest page for %v polls in the fleet", calls, n)
	}

	// The polling node closes: another takes over.
	closed := time.Now()
	edges[leader].node.Close(context.Background())
	var alive []int
	for i := range edges {
		if i != leader {
			alive = append(alive, i)
		}
	}
	advance(alive)
	took := time.Since(closed)
	next := -1
	for _, i := range alive {
		if polls(t, edges[i].harness, "CHAINX") > before[i] {
			next = i
		}
	}
	// The bound tells a takeover after the lease (3 s) from none at all;
	// it is generous for a loaded machine, not a measure of speed.
	if next < 0 || took > 30*time.Second {
		t.Fatalf("after node %d closed: the next poller %d, heads again after %v", leader, next, took)
	}
	advance(alive)
	// A stream of the closed node, back on another with its last id: ids
	// come from the chain, so it goes on without a reset, with the heads
	// after the last it saw, each once.
	s := openStream(t, edges[alive[0]].addr, "/edge/v1/events?chains=CHAINX", "Last-Event-ID", lastID[leader][0])
	ev := s.next(t)
	if ev.typ != "head" {
		t.Fatalf("resume on another node: %+v, want the heads it missed", ev)
	}
	got, _ := decodeHead(t, ev)
	if got.Height <= seen[leader][0] {
		t.Fatalf("resume on another node after head %d: head %d first", seen[leader][0], got.Height)
	}
	s.heads(t, got.Height, h.sim.Head("CHAINX"))
	t.Logf("node %d polled, closed; node %d took over; heads again %v after", leader, next, took)
}

// TestFleetEventsRedisDown: while Redis does not answer, every node with
// streams open polls alone (within its local share of the budget) and its
// streams go on; when it answers again, one node polls.
func TestFleetEventsRedisDown(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withStream)
	streams := []*sseStream{openStream(t, edges[0].addr, "/edge/v1/events?chains=CHAINX"), openStream(t, edges[1].addr, "/edge/v1/events?chains=CHAINX")}
	leaders := func() (n float64) {
		for _, e := range edges {
			n += gathered(t, e.harness).value(t, "explorer_edge_stream_poll_leader", "chain", "CHAINX")
		}
		return n
	}
	step := func() {
		t.Helper()
		h.clock.Advance(time.Second)
		for _, s := range streams {
			s.nextHead(t, h.sim.Head("CHAINX")-1)
		}
	}
	// Until its subscription is confirmed a node polls alone too.
	testkit.WaitFor(t, "one node polling", func() bool { return leaders() == 1 })
	step()
	rdb.stop()
	// The first node's call that fails takes it off Redis; from then on it
	// polls alone.
	testkit.WaitFor(t, "both nodes polling alone", func() bool { return leaders() == 2 })
	for range 3 {
		step()
	}
	rdb.start()
	testkit.WaitFor(t, "one node polling again", func() bool { return leaders() == 1 })
	step()
}

// TestFleetEventsVariantOfAFollower: a variant of the newest page (limit=5)
// asked of one node that does not poll is shared with the fleet's record in
// Redis, and the polling node refreshes it with each new head; on every
// head event the follower's stream carries, the variant fetched from that
// follower is a hit holding the announced height. The upstream is asked
// once per poll of the default page and once per new head for the variant,
// for the whole fleet.
func TestFleetEventsVariantOfAFollower(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 3, withStream)
	streams := make([]*sseStream, len(edges))
	for i, e := range edges {
		streams[i] = openStream(t, e.addr, "/edge/v1/events?chains=CHAINX")
	}
	// Every node has polled once (alone, or found the lease held) when its
	// stream has a head: from then on one node polling is the steady state.
	h.clock.Advance(time.Second)
	for _, s := range streams {
		s.nextHead(t, h.sim.Head("CHAINX")-1)
	}
	leading := func(i int) bool {
		return gathered(t, edges[i].harness).value(t, "explorer_edge_stream_poll_leader", "chain", "CHAINX") == 1
	}
	leader := -1
	testkit.WaitFor(t, "one node polling", func() bool {
		n := 0
		for i := range edges {
			if leading(i) {
				n, leader = n+1, i
			}
		}
		return n == 1
	})
	f := (leader + 1) % len(edges)
	s := streams[f]
	variant := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	askFrom(t, edges[f].harness, variant, 3)
	// The follower shares it at its poller's next tick.
	testkit.WaitFor(t, "the variant in the fleet's record", func() bool {
		keys, ok := edges[leader].shared.Variants("CHAINX", h.clock.Now().Add(-time.Minute), 8)
		return ok && slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "limit=5") })
	})
	// Counted from the head the streams hold now.
	h.clock.Advance(time.Second)
	last, _ := s.nextHead(t, h.sim.Head("CHAINX")-1)
	def0, var0 := headCalls(h)
	before := make([]float64, len(edges))
	confirmed := make([]float64, len(edges))
	for i, e := range edges {
		before[i], confirmed[i] = polls(t, e.harness, "CHAINX"), confirms(e.harness, "CHAINX")
	}
	const blocks = 5
	for block := range blocks {
		h.clock.Advance(time.Second)
		head, _ := s.nextHead(t, last.Height)
		if want := h.sim.Head("CHAINX"); head.Height != want {
			t.Fatalf("block %d: node %d announced %d, the upstream's head is %d", block, f, head.Height, want)
		}
		r := edges[f].get(variant)
		if cs := r.header["Cache-Status"]; r.status != 200 || !strings.HasPrefix(cs, "explorer-edge; hit") {
			t.Fatalf("block %d: the variant on node %d on the head event: %d %q, want a hit", block, f, r.status, cs)
		}
		if got := newestHeight(t, r.body); got != head.Height {
			t.Fatalf("block %d: the variant on node %d holds %d, the event said %d", block, f, got, head.Height)
		}
		last = head
	}
	var total float64
	for i, e := range edges {
		n := polls(t, e.harness, "CHAINX") - before[i]
		if n > 0 && i != leader {
			t.Fatalf("node %d polled %v times; node %d holds the lease", i, n, leader)
		}
		// A follower confirms the head it takes from Redis every
		// truth.Slack+1 blocks: a call of the default page too.
		total += n + confirms(e.harness, "CHAINX") - confirmed[i]
	}
	def, vars := headCalls(h)
	def, vars = def-def0, vars-var0
	// A poll is counted after its call: one in flight at either end of the
	// window is in one count and not the other.
	if float64(def) > total+1 || float64(def) < total-1 {
		t.Fatalf("%d upstream calls of the default page for %v polls in the fleet", def, total)
	}
	// The variant is made of the page of 100 the poll asked
	// (cache.block_pages): refreshed with each head (a hit holding it,
	// above) without a call of its own.
	if vars != 0 {
		t.Fatalf("%d upstream calls of the variant for %d new heads, want none", vars, blocks)
	}
	t.Logf("node %d polled, node %d asked the variant: %d blocks, %d calls of the default page (%v polls), %d of the variant",
		leader, f, blocks, def, total, vars)
}

// TestFleetEventsVariantRedisDown: a variant three clients ask of a node
// that does not poll, served there from the pages the polling node
// relays, is that node's own: while Redis does not answer and it polls
// alone, it refreshes the variant with each head, and on every head event
// it sends the variant asked there is a hit holding the announced height.
// (Before, such nodes announced 17 heads while that page was a block
// behind.)
func TestFleetEventsVariantRedisDown(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withStream)
	streams := []*sseStream{openStream(t, edges[0].addr, "/edge/v1/events?chains=CHAINX"), openStream(t, edges[1].addr, "/edge/v1/events?chains=CHAINX")}
	h.clock.Advance(time.Second)
	for _, s := range streams {
		s.nextHead(t, h.sim.Head("CHAINX")-1)
	}
	leading := func(i int) float64 {
		return gathered(t, edges[i].harness).value(t, "explorer_edge_stream_poll_leader", "chain", "CHAINX")
	}
	testkit.WaitFor(t, "one node polling", func() bool { return leading(0)+leading(1) == 1 })
	f := 0
	if leading(0) == 1 {
		f = 1
	}
	variant := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	askFrom(t, edges[f].harness, variant, 3)
	// The follower shares it at its poller's next tick; a head polled
	// before that is relayed without it, and the follower holds it back
	// (behind) until the next block.
	testkit.WaitFor(t, "the variant in the fleet's record", func() bool {
		keys, ok := edges[1-f].shared.Variants("CHAINX", h.clock.Now().Add(-time.Minute), 8)
		return ok && slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "limit=5") })
	})
	// A head relayed with the variant: the follower serves it from there.
	h.clock.Advance(time.Second)
	last, _ := streams[f].nextHead(t, h.sim.Head("CHAINX")-1)
	askFrom(t, edges[f].harness, variant, 3)
	rdb.stop()
	testkit.WaitFor(t, "both nodes polling alone", func() bool { return leading(0)+leading(1) == 2 })
	for block := range 5 {
		h.clock.Advance(time.Second)
		head, _ := streams[f].nextHead(t, last.Height)
		r := edges[f].get(variant)
		if cs := r.header["Cache-Status"]; r.status != 200 || !strings.HasPrefix(cs, "explorer-edge; hit") {
			t.Fatalf("block %d, Redis down: the variant on node %d on the head event: %d %q, want a hit", block, f, r.status, cs)
		}
		if got := newestHeight(t, r.body); got != head.Height {
			t.Fatalf("block %d, Redis down: the variant on node %d holds %d, the event said %d", block, f, got, head.Height)
		}
		last = head
	}
}
