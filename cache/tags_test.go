package cache

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// heightTagged tags an "h<N>" entry with height N on route 1, as the
// request core tags what it stores.
func heightTagged(e *Entry) *Entry {
	var h int64
	fmt.Sscanf(e.Key, "h%d", &h)
	e.Tags = Tags{Route: 1, Chain: 1, Lo: h, Hi: h + 1, Hashes: []uint64{uint64(h)}}
	return e
}

func newTagged(t testing.TB, maxBytes int64) *Cache {
	t.Helper()
	c, err := New(Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestPurgeHardAndSoft(t *testing.T) {
	c := newTagged(t, 64<<20)
	now := time.Unix(1000, 0)
	for h := range 100 {
		c.Set(heightTagged(NewEntry(fmt.Sprintf("h%d", h), []byte(`{"code":"0","data":[]}`), Final, now, time.Hour, 30*time.Second, time.Minute)), now)
	}
	if n := c.Entries(); n != 100 {
		t.Fatalf("%d entries stored, want 100", n)
	}
	in := func(from, to int64) func(*Entry) bool {
		return func(e *Entry) bool { return e.Tags.HasHeights(from, to) }
	}
	if n := c.Purge(in(10, 19), false, now); n != 10 {
		t.Fatalf("hard purge of 10 heights matched %d", n)
	}
	for h := range 100 {
		got := c.GetString(fmt.Sprintf("h%d", h))
		if (h >= 10 && h <= 19) != (got == nil) {
			t.Fatalf("height %d after the hard purge: %v", h, got)
		}
	}
	if c.Entries() != 90 || c.indexLen() != 90 {
		t.Fatalf("entries %d, index %d after the purge; want 90, 90", c.Entries(), c.indexLen())
	}
	later := now.Add(time.Second)
	if n := c.Purge(in(20, 29), true, later); n != 10 {
		t.Fatalf("soft purge of 10 heights matched %d", n)
	}
	for h := 20; h < 30; h++ {
		e := c.GetString(fmt.Sprintf("h%d", h))
		if st := e.StateAt(later.UnixNano()); st != Stale {
			t.Fatalf("height %d after the soft purge: %v, want stale", h, st)
		}
		if e.StateAt(later.Add(31*time.Second).UnixNano()) != Expired {
			t.Fatalf("height %d: not expired past its stale window", h)
		}
	}
	if st := c.GetString("h30").StateAt(later.UnixNano()); st != Fresh {
		t.Fatalf("height 30, not selected, is %v", st)
	}
	if c.Entries() != 90 || c.indexLen() != 90 {
		t.Fatalf("entries %d, index %d after the soft purge; want 90, 90", c.Entries(), c.indexLen())
	}
	if n := c.PurgeKeys([]string{"h50", "h51", "nope"}, nil, false, later); n != 2 || c.GetString("h50") != nil {
		t.Fatalf("purge by key matched %d", n)
	}
	if n := c.Purge(func(*Entry) bool { return true }, false, later); n != 88 || c.Entries() != 0 || c.indexLen() != 0 {
		t.Fatalf("purge of all matched %d, left %d entries and %d in the index", n, c.Entries(), c.indexLen())
	}
}

// The index holds exactly the entries the cache holds, through
// evictions for space, replacements and deletions.
func TestPurgeIndexFollowsEvictions(t *testing.T) {
	c := newTagged(t, 1<<20)
	now := time.Unix(1000, 0)
	body := make([]byte, 4000)
	for i := range 2000 { // 8 MB into 1 MB
		c.Set(heightTagged(NewItem(fmt.Sprintf("h%d", i%1500), body, Final, now, time.Hour, 0, 0)), now)
		if i%97 == 0 {
			c.Del(fmt.Sprintf("h%d", i/2))
		}
	}
	c.r.Wait()
	if c.Evictions() == 0 {
		t.Fatal("nothing evicted: the test does not exercise evictions")
	}
	if n, live := c.Entries(), c.indexLen(); int64(live) != n {
		t.Fatalf("index holds %d entries, the cache %d", live, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.live {
		if !e.held || int(e.slot) != i {
			t.Fatalf("index slot %d: held %v slot %d", i, e.held, e.slot)
		}
	}
}

// BenchmarkPurge fills a cache with 100,000 tagged entries and purges them
// all by heights: the index's bytes per entry and the time of one purge of
// 100,000 entries (goal: under 1 s).
//
//	go test -run '^$' -bench BenchmarkPurge -benchtime 3x ./cache
func BenchmarkPurge(b *testing.B) {
	const n = 100_000
	body := make([]byte, 600)
	now := time.Unix(1000, 0)
	b.ReportAllocs()
	var indexBytes, entryCost float64
	for b.Loop() {
		b.StopTimer()
		c, err := New(Config{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			c.Set(heightTagged(NewItem(fmt.Sprintf("h%d", i), body, Final, now, time.Hour, 0, 0)), now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if c.Entries() != n {
			b.Fatalf("%d entries held, want %d", c.Entries(), n)
		}
		// The index: the list's array plus the fields tags add to Entry and
		// the digests (one per entry here).
		e := c.GetString("h1")
		indexBytes = float64(8*cap(c.live))/n + float64(e.Tags.cost()-16)
		entryCost = float64(c.Bytes()) / n
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/entry")
		b.StartTimer()
		if got := c.Purge(func(e *Entry) bool { return e.Tags.HasHeights(0, n) }, false, now); got != n {
			b.Fatalf("purged %d", got)
		}
		b.StopTimer()
		if c.Entries() != 0 {
			b.Fatalf("%d entries left", c.Entries())
		}
		c.Close()
		b.StartTimer()
	}
	b.ReportMetric(indexBytes, "index-B/entry")
	b.ReportMetric(entryCost, "cost-B/entry")
}
