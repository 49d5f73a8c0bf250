package truth

import (
	"fmt"
	"testing"
)

// branch names the hash of height h on a branch.
func branch(name string, h int64) string { return fmt.Sprintf("%s-%d", name, h) }

// list is a block list from top down, n blocks, heights at or below done
// final, on branch name from fork up (below it on "main").
func list(top int64, n int, name string, fork, done int64) []Block {
	var out []Block
	for h := top; h > top-int64(n) && h >= 0; h-- {
		b := "main"
		if h >= fork {
			b = name
		}
		out = append(out, Block{Height: h, Hash: branch(b, h), Done: h <= done})
	}
	return out
}

const never = 1 << 62 // a fork height no list reaches

func TestHeadNeverGoesBack(t *testing.T) {
	c := New([]string{"X"})
	c.Observe("X", list(100, 20, "main", never, 98), 1, true)
	if v := c.Observe("X", list(95, 20, "main", never, 93), 2, true); v.Behind != 5 || v.Reorg != nil {
		t.Fatalf("a head list 5 behind: %+v", v)
	}
	if h, _, _ := c.Head("X"); h != 100 {
		t.Fatalf("head %d after a list behind it, want 100", h)
	}
	if f := c.Final("X"); f != 98 {
		t.Fatalf("final %d, want 98 (a list behind changes nothing)", f)
	}
	// A list at a height is no head list: never behind.
	if v := c.Observe("X", list(50, 20, "main", never, 50), 3, false); v.Behind != 0 {
		t.Fatalf("a list at a height judged behind: %+v", v)
	}
	c.Observe("X", list(101, 20, "main", never, 99), 4, true)
	if h, _, _ := c.Head("X"); h != 101 {
		t.Fatalf("head %d, want 101", h)
	}
}

func TestShallowReorgFoundOnce(t *testing.T) {
	c := New([]string{"X"})
	c.Observe("X", list(100, 20, "main", never, 98), 1, true)
	v := c.Observe("X", list(100, 20, "b", 99, 98), 2, true)
	if v.Reorg == nil || v.Reorg.Fork != 99 || v.Reorg.Depth != 2 || v.Reorg.Deep || v.Reorg.NewHash != branch("b", 99) {
		t.Fatalf("reorg of 2 above the finalized height: %+v", v.Reorg)
	}
	// The same lists again, and the next head: nothing new.
	for i, l := range [][]Block{list(100, 20, "b", 99, 98), list(101, 20, "b", 99, 99)} {
		if v := c.Observe("X", l, int64(3+i), true); v.Reorg != nil || v.Partial != nil {
			t.Fatalf("list %d after the reorg reported again: %+v", i, v)
		}
	}
	// An answer asked before the reorg's tells nothing new.
	if v := c.Observe("X", list(90, 20, "main", never, 90), 0, false); v.Reorg != nil {
		t.Fatalf("an older answer made a reorg: %+v", v.Reorg)
	}
}

func TestDeepReorgProbedToItsFork(t *testing.T) {
	c := New([]string{"X"})
	// The edge saw heights 41..100 (the head page as the chain moved).
	for top := int64(60); top <= 100; top += 20 {
		c.Observe("X", list(top, 20, "main", never, top-2), top, true)
	}
	// 41 blocks replaced: fork at 60; the 20 newest all differ.
	v := c.Observe("X", list(100, 20, "b", 60, 98), 200, true)
	if v.Reorg != nil || v.Partial == nil || v.Partial.Fork != 81 || v.ProbeBelow != 80 || !v.Partial.Deep {
		t.Fatalf("every row changed: %+v (partial %+v)", v, v.Partial)
	}
	// Another head list meanwhile: nothing new, no second probe.
	if v := c.Observe("X", list(100, 20, "b", 60, 98), 201, true); v.Partial != nil || v.Reorg != nil {
		t.Fatalf("a head list while the fork is searched: %+v", v)
	}
	// The probe: a list from 80 down, 10 at a time to make it take two.
	v = c.Observe("X", list(80, 10, "b", 60, 98), 202, false)
	if v.Reorg != nil || v.Partial == nil || v.ProbeBelow != 70 {
		t.Fatalf("probe 80..71, all changed: %+v", v)
	}
	v = c.Observe("X", list(70, 20, "b", 60, 98), 203, false)
	if v.Reorg == nil || v.Reorg.Fork != 60 || v.Reorg.Depth != 41 || !v.Reorg.Deep || v.Reorg.At != 200 {
		t.Fatalf("probe 70..51 reaching the fork: %+v", v.Reorg)
	}
	if g := c.GiveUp("X"); g != nil {
		t.Fatalf("a search left open: %+v", g)
	}
}

