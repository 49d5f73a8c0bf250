package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/truth"
	"explorer-edge/proxy/upstream"
	"explorer-edge/sim"
)

// The fork search (reorg.go) under both readings of block-list height
// (docs/explorer-readings.md), and finality where blocks carry no state.

// simProfile starts explorer-sim with the readings named (sim.ParseProfile).
func simProfile(names string) harnessOpt {
	return func(_ *config.Config, s *sim.Config) {
		p := sim.MustProfile(names)
		s.Profile = &p
	}
}

const forkBlocks = "/api/v5/chainx/block/block-list?chainShortName=chainx"

func forkTx(height int64) string {
	return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
}

// reorgLines are the "chain reorganized" log lines of CHAINX in logs, by
// the height they say the fork is at.
func reorgLines(t *testing.T, logs *testkit.LogBuffer) (forks []int64) {
	t.Helper()
	for _, l := range logs.Lines(t, "") {
		if m, _ := l["msg"].(string); strings.HasPrefix(m, "chain reorganized") && l["chain"] == "CHAINX" {
			from, _ := l["from"].(float64)
			forks = append(forks, int64(from))
		}
	}
	return forks
}

// searchBound is the most calls a fork search may spend on a
// reorganization depth blocks deep: ceil(depth/100)+1.
func searchBound(depth int) float64 { return math.Ceil(float64(depth)/100) + 1 }

// TestForkSearchFindsTheTrueFork: a reorganization of 41 or 150 blocks,
// seen through the 20-block newest page, under each reading of height
// (height-down: the blocks down from it; height-at: the block at it, the
// vendor's), on a node with the disk tier. Before it the node served the
// transaction list of every height from below the fork to the head (the
// ones at or below the finalized height final, on disk too). On the page
// that shows it, the node's one search finds the true fork within
// ceil(depth/100)+1 calls, counts and logs the reorganization once with
// that fork, and serves no answer of the replaced branch from any tier,
// with the test clock not moved since that page. Before the search ran to
// its end, its second probe was dropped (the key of the first was still
// held): 150 blocks left replaced lists served; under height-at the one
// probe (height=X&limit=100) got one block and the search stopped.
func TestForkSearchFindsTheTrueFork(t *testing.T) {
	for _, profile := range []string{"height-down", "height-at"} {
		for _, depth := range []int{41, 150} {
			t.Run(fmt.Sprintf("%s/depth=%d", profile, depth), func(t *testing.T) {
				h := newUpstream(t, nil, simProfile(profile), withDisk(t.TempDir()))
				var logs testkit.LogBuffer
				h.log = slog.New(slog.NewJSONHandler(&logs, nil))
				h.start()
				h.get(forkBlocks)
				head := h.sim.Head("CHAINX")
				fork := head - int64(depth) + 1
				var targets []string
				for hh := fork - 10; hh <= head; hh++ {
					targets = append(targets, forkTx(hh))
				}
				h.warm(targets...)
				if f := h.p.truth.Final("CHAINX"); f < fork {
					t.Fatalf("finalized height %d, below the fork %d: nothing final would be replaced", f, fork)
				}
				reorgs := func() float64 { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) }
				probes := func() float64 { return testutil.ToFloat64(h.m.ReorgProbes.WithLabelValues("CHAINX")) }
				h.sim.SetFaults(sim.Faults{Reorg: depth})
				h.clock.Advance(2500 * time.Millisecond) // the newest page expired: the next ask waits for the upstream
				if r := h.get(forkBlocks); !isMiss(r) {
					t.Fatalf("the newest page after the reorg: %q, want a miss", r.header["Cache-Status"])
				}
				testkit.WaitFor(t, "the fork search to its end", func() bool {
					_, open := h.p.truth.Open("CHAINX")
					return reorgs() > 0 && !open
				})
				waitRefreshes(t, h.p)
				if n := reorgs(); n != 1 {
					t.Fatalf("reorgs_total %v, want 1", n)
				}
				if got := reorgLines(t, &logs); len(got) != 1 || got[0] != fork {
					t.Fatalf("reorganizations logged with forks %v, want one at %d", got, fork)
				}
				t.Logf("the search spent %v calls (at most %v)", probes(), searchBound(depth))
				if n, most := probes(), searchBound(depth); n > most {
					t.Fatalf("the search spent %v calls on a reorganization %d deep, want at most %v", n, depth, most)
				}
				wrong := 0
				for _, target := range targets {
					if r := h.get(target); !bytes.Equal(r.body, h.simGet(target)) {
						wrong++
						if wrong <= 5 {
							t.Errorf("%s (fork %d): %q, an answer of the replaced branch", target, fork, r.header["Cache-Status"])
						}
					}
				}
				if wrong > 0 {
					t.Fatalf("%d of %d answers of the replaced branch served after the page that showed the reorg", wrong, len(targets))
				}
				// Below the fork, the final answers stand.
				if r := h.get(forkTx(fork - 5)); !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") {
					t.Errorf("a final answer below the fork: %q, want a hit", r.header["Cache-Status"])
				}
			})
		}
	}
}

