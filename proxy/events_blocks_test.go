package proxy

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// withBlockPagesOff turns cache.block_pages off: every block-list
// question without a height is asked of the upstream as it is. For tests
// about something else that count the upstream's calls per question.
func withBlockPagesOff(c *config.Config, _ *sim.Config) { c.Cache.BlockPages = false }

// streamVariants are 16 newest-page questions of CHAINX other than the
// default one (limit=20): stream.variants' most.
func streamVariants() []string {
	var v []string
	for limit := 1; limit <= config.MaxStreamVariants; limit++ {
		v = append(v, "/api/v5/chainx/block/block-list?chainShortName=chainx&limit="+strconv.Itoa(limit))
	}
	return v
}

// TestEventsVariantsOneCallPerBlock is the stream's cost with
// cache.block_pages on: with 16 variants registered (each asked by three
// clients), the poller asks the page of the newest 100 blocks once a
// poll and answers the default page and every variant from its blocks,
// so the upstream is asked once per poll: the variants add no call
// (1.00 a block where a poll finds each block, as the poller's pace
// aligned on the blocks makes it; the test's clock jumps add polls that
// find none), not 1 + 16 per block. At every head announced
// each variant is a hit holding that head (cached before announced).
// With the key off, the same 16 variants cost a call each per block.
func TestEventsVariantsOneCallPerBlock(t *testing.T) {
	const blocks = 8
	run := func(t *testing.T, opts ...harnessOpt) (calls, polled, news float64) {
		opts = append([]harnessOpt{withStream, func(c *config.Config, _ *sim.Config) {
			c.Stream.Variants = config.MaxStreamVariants
			c.Stream.MaxPerIP = 64
		}}, opts...)
		h := newHarness(t, opts...)
		variants := streamVariants()
		for _, v := range variants {
			askFrom(t, h, v, 3)
		}
		s := openStream(t, h.addr, "/edge/v1/events?chains=chainx")
		head, _ := s.nextHead(t, 0)
		// Once a head is announced with every variant registered, count.
		h.clock.Advance(time.Second)
		head, _ = s.nextHead(t, head.Height)
		calls0, polls0, news0 := h.blockListCalls(), polls(t, h, "CHAINX"), polls(t, h, "CHAINX", "new")
		for block := range blocks {
			h.clock.Advance(time.Second) // explorer-sim makes a block a second of its clock
			head, _ = s.nextHead(t, head.Height)
			if want := h.sim.Head("CHAINX"); head.Height != want {
				t.Fatalf("block %d: announced %d, the upstream's head is %d", block, head.Height, want)
			}
			for _, v := range variants {
				r := h.get(v)
				if cs := r.header["Cache-Status"]; r.status != 200 || !strings.HasPrefix(cs, "explorer-edge; hit") {
					t.Fatalf("block %d: %s on the head event: %d %q, want a hit", block, v, r.status, cs)
				}
				if got := newestHeight(t, r.body); got != head.Height {
					t.Fatalf("block %d: %s holds %d, the event said %d", block, v, got, head.Height)
				}
			}
		}
		h.node.Close(context.Background()) // no poll in flight while counting
		return float64(h.blockListCalls() - calls0), polls(t, h, "CHAINX") - polls0, polls(t, h, "CHAINX", "new") - news0
	}
	t.Run("on", func(t *testing.T) {
		calls, polled, news := run(t)
		t.Logf("16 variants, cache.block_pages on: %v upstream block-list calls, %v polls, %v new heads over %d blocks: %.2f calls a poll",
			calls, polled, news, blocks, calls/polled)
		if news < blocks || calls != polled {
			t.Fatalf("%v upstream block-list calls for %v polls (%v new heads), want one a poll", calls, polled, news)
		}
	})
	t.Run("off", func(t *testing.T) {
		calls, polled, news := run(t, withBlockPagesOff)
		t.Logf("16 variants, cache.block_pages off: %v upstream block-list calls, %v polls, %v new heads over %d blocks: %.2f calls a new head beside the polls",
			calls, polled, news, blocks, (calls-polled)/news)
		if calls < polled+news*float64(config.MaxStreamVariants) {
			t.Fatalf("off: %v calls for %v polls and %v new heads, want each of 16 variants refreshed at every head", calls, polled, news)
		}
	})
}
