package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/cache"
	"explorer-edge/proxy/admin"
)

// Nothing read back from Redis or the disk is trusted more than the
// upstream (docs/design.md, "Chain truth"): each test plants what a
// forger with write access would, through the tier's own writer (the
// fleet's encoding, the disk's records), and checks that no node serves
// it as the head, moves its finalized height with it, classes a block not
// made yet as final, or announces it, and that a forged read costs at
// most one upstream call more than a miss.

const newestPage = "/api/v5/chainx/block/block-list?chainShortName=chainx"

// forgeNewest is a newest block page body moved ahead blocks up, every
// hash another and every block done: the forger's head.
func forgeNewest(t testing.TB, body []byte, ahead int64) []byte {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	page := env["data"].([]any)[0].(map[string]any)
	for _, b := range page["blockList"].([]any) {
		m := b.(map[string]any)
		h, err := strconv.ParseInt(m["height"].(string), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		m["height"] = strconv.FormatInt(h+ahead, 10)
		m["hash"] = fmt.Sprintf("0x%064x", h+ahead)
		m["state"] = "done"
	}
	out, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// txList is the transaction list of a block of CHAINX.
func txList(height int64) string {
	return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
}

// refused is reads_refused_total{tier,reason} of e.
func refused(h *harness, tier, reason string) float64 {
	return testutil.ToFloat64(h.m.ReadsRefused.WithLabelValues(tier, reason))
}

// TestFleetForgedEntriesMoveNothing: a newest page a million blocks ahead
// with every block done, written to Redis in the fleet's own encoding, is
// never served by either node (40 reads, each with Redis holding the
// forgery and the node's memory empty), costs each read at most one
// upstream call, and moves neither node's head nor finalized height; a
// forged final transaction list of a block 60 above the head is not
// served, the upstream's answer is not classed final, and once the block
// exists both nodes serve its real transactions. On 452477c the forged
// page was served 40 of 40 times, the finalized height rose to the
// forgery's, and the list stayed empty and final.
func TestFleetForgedEntriesMoveNothing(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2)
	a, b := edges[0], edges[1]
	good := a.get(newestPage)
	if good.status != 200 {
		t.Fatalf("newest page: %d %s", good.status, good.body)
	}
	b.get(newestPage)
	head, final := h.sim.Head("CHAINX"), h.sim.FinalizedHeight("CHAINX")
	key := cacheKey(t, a.p, newestPage)
	forged := forgeNewest(t, good.body, 1_000_000)
	plant := func(key string, body []byte, class cache.Class) {
		t.Helper()
		now := h.clock.Now()
		a.shared.Set(cache.NewEntry(key, body, class, now, 24*time.Hour, time.Hour, time.Hour), now)
	}

	for i := range 40 {
		e := edges[i%2]
		plant(key, forged, cache.Head)
		a.cache.Del(key)
		b.cache.Del(key)
		before := h.upstreamCalls()
		r := e.get(newestPage)
		if r.status != 200 || newestHeight(t, r.body) != head {
			t.Fatalf("read %d on node %d: %d, newest block %d, want the upstream's head %d (%q)", i, i%2, r.status, newestHeight(t, r.body), head, r.header["Cache-Status"])
		}
		if n := h.upstreamCalls() - before; n > 1 {
			t.Fatalf("read %d of the forged page: %d upstream calls, want at most 1", i, n)
		}
	}
	for i, e := range edges {
		if f := e.p.truth.Final("CHAINX"); f > final {
			t.Errorf("node %d: finalized height %d after the forged reads, the chain's is %d", i, f, final)
		}
		if got, _, _ := e.p.truth.Head("CHAINX"); got > head {
			t.Errorf("node %d: head %d after the forged reads, the chain's is %d", i, got, head)
		}
		if refused(e.harness, "shared", "unconfirmed") < 1 {
			t.Errorf("node %d: no unconfirmed read counted", i)
		}
	}

	// A block 60 above the head: a forged final list with another block's
	// transactions in Redis, then the node's own question.
	future := txList(head + 60)
	plant(cacheKey(t, a.p, future), h.simGet(txList(final-1)), cache.Final)
	for i, e := range edges {
		before := h.upstreamCalls()
		r := e.get(future)
		if r.status != 200 || !bytes.Equal(r.body, h.simGet(future)) {
			t.Fatalf("node %d: the forged list of block %d served: %q %.120s", i, head+60, r.header["Cache-Status"], r.body)
		}
		if maxAge(r) > 1 {
			t.Fatalf("node %d: the list of block %d, not made yet, classed final: %q", i, head+60, r.header["Cache-Control"])
		}
		if n := h.upstreamCalls() - before; n > 2 {
			t.Fatalf("node %d: %d upstream calls for a forged read, want at most 2 (a confirmation and the fetch)", i, n)
		}
	}
	h.clock.Advance(70 * time.Second)
	want := h.simGet(future)
	if !strings.Contains(string(want), `"blockHash"`) {
		t.Fatalf("block %d has no transactions at head %d: %.200s", head+60, h.sim.Head("CHAINX"), want)
	}
	for i, e := range edges {
		if r := e.get(future); r.status != 200 || !bytes.Equal(r.body, want) {
			t.Errorf("node %d, 70 s later: %q %.120s, want the block's transactions", i, r.header["Cache-Status"], r.body)
		}
	}
}

// TestFleetForgedNewestPageNeverAnnounced: with streams open on both
// nodes of a fleet, a forged newest page in Redis (a million ahead, every
// block done), read by a client of each node and written again after
// every head, is never announced, and the real heads go on being
// announced on both. On 452477c both nodes stopped announcing real heads.
func TestFleetForgedNewestPageNeverAnnounced(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withStream)
	var streams []*sseStream
	for _, e := range edges {
		streams = append(streams, openStream(t, e.addr, "/edge/v1/events?chains=CHAINX"))
	}
	h.clock.Advance(time.Second)
	seen := make([]int64, len(streams))
	for i, s := range streams {
		got, _ := s.nextHead(t, h.sim.Head("CHAINX")-1)
		seen[i] = got.Height
	}
	good := edges[0].get(newestPage)
	key := cacheKey(t, edges[0].p, newestPage)
	forged := forgeNewest(t, good.body, 1_000_000)
	for range 4 {
		now := h.clock.Now()
		edges[0].shared.Set(cache.NewEntry(key, forged, cache.Head, now, 24*time.Hour, time.Hour, time.Hour), now)
		for _, e := range edges {
			e.cache.Del(key)
			if r := e.get(newestPage); newestHeight(t, r.body) > h.sim.Head("CHAINX") {
				t.Fatalf("the forged page served: newest block %d (%q)", newestHeight(t, r.body), r.header["Cache-Status"])
			}
		}
		h.clock.Advance(time.Second)
		want := h.sim.Head("CHAINX")
		for i, s := range streams {
			for seen[i] < want {
				got, _ := s.nextHead(t, seen[i])
				if got.Height > want || got.Final > h.sim.FinalizedHeight("CHAINX") {
					t.Fatalf("node %d announced head %d, final %d; the chain's are %d, %d", i, got.Height, got.Final, want, h.sim.FinalizedHeight("CHAINX"))
				}
				seen[i] = got.Height
			}
		}
	}
}