func TestGiveUpReportsWhatIsKnown(t *testing.T) {
	c := New([]string{"X"})
	c.Observe("X", list(100, 40, "main", never, 98), 1, true)
	if v := c.Observe("X", list(100, 20, "b", 50, 98), 2, true); v.Partial == nil {
		t.Fatalf("no partial: %+v", v)
	}
	r := c.GiveUp("X")
	if r == nil || r.Fork != 81 || r.Depth != 20 {
		t.Fatalf("given up: %+v", r)
	}
	if c.GiveUp("X") != nil {
		t.Fatal("given up twice")
	}
}

// TestNothingKnownBelowIsTheFork: a fork below everything the edge saw is
// reported at the lowest height it knew (nothing it holds reaches lower).
func TestNothingKnownBelowIsTheFork(t *testing.T) {
	c := New([]string{"X"})
	c.Observe("X", list(100, 20, "main", never, 98), 1, true)
	v := c.Observe("X", list(100, 20, "b", 30, 98), 2, true)
	if v.Reorg == nil || v.Reorg.Fork != 81 || v.Partial != nil {
		t.Fatalf("%+v", v)
	}
}

// TestReadNeverMovesTruthBeyondTheUpstream: an answer read back from a
// tier (a forged newest page in Redis: a million blocks ahead, every block
// done) is Unconfirmed and changes nothing; one within Slack of the
// confirmed height may be served but raises the finalized height only to
// done blocks the upstream confirmed; a hash other than the upstream's is
// Unconfirmed, never a reorganization; and the fleet's finalized height
// (RaiseFinal) is held to the confirmed height too.
func TestReadNeverMovesTruthBeyondTheUpstream(t *testing.T) {
	c := New([]string{"X"})
	if v := c.Read("X", list(100, 20, "main", never, 98), 1, true); !v.Unconfirmed {
		t.Fatalf("a read before any upstream answer: %+v, want unconfirmed", v)
	}
	c.Observe("X", list(100, 20, "main", never, 90), 2, true)
	if got, _ := c.Confirmed("X"); got != 100 {
		t.Fatalf("confirmed %d after the upstream's head 100", got)
	}
	forged := list(1_000_100, 20, "forged", 0, 1_000_100)
	if v := c.Read("X", forged, 3, true); !v.Unconfirmed || v.Reorg != nil || v.Partial != nil {
		t.Fatalf("a forged page a million ahead: %+v, want unconfirmed", v)
	}
	if h, _, _ := c.Head("X"); h != 100 {
		t.Fatalf("head %d after the forged read, want 100", h)
	}
	if f := c.Final("X"); f != 90 {
		t.Fatalf("final %d after the forged read, want 90", f)
	}
	// Within Slack: served, the head read moves, but done blocks above
	// the confirmed height are not believed.
	if v := c.Read("X", list(100+Slack, 20, "main", never, 100+Slack), 4, true); v != (Verdict{}) {
		t.Fatalf("a page %d above the confirmed head: %+v, want it taken", Slack, v)
	}
	if h, _, _ := c.Head("X"); h != 100+Slack {
		t.Fatalf("head %d after a read within the slack, want %d", h, 100+Slack)
	}
	if f := c.Final("X"); f != 100 {
		t.Fatalf("final %d after a read marking blocks done up to %d, want the confirmed 100", f, 100+Slack)
	}
	if got, _ := c.Confirmed("X"); got != 100 {
		t.Fatalf("a read moved the confirmed height to %d", got)
	}
	if v := c.Read("X", list(101+Slack, 20, "main", never, 0), 5, true); !v.Unconfirmed {
		t.Fatalf("a page %d above the confirmed head: %+v, want unconfirmed", Slack+1, v)
	}
	// A hash other than the upstream's: unconfirmed, no reorganization.
	if v := c.Read("X", list(100, 20, "b", 95, 0), 6, false); !v.Unconfirmed || v.Reorg != nil || v.Partial != nil {
		t.Fatalf("a read with other hashes: %+v, want unconfirmed", v)
	}
	if got := c.Hash("X", 96); got != branch("main", 96) {
		t.Fatalf("a read wrote hash %q at 96", got)
	}
	// A head read behind the newest head seen.
	if v := c.Read("X", list(99, 20, "main", never, 0), 7, true); v.Behind != 1+Slack {
		t.Fatalf("a head page behind the head read: %+v", v)
	}
	// The fleet's finalized height: held to the confirmed height.
	if c.RaiseFinal("X", 1_000_000); c.Final("X") != 100 {
		t.Fatalf("final %d after the fleet said a million, want the confirmed 100", c.Final("X"))
	}
	// The upstream's own answer moves everything.
	c.Observe("X", list(110, 20, "main", never, 105), 8, true)
	if got, _ := c.Confirmed("X"); got != 110 || c.Final("X") != 105 {
		t.Fatalf("after the upstream's head 110: confirmed %d, final %d", got, c.Final("X"))
	}
	// Restore: this node's own finalized height from before a restart.
	r := New([]string{"X"})
	r.Restore("X", 90)
	if got, _ := r.Confirmed("X"); got != 90 || r.Final("X") != 90 {
		t.Fatalf("restored 90: confirmed %d, final %d", got, r.Final("X"))
	}
	if v := r.Read("X", []Block{{Height: 80, Hash: "h80"}}, 1, false); v != (Verdict{}) {
		t.Fatalf("a read below the restored height: %+v, want it taken", v)
	}
}