// TestFleetForkSearchFindsTheTrueFork is TestForkSearchFindsTheTrueFork on
// two nodes sharing a redis-server: the first serves the lists and sees
// the reorganization, the second served the same lists from Redis (so it
// confirmed from the upstream only the newest page's 20 heights). Once the
// first node's search ended and its purges reached the second, neither
// serves an answer of the replaced branch (memory, disk, Redis). The first
// counts the reorganization once, at its true fork; the second at most
// once, when an answer of its own shows it, never below the true fork (it
// reports the lowest height it saw replaced: the heights below it it never
// saw from the upstream).
func TestFleetForkSearchFindsTheTrueFork(t *testing.T) {
	for _, profile := range []string{"height-down", "height-at"} {
		for _, depth := range []int{41, 150} {
			t.Run(fmt.Sprintf("%s/depth=%d", profile, depth), func(t *testing.T) {
				rdb := startRedis(t)
				h := newUpstream(t, nil, simProfile(profile), func(c *config.Config, _ *sim.Config) {
					c.Shared.Timeout = time.Second
					c.Shared.RedisAddr = rdb.addr
				})
				logs := make([]*testkit.LogBuffer, 2)
				edges := make([]*fleetEdge, 2)
				for i := range edges {
					e := &fleetEdge{harness: h.sibling()}
					e.cfg.Cache.DiskPath, e.cfg.Cache.DiskMaxBytes = t.TempDir(), 64<<20
					logs[i] = &testkit.LogBuffer{}
					e.log = slog.New(slog.NewJSONHandler(logs[i], nil))
					e.shared = e.startNode(NodeOptions{}).Fleet()
					edges[i] = e
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
				applied, own := purgesApplied(edges[1].harness), purgesApplied(edges[0].harness)
				h.sim.SetFaults(sim.Faults{Reorg: depth})
				h.clock.Advance(2500 * time.Millisecond)
				probesBefore := testutil.ToFloat64(edges[0].m.ReorgProbes.WithLabelValues("CHAINX"))
				edges[0].get(forkBlocks)
				reorgs := func(e *fleetEdge) float64 { return testutil.ToFloat64(e.m.Reorgs.WithLabelValues("CHAINX")) }
				testkit.WaitFor(t, "the first node's fork search to its end", func() bool {
					_, open := edges[0].p.truth.Open("CHAINX")
					return reorgs(edges[0]) > 0 && !open
				})
				waitRefreshes(t, edges[0].p)
				testkit.WaitFor(t, "its purges on the second node", func() bool {
					return purgesApplied(edges[1].harness)-applied >= purgesApplied(edges[0].harness)-own
				})
				if n, most := testutil.ToFloat64(edges[0].m.ReorgProbes.WithLabelValues("CHAINX"))-probesBefore, searchBound(depth); n > most {
					t.Fatalf("the search spent %v calls on a reorganization %d deep, want at most %v", n, depth, most)
				}
				wrong := 0
				for i, e := range []*fleetEdge{edges[1], edges[0]} {
					for _, target := range targets {
						if r := e.get(target); !bytes.Equal(r.body, h.simGet(target)) {
							wrong++
							if wrong <= 5 {
								t.Errorf("node %d, %s (fork %d): %q, an answer of the replaced branch", 1-i, target, fork, r.header["Cache-Status"])
							}
						}
					}
				}
				if wrong > 0 {
					t.Fatalf("%d answers of the replaced branch served after the page that showed the reorg", wrong)
				}
				for i, e := range edges {
					waitRefreshes(t, e.p)
					t.Logf("node %d: fork %d head %d logged %v", i, fork, head, reorgLines(t, logs[i]))
					if n := reorgs(e); n > 1 || i == 0 && n != 1 {
						t.Errorf("node %d: reorgs_total %v, want %s", i, n, map[bool]string{true: "1", false: "at most 1"}[i == 0])
					}
					for _, f := range reorgLines(t, logs[i]) {
						if i == 0 && f != fork || f < fork || f > head {
							t.Errorf("node %d logged a reorganization at %d, want the fork %d", i, f, fork)
						}
					}
				}
			})
		}
	}
}

// TestClientAnswerBelowIsNotALook: while a fork search is open, a client's
// answer that shows one block further down (a transaction list) does not
// end it: only an answer holding the height just below the lowest found
// replaced says where the fork is. Before, any answer reaching lower ended
// the search, with the fork too high.
func TestClientAnswerBelowIsNotALook(t *testing.T) {
	c := truth.New([]string{"C"})
	page := func(top, n int64, branch string) []truth.Block {
		var out []truth.Block
		for h := top; h > top-n; h-- {
			out = append(out, truth.Block{Height: h, Hash: fmt.Sprintf("%s%d", branch, h)})
		}
		return out
	}
	c.Observe("C", page(1000, 100, "a"), 1, true)
	// 41 replaced, the 20-block page shows 20 of them.
	if v := c.Observe("C", page(1000, 20, "b"), 2, true); v.Partial == nil || v.Partial.Fork != 981 {
		t.Fatalf("the page: %+v, want a search open from 981", v)
	}
	if v := c.Observe("C", []truth.Block{{Height: 950, Hash: "a950"}}, 3, false); v.Reorg != nil {
		t.Fatalf("a transaction list at 950 ended the search at %d", v.Reorg.Fork)
	}
	v := c.Observe("C", append(page(1000, 41, "b"), page(959, 59, "a")...), 4, false)
	if v.Reorg == nil || v.Reorg.Fork != 960 || v.Reorg.Depth != 41 {
		t.Fatalf("the page below: %+v, want the fork at 960, 41 deep", v)
	}
}

// TestSelfCheckLearnsTheHeightReading: the self-check's one extra call
// tells the readings apart, and the edge logs which it faces.
func TestSelfCheckLearnsTheHeightReading(t *testing.T) {
	for profile, want := range map[string]string{"height-down": upstream.HeightDown, "height-at": upstream.HeightAt} {
		t.Run(profile, func(t *testing.T) {
			h := newUpstream(t, nil, simProfile(profile))
			var logs testkit.LogBuffer
			h.log = slog.New(slog.NewJSONHandler(&logs, nil))
			h.start()
			if err := h.p.SelfCheck(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := h.p.up.HeightReading(); got != want {
				t.Fatalf("reading %q, want %q", got, want)
			}
			lines := logs.Lines(t, "upstream block-list height reading learned")
			if len(lines) != 1 || lines[0]["reading"] != want {
				t.Fatalf("log lines %v, want one naming %s", lines, want)
			}
			before := h.upstreamCalls()
			h.p.SelfCheck(context.Background()) // learned once
			if n := h.upstreamCalls() - before; n != 1 {
				t.Fatalf("a second self-check made %d calls, want 1", n)
			}
		})
	}
}

// TestBlockAtAHeightIsFinal: under the vendor's reading, block-list
// height=X of a done block is one block on one page, final for an hour
// (max-age=3600); above the finalized height it is head, and so it is in
// the older half of the upstream's window of 10000 blocks (it would leave
// the window, and be refused, within the hour). Under height-down the
// same question is a page whose totalPage moves with every block: head.
func TestBlockAtAHeightIsFinal(t *testing.T) {
	for profile, final := range map[string]bool{"height-at": true, "height-down": false} {
		t.Run(profile, func(t *testing.T) {
			h := newHarness(t, simProfile(profile))
			h.get(forkBlocks)
			done := h.sim.FinalizedHeight("CHAINX")
			at := fmt.Sprintf("%s&height=%d&limit=1", forkBlocks, done-3)
			r := h.get(at)
			if got := strings.Contains(r.header["Cache-Control"], "max-age=3600"); got != final {
				t.Fatalf("block-list height=%d (done): %q, final %v, want %v", done-3, r.header["Cache-Control"], got, final)
			}
			pending := fmt.Sprintf("%s&height=%d", forkBlocks, h.sim.Head("CHAINX"))
			if r := h.get(pending); maxAge(r) != 1 {
				t.Fatalf("the block at the head (pending): %q, want head", r.header["Cache-Control"])
			}
			old := fmt.Sprintf("%s&height=%d", forkBlocks, done-6000)
			if r := h.get(old); r.status != 200 || maxAge(r) != 1 {
				t.Fatalf("a done block 6000 below: %d %q, want head", r.status, r.header["Cache-Control"])
			}
		})
	}
}

// TestFinalityByDepth: on a chain whose blocks carry no state (the
// vendor's v6 page: empty where it does not apply), finality follows
// chain_finality_depth: the head less the depth, said by the
// chain_final_height_source gauge and /readyz; a done-less block's
// transactions at or below it are final. Without a depth nothing is
// final, and /readyz says so. Before, the finalized height never rose.
func TestFinalityByDepth(t *testing.T) {
	source := func(h *harness, s string) float64 {
		return gathered(t, h).value(t, "explorer_edge_chain_final_height_source", "chain", "CHAINX", "source", s)
	}
	t.Run("depth", func(t *testing.T) {
		h := newHarness(t, simProfile("state-empty"), func(c *config.Config, _ *sim.Config) {
			c.ChainFinalityDepth = map[string]int64{"chainx": 12}
		})
		h.get(forkBlocks)
		head := h.sim.Head("CHAINX")
		if f := h.p.truth.Final("CHAINX"); f != head-12 {
			t.Fatalf("finalized height %d, want the head %d less 12", f, head)
		}
		if source(h, "depth") != 1 || source(h, "state") != 0 {
			t.Fatalf("chain_final_height_source: depth %v, state %v", source(h, "depth"), source(h, "state"))
		}
		if ok, why := h.p.Ready(); !ok || !strings.Contains(why, "CHAINX by depth (chain_finality_depth 12") {
			t.Fatalf("Ready() = %v %q", ok, why)
		}
		if r := h.get(forkTx(head - 12)); !strings.Contains(r.header["Cache-Control"], "max-age=86400") {
			t.Fatalf("transactions 12 below the head: %q, want final", r.header["Cache-Control"])
		}
		if r := h.get(forkTx(head - 11)); strings.Contains(r.header["Cache-Control"], "max-age=86400") {
			t.Fatalf("transactions 11 below the head: %q, want head", r.header["Cache-Control"])
		}
		// The chain moves: so does the finalized height.
		h.clock.Advance(9 * time.Second)
		h.get(forkBlocks)
		if f, head := h.p.truth.Final("CHAINX"), h.sim.Head("CHAINX"); f != head-12 {
			t.Fatalf("finalized height %d after the chain moved, want %d", f, head-12)
		}
	})
	t.Run("none", func(t *testing.T) {
		h := newHarness(t, simProfile("state-empty"))
		h.get(forkBlocks)
		if f := h.p.truth.Final("CHAINX"); f != 0 {
			t.Fatalf("finalized height %d from blocks without state and no depth", f)
		}
		if source(h, "none") != 1 {
			t.Fatal("chain_final_height_source{source=none} is not 1")
		}
		if ok, why := h.p.Ready(); !ok || !strings.Contains(why, "CHAINX none") {
			t.Fatalf("Ready() = %v %q", ok, why)
		}
	})
	t.Run("state", func(t *testing.T) {
		h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.ChainFinalityDepth = map[string]int64{"CHAINX": 12} })
		h.get(forkBlocks)
		if f, want := h.p.truth.Final("CHAINX"), h.sim.FinalizedHeight("CHAINX"); f != want {
			t.Fatalf("finalized height %d, want the highest done block %d: the state wins over the depth", f, want)
		}
		if source(h, "state") != 1 {
			t.Fatal("chain_final_height_source{source=state} is not 1")
		}
		if ok, why := h.p.Ready(); !ok || why != "ok" {
			t.Fatalf("Ready() = %v %q", ok, why)
		}
	})
}