// TestDiskForgedRecordsMoveNothing: records planted in the disk tier
// through its own writer are checked as Redis's entries are: a final
// transaction list of a block 60 above the head (another block's
// transactions), one holding another block's answer, and one whose body
// is no JSON are never served, each costs at most one upstream call more
// than a miss, and the block not made yet is not classed final, nor left
// empty once it exists. On 452477c all three were served from the disk.
func TestDiskForgedRecordsMoveNothing(t *testing.T) {
	h := newHarness(t, withDisk(t.TempDir()))
	h.get(newestPage) // the head and finalized height, from the upstream
	head, final := h.sim.Head("CHAINX"), h.sim.FinalizedHeight("CHAINX")
	d := h.node.Disk()
	now := h.clock.Now()
	plant := func(target string, body []byte) {
		t.Helper()
		d.Put(cache.NewEntry(cacheKey(t, h.p, target), body, cache.Final, now, 24*time.Hour, 0, 0))
	}
	future, swapped, junk := txList(head+60), txList(final-3), txList(final-2)
	plant(future, h.simGet(txList(final-1)))
	plant(swapped, h.simGet(txList(final-4)))
	plant(junk, []byte(`<html>owned</html>`))
	d.Flush()
	if st := d.Stats(); st.Entries < 3 {
		t.Fatalf("planted records not on disk: %+v", st)
	}
	for _, target := range []string{future, swapped, junk} {
		before := h.upstreamCalls()
		r := h.get(target)
		if r.status != 200 || isDiskHit(r) || !bytes.Equal(r.body, h.simGet(target)) {
			t.Fatalf("%s: the planted record served: %q %.120s", target, r.header["Cache-Status"], r.body)
		}
		if n := h.upstreamCalls() - before; n > 2 {
			t.Fatalf("%s: %d upstream calls, want at most 2", target, n)
		}
	}
	if r := h.get(future); maxAge(r) > 1 {
		t.Fatalf("the list of block %d, not made yet, classed final: %q", head+60, r.header["Cache-Control"])
	}
	if refused(h, "disk", "unconfirmed") < 2 || refused(h, "disk", "entry") < 1 {
		t.Errorf("refusals: unconfirmed %v, entry %v; want 2 and 1", refused(h, "disk", "unconfirmed"), refused(h, "disk", "entry"))
	}
	if f := h.p.truth.Final("CHAINX"); f > final {
		t.Errorf("finalized height %d after the planted reads, the chain's is %d", f, final)
	}
	h.clock.Advance(70 * time.Second)
	if r, want := h.get(future), h.simGet(future); !bytes.Equal(r.body, want) {
		t.Errorf("70 s later: %q %.120s, want the block's transactions", r.header["Cache-Status"], r.body)
	}
}

