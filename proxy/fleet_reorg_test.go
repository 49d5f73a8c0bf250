package proxy

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// TestFleetReorgReportedOnce: in a fleet of two on
// redis-server, a reorganization seen by node A (its fork search to the
// end, its purge applied by node B) and then by node B (the newest page,
// the new branch's hashes where B held the old ones) is counted once in
// explorer_edge_reorgs_total summed over the fleet, B publishes no purge
// record of its own to the fleet's log (whose sequence number does not
// move), and neither node serves an answer of the replaced branch. Before,
// B found it again on its next page and reported it as a new one: a
// second count, event and record (a second CDN purge), with the lowest
// height B saw replaced as its fork.
func TestFleetReorgReportedOnce(t *testing.T) {
	for _, depth := range []int{5, 41} {
		t.Run(fmt.Sprintf("depth=%d", depth), func(t *testing.T) {
			rdb := startRedis(t)
			h := newUpstream(t, nil, simProfile("height-down"), func(c *config.Config, _ *sim.Config) {
				c.Shared.Timeout = time.Second
				c.Shared.RedisAddr = rdb.addr
			})
			edges := make([]*fleetEdge, 2)
			for i := range edges {
				e := &fleetEdge{harness: h.sibling()}
				e.shared = e.startNode(NodeOptions{}).Fleet()
				edges[i] = e
			}
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.addr}, DisableCache: true, ForceSingleClient: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			logSeq := func() int64 {
				t.Helper()
				seq, err := rc.Do(context.Background(), rc.B().Get().Key(h.cfg.Shared.Prefix+"{purges}seq").Build()).AsInt64()
				if err != nil && !rueidis.IsRedisNil(err) {
					t.Fatalf("the fleet's purge log: %v", err)
				}
				return seq
			}
			head := h.sim.Head("CHAINX")
			fork := head - int64(depth) + 1
			var targets []string
			for hh := fork - 10; hh <= head; hh++ {
				targets = append(targets, forkTx(hh))
			}
			for _, e := range edges {
				e.get(forkBlocks)
				e.warm(targets...)
			}
			a, b := edges[0], edges[1]
			applied, own := purgesApplied(b.harness), purgesApplied(a.harness)
			h.sim.SetFaults(sim.Faults{Reorg: depth})
			h.clock.Advance(2500 * time.Millisecond)
			reorgs := func(e *fleetEdge) float64 { return testutil.ToFloat64(e.m.Reorgs.WithLabelValues("CHAINX")) }
			a.get(forkBlocks)
			testkit.WaitFor(t, "node A's fork search to its end", func() bool {
				_, open := a.p.truth.Open("CHAINX")
				return reorgs(a) > 0 && !open
			})
			waitRefreshes(t, a.p)
			testkit.WaitFor(t, "node A's purges applied on node B", func() bool {
				return purgesApplied(b.harness)-applied >= purgesApplied(a.harness)-own
			})
			seq := logSeq()
			if seq == 0 {
				t.Fatal("node A published no purge record")
			}
			newHash := a.p.truth.Hash("CHAINX", fork)
			// A list pinned at the head is made of the blocks node B
			// holds: none of the replaced branch once it applied the
			// purge (learnReorg drops them; here the head page's age
			// alone has B ask the newest page again).
			pinned := fmt.Sprintf("%s&limit=20&head=%d", forkBlocks, head)
			r := b.get(pinned)
			shown := route.Blocks(route.BlockList, -1, r.body)
			if len(shown) == 0 {
				t.Fatalf("node B, %s: no blocks in %s", pinned, r.body)
			}
			for _, blk := range shown {
				if want := a.p.truth.Hash("CHAINX", blk.Height); blk.Height >= fork && blk.Hash != want {
					t.Fatalf("node B, %s: block %d hash %s, want the new branch's %s", pinned, blk.Height, blk.Hash, want)
				}
			}
			// Node B sees the new branch: its newest page, then every
			// height (a replaced answer must not be served).
			b.get(forkBlocks)
			wrong := 0
			for i, e := range []*fleetEdge{b, a} {
				for _, target := range targets {
					if r := e.get(target); !bytes.Equal(r.body, h.simGet(target)) {
						wrong++
						if wrong <= 5 {
							t.Errorf("node %c, %s (fork %d): %q, an answer of the replaced branch", "BA"[i], target, fork, r.header["Cache-Status"])
						}
					}
				}
			}
			if wrong > 0 {
				t.Fatalf("%d answers of the replaced branch served", wrong)
			}
			for _, e := range edges {
				waitRefreshes(t, e.p)
			}
			if got := b.p.truth.Hash("CHAINX", fork); got == "" || got != newHash {
				t.Fatalf("node B's hash at the fork %d: %q, want the new branch's %q (node B has not seen it)", fork, got, newHash)
			}
			if n := reorgs(a) + reorgs(b); n != 1 {
				t.Errorf("explorer_edge_reorgs_total over the fleet %v (A %v, B %v), want 1", n, reorgs(a), reorgs(b))
			}
			if now := logSeq(); now != seq {
				t.Errorf("the fleet's purge log went from record %d to %d after node B saw the reorganization, want no record of B's", seq, now)
			}
		})
	}
}