// TestTryConfirmOncePerInterval: however many unconfirmed reads, one
// confirming call per chain per interval, and none while the upstream's
// head is that recent.
func TestTryConfirmOncePerInterval(t *testing.T) {
	c := New([]string{"X"})
	if !c.TryConfirm("X", 1000, 100) || c.TryConfirm("X", 1050, 100) {
		t.Fatal("two confirming calls within the interval")
	}
	if !c.TryConfirm("X", 1100, 100) {
		t.Fatal("no confirming call an interval later")
	}
	c.Observe("X", list(10, 5, "main", never, 0), 1150, true)
	if c.TryConfirm("X", 1220, 100) {
		t.Fatal("a confirming call 70 after the upstream's own head")
	}
	if c.TryConfirm("Y", 5000, 100) {
		t.Fatal("a chain not served confirmed")
	}
}

// TestLearnedReorgIsNotReportedAgain: a reorganization another node
// reported (Learn, from its purge applied here) is taken silently when
// this node sees the new branch: no Reorg, no Partial, the new hashes
// kept; head and finalized height untouched by Learn. Of two learned
// reports of one reorganization (the same time), the lowest fork covers.
// A height seen since the learned time that changes is a new one.
func TestLearnedReorgIsNotReportedAgain(t *testing.T) {
	c := New([]string{"X"})
	c.Observe("X", list(100, 20, "main", never, 85), 1, true)
	c.Learn("X", 97, 5)
	c.Learn("X", 95, 5) // the same one, a lower fork: kept
	c.Learn("NOPE", 95, 5)
	if h, hash, _ := c.Head("X"); h != 100 || hash != branch("main", 100) || c.Final("X") != 85 {
		t.Fatalf("Learn moved the head or the finalized height: %d %s final %d", h, hash, c.Final("X"))
	}
	if v := c.Observe("X", list(100, 20, "b", 95, 85), 6, true); v.Reorg != nil || v.Partial != nil {
		t.Fatalf("the learned reorganization seen here: %+v %+v, want nothing new", v.Reorg, v.Partial)
	}
	if h := c.Hash("X", 95); h != branch("b", 95) {
		t.Fatalf("hash at 95 %q, want the new branch's", h)
	}
	if h, hash, _ := c.Head("X"); h != 100 || hash != branch("b", 100) {
		t.Fatalf("head %d %s, want the new branch's 100", h, hash)
	}
	// Seen since: a change now is another reorganization.
	again := list(100, 20, "b", 95, 85)
	for i := range again {
		if again[i].Height >= 98 {
			again[i].Hash = branch("c", again[i].Height)
		}
	}
	if v := c.Observe("X", again, 7, true); v.Reorg == nil || v.Reorg.Fork != 98 {
		t.Fatalf("a change after the learned one: %+v, want a reorganization from 98", v.Reorg)
	}
	// A learned report covers only what was known before its time: a
	// height refreshed after it that changes is reported.
	d := New([]string{"X"})
	d.Observe("X", list(100, 20, "main", never, 85), 1, true)
	d.Learn("X", 95, 2)
	d.Observe("X", list(100, 20, "main", never, 85), 3, true)
	if v := d.Observe("X", list(100, 20, "b", 95, 85), 4, true); v.Reorg == nil || v.Reorg.Fork != 95 {
		t.Fatalf("heights refreshed after the learned time then changed: %+v, want a reorganization from 95", v.Reorg)
	}
}