// confirmHeads makes each edge confirm chain's head from the upstream, as
// its first newest page from there does (one call each): what a node
// reads back from Redis is then measured against it (docs/design.md,
// "Chain truth"). Tests of what the fleet shares call it first, so that
// they count what they are about.
func confirmHeads(t testing.TB, chain string, edges ...*fleetEdge) {
	t.Helper()
	for i, e := range edges {
		s := e.p.settings.Load()
		if !e.p.confirm(s, chain, s.auth.TenantOf(nil)) {
			t.Fatalf("edge %d did not confirm %s's head", i, chain)
		}
		if got, _ := e.p.truth.Confirmed(chain); got <= 0 {
			t.Fatalf("edge %d: confirmed height %d after asking the upstream", i, got)
		}
	}
}

// confirms is truth_confirms_total of chain on h: newest pages asked to
// confirm what a tier held (calls of the default page beside the polls).
func confirms(h *harness, chain string) float64 {
	return testutil.ToFloat64(h.m.Confirms.WithLabelValues(chain))
}

// TestInspectCacheShowsTheTiers: GET /cache?url= tells what the disk tier
// and Redis hold for the key beside memory, and whether a miss would take
// it: a final list both tiers hold passes; a forged list of a block 60
// above the head, planted in both, is refused as unconfirmed, and
// inspecting it moves nothing. On 452477c the answer told memory only.
func TestInspectCacheShowsTheTiers(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 1, withPurgeToken, withDisk(t.TempDir()))
	a := edges[0]
	b := &fleetEdge{harness: h.sibling()} // a disk of its own
	b.cfg.Cache.DiskPath = t.TempDir()
	b.shared = b.startNode(NodeOptions{}).Fleet()
	a.get(newestPage)
	b.get(newestPage)
	head, final := h.sim.Head("CHAINX"), h.sim.FinalizedHeight("CHAINX")
	good := txList(final - 1)
	a.get(good)
	a.node.Disk().Flush()
	got := a.inspectURL(good)
	if got.Disk == nil || !got.Disk.Passes || got.Disk.Entry == nil || got.Disk.Entry.Class != "final" {
		t.Fatalf("a final list on disk: %+v", got.Disk)
	}
	if got.Shared == nil || !got.Shared.Passes || got.Shared.Entry == nil || got.Shared.Entry.ETag != got.Entry.ETag {
		t.Fatalf("a final list in Redis: %+v (memory's ETag %s)", got.Shared, got.Entry.ETag)
	}
	if miss := b.inspectURL(good); miss.Entry != nil || miss.Disk == nil || miss.Disk.Entry != nil || miss.Shared == nil || !miss.Shared.Passes {
		t.Fatalf("the other node: memory %+v, disk %+v, Redis %+v; want only Redis", miss.Entry, miss.Disk, miss.Shared)
	}

	future := txList(head + 60)
	key := cacheKey(t, b.p, future)
	now := h.clock.Now()
	forged := cache.NewEntry(key, h.simGet(txList(final-1)), cache.Final, now, 24*time.Hour, 0, 0)
	b.shared.Set(forged, now)
	d := b.node.Disk()
	d.Put(cache.NewEntry(key, h.simGet(txList(final-1)), cache.Final, now, 24*time.Hour, 0, 0))
	d.Flush()
	got = b.inspectURL(future)
	for name, ts := range map[string]*admin.TierState{"disk": got.Disk, "shared": got.Shared} {
		if ts == nil || ts.Entry == nil || ts.Passes || !strings.Contains(ts.Refused, "confirmed") {
			t.Errorf("%s holding a forged list of block %d: %+v, want it refused as unconfirmed", name, head+60, ts)
		}
	}
	if f := b.p.truth.Final("CHAINX"); f > final || refused(b.harness, "disk", "unconfirmed") != 0 {
		t.Errorf("inspecting moved chain truth or counted a read: final %d, refused %v", f, refused(b.harness, "disk", "unconfirmed"))
	}
}
