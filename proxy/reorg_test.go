package proxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// TestReorgIsHandled: explorer-sim replaces the newest blocks (depth 1, 2,
// and pending depth + 1, which replaces a done block) while clients keep
// asking. The edge sees it in the next block list: it counts and logs it
// once, and every answer it gives for the affected heights matches the
// upstream's after one refresh (within one head fresh time); final answers
// the reorg did not reach are still hits, and the ones it reached (depth 3
// only) are purged with an error in the log.
func TestReorgIsHandled(t *testing.T) {
	const pending = 2 // explorer-sim's default pending depth
	for _, depth := range []int{1, 2, pending + 1} {
		t.Run(fmt.Sprintf("depth=%d", depth), func(t *testing.T) {
			h := newHarness(t, withBlockPagesOff)
			var logs testkit.LogBuffer
			h.log = slog.New(slog.NewJSONHandler(&logs, nil))
			h.start()
			blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
			h.get(blocks) // the finalized height and the hashes of the newest 20 blocks
			head := h.sim.Head("CHAINX")
			if f := h.p.truth.Final("CHAINX"); f != head-pending {
				t.Fatalf("final height %d, head %d", f, head)
			}
			tx := func(height int64) string {
				return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
			}
			var affected, untouched []string
			for hh := head - pending; hh <= head; hh++ {
				if hh > head-int64(depth) {
					affected = append(affected, tx(hh))
				} else {
					untouched = append(untouched, tx(hh))
				}
			}
			untouched = append(untouched, tx(head-pending-5))
			finalTx := tx(head - pending) // done before the reorg
			h.warm(append(append([]string{}, affected...), untouched...)...)
			if e := h.cache.GetString(cacheKey(t, h.p, finalTx)); e == nil || e.Class != cache.Final {
				t.Fatal("the done block's transactions are not cached as final")
			}

			// Clients keep asking throughout.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var once sync.Once
			halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
			t.Cleanup(halt)
			var answered atomic.Int64
			all := append(append([]string{blocks}, affected...), untouched...)
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if r := h.get(all[i%len(all)]); r.status != 200 || r.code() != "0" {
							t.Errorf("under load: %d %s", r.status, r.body)
							return
						}
						answered.Add(1)
					}
				}()
			}
			h.sim.SetFaults(sim.Faults{Reorg: depth})
			// The next block list the edge fetches shows it: within one head
			// fresh time, the head page is. Here another page, at once, while
			// the answers of the affected heights are all still fresh: without
			// the edge's purge they would be served as they are.
			h.clock.Advance(time.Millisecond)
			reorgs := func() float64 { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) }
			if r := h.get(blocks + "&limit=19"); !isMiss(r) || reorgs() != 1 {
				t.Fatalf("a new block list after the reorg: %q, reorgs_total %v", r.header["Cache-Status"], reorgs())
			}
			halt()
			if answered.Load() == 0 {
				t.Fatal("no load")
			}

			for _, target := range affected {
				want := h.simGet(target)
				r := h.get(target)
				if !bytes.Equal(r.body, want) {
					// The purged answer, stale, once; its refresh follows.
					if !strings.Contains(r.header["Cache-Status"], "stale-while-revalidate") {
						t.Fatalf("%s after the reorg: %q, neither the new answer nor stale while refreshed", target, r.header["Cache-Status"])
					}
					key := cacheKey(t, h.p, target)
					testkit.WaitFor(t, "the refresh of "+target, func() bool { return !isStale(h, key) })
					r = h.get(target)
				}
				if !bytes.Equal(r.body, want) {
					t.Fatalf("%s after the reorg and a refresh: %q, not the upstream's answer", target, r.header["Cache-Status"])
				}
			}
			deep := depth > pending
			for _, target := range untouched {
				r := h.get(target)
				if !bytes.Equal(r.body, h.simGet(target)) {
					t.Fatalf("%s, below the reorg: the answer differs from the upstream's", target)
				}
				if target == finalTx && deep {
					continue // the reorg replaced it: see affected
				}
				if cs := r.header["Cache-Status"]; !strings.HasPrefix(cs, "explorer-edge; hit") || strings.Contains(cs, "stale") {
					if target == finalTx || !strings.Contains(cs, "stale") {
						t.Fatalf("%s, a final answer below the reorg: %q, want a plain hit", target, cs)
					}
				}
			}
			if n := reorgs(); n != 1 {
				t.Fatalf("reorgs_total{chain=CHAINX} = %v, want 1", n)
			}
			warns, errs := 0, 0
			for _, l := range logs.Lines(t, "") {
				if m, _ := l["msg"].(string); strings.HasPrefix(m, "chain reorganized") && l["chain"] == "CHAINX" {
					if l["level"] == "ERROR" {
						errs++
					} else {
						warns++
					}
					if from := l["from"].(float64); int64(from) != head-int64(depth)+1 {
						t.Errorf("reorg logged from height %v, want %d", from, head-int64(depth)+1)
					}
				}
			}
			if deep && (errs != 1 || warns != 0) || !deep && (errs != 0 || warns != 1) {
				t.Fatalf("reorg log lines: %d errors, %d warnings; want one %s", errs, warns, map[bool]string{true: "error", false: "warning"}[deep])
			}
		})
	}
}