// TestReplacedHeightSeenAgainIsNotANewReorg: once a reorganization is
// reported, a height it replaced that an answer shows again for the first
// time since (a transaction list, on a node that saw the reorganization
// through one block) is that reorganization, not another; a height seen
// since that changes again is a new one. Before, each such answer was
// counted as a reorganization of its own (a node of a fleet counted 2).
func TestReplacedHeightSeenAgainIsNotANewReorg(t *testing.T) {
	c := truth.New([]string{"C"})
	var old []truth.Block
	for h := int64(1000); h >= 990; h-- {
		old = append(old, truth.Block{Height: h, Hash: fmt.Sprintf("a%d", h)})
	}
	c.Observe("C", old, 1, true)
	// One block of the new branch, at 990: nothing known below it, the
	// fork is reported at 990 (all this node can know).
	if v := c.Observe("C", []truth.Block{{Height: 990, Hash: "b990"}}, 2, false); v.Reorg == nil || v.Reorg.Fork != 990 {
		t.Fatalf("the first block of the new branch: %+v", v)
	}
	if v := c.Observe("C", []truth.Block{{Height: 995, Hash: "b995"}}, 3, false); v.Reorg != nil || v.Partial != nil {
		t.Fatalf("another replaced height seen again: %+v, want nothing new", v)
	}
	// 994 still holds the old branch's hash: the new one's search opens
	// from 995.
	if v := c.Observe("C", []truth.Block{{Height: 995, Hash: "c995"}}, 4, false); v.Partial == nil || v.Partial.Fork != 995 {
		t.Fatalf("a height seen since the reorganization changing again: %+v, want a new one from 995", v)
	}
}
