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
