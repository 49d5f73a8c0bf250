package purge

import (
	"testing"
	"time"

	"explorer-edge/cache"
	"explorer-edge/proxy/route"
)

// logEntry is an entry of route block-list on CHAINX holding height 10,
// its answer fetched at stored (unix ns), fresh for a minute.
func logEntry(stored int64) *cache.Entry {
	e := &cache.Entry{Key: "k", Stored: stored, Fresh: stored + int64(time.Minute)}
	e.Tags.Route, e.Tags.Chain, e.Tags.Lo, e.Tags.Hi = routeTag(&route.Table[route.BlockList]), 1, 10, 11
	return e
}

// selOf parses a selector or fails the test.
func selOf(t *testing.T, body string) *Selector {
	t.Helper()
	return mustParse(t, body)
}

// TestLogVerdict: an answer is judged only by the purges that ran after
// it was fetched and that select it: a hard one drops it, soft ones make
// it stale from the earliest of them; purges before since are not asked.
func TestLogVerdict(t *testing.T) {
	var l Log
	hard := selOf(t, `{"route":"block-list"}`)
	soft := selOf(t, `{"heights":{"chain":"CHAINX","from":10,"to":10},"soft":true}`)
	other := selOf(t, `{"route":"position-list"}`)
	l.add(record{at: 100, sel: soft}, 0)
	l.add(record{at: 200, sel: soft}, 0)
	l.add(record{at: 300, sel: other}, 0)
	for _, c := range []struct {
		stored, since int64
		drop          bool
		from          int64
	}{
		{50, 0, false, 100},   // both soft purges after it: stale from the first
		{150, 0, false, 200},  // only the second
		{250, 0, false, 0},    // only a purge that does not select it
		{50, 150, false, 200}, // the first is older than since: not asked
		{350, 0, false, 0},
	} {
		drop, from := l.verdict(logEntry(c.stored), c.since)
		if drop != c.drop || from != c.from {
			t.Errorf("stored %d since %d: drop %v stale from %d, want %v %d", c.stored, c.since, drop, from, c.drop, c.from)
		}
		if after := l.after(c.stored); after != (c.stored < 300) {
			t.Errorf("after(%d) = %v: a purge at 300 is newer", c.stored, after)
		}
	}
	l.add(record{at: 400, sel: hard}, 0)
	if drop, _ := l.verdict(logEntry(350), 0); !drop {
		t.Errorf("a hard purge after the answer did not drop it")
	}
	if drop, from := l.verdict(logEntry(50), 0); !drop || from != 0 {
		t.Errorf("a hard purge did not win over soft ones: drop %v from %d", drop, from)
	}
	if drop, _ := l.verdict(logEntry(400), 0); drop {
		t.Errorf("an answer fetched at the purge's time was dropped: the purge ran before it")
	}
}

// TestLogOrderAndAge: records are kept in time order whatever order they
// come in (another node's may be older), and those older than since are
// dropped as the next one is added.
func TestLogOrderAndAge(t *testing.T) {
	var l Log
	s := selOf(t, `{"all":true}`)
	for _, at := range []int64{300, 100, 200, 250} {
		l.add(record{at: at, sel: s}, 0)
	}
	var got []int64
	for _, r := range *l.recs.Load() {
		got = append(got, r.at)
	}
	if len(got) != 4 || got[0] != 100 || got[1] != 200 || got[2] != 250 || got[3] != 300 {
		t.Errorf("records in order %v, want 100 200 250 300", got)
	}
	l.add(record{at: 400, sel: s}, 240)
	got = got[:0]
	for _, r := range *l.recs.Load() {
		got = append(got, r.at)
	}
	if len(got) != 3 || got[0] != 250 {
		t.Errorf("after aging to 240: %v, want 250 300 400", got)
	}
	if l.floor.Load() != 0 {
		t.Errorf("records aged out raised the floor to %d: they are past any answer's way", l.floor.Load())
	}
}

// TestLogTrimRaisesTheFloor: past maxRecords the oldest records go and
// the floor rises to the newest of them: an answer older than that is
// purged whatever it is (a refetch, never a purged answer served).
func TestLogTrimRaisesTheFloor(t *testing.T) {
	var l Log
	s := selOf(t, `{"route":"position-list"}`) // selects none of the log entries
	// A full log, as maxRecords adds would leave it, then two more.
	full := make([]record, maxRecords)
	for i := range full {
		full[i] = record{at: 1000 + int64(i), sel: s}
	}
	l.recs.Store(&full)
	l.add(record{at: 1000 + maxRecords, sel: s}, 0)
	l.add(record{at: 1000 + maxRecords + 1, sel: s}, 0)
	if recs := *l.recs.Load(); len(recs) != maxRecords || recs[0].at != 1002 || recs[len(recs)-1].at != 1001+maxRecords {
		t.Fatalf("%d records kept, from %d to %d; want the newest %d", len(recs), recs[0].at, recs[len(recs)-1].at, maxRecords)
	}
	if f := l.floor.Load(); f != 1001 {
		t.Errorf("floor %d, want 1001 (the newest record dropped)", f)
	}
	if drop, _ := l.verdict(logEntry(1000), 0); !drop || !l.after(1000) {
		t.Errorf("an answer older than the floor is not purged")
	}
	if drop, _ := l.verdict(logEntry(1001), 0); drop {
		t.Errorf("an answer at the floor purged by records that do not select it")
	}
}

// TestLogSharedFloor: the fleet's floor is taken as Redis says it, down
// as well as up, but never below what this log trimmed; a refused floor
// is said once.
func TestLogSharedFloor(t *testing.T) {
	var l Log
	l.sharedFloor(500)
	if l.floor.Load() != 500 || !l.after(499) || l.after(500) {
		t.Errorf("fleet floor 500: floor %d", l.floor.Load())
	}
	l.sharedFloor(0) // deleted or expired in Redis
	if l.floor.Load() != 0 || l.after(499) {
		t.Errorf("a floor gone from Redis still holds answers back: %d", l.floor.Load())
	}
	l.mu.Lock()
	l.trimmed = 300
	l.mu.Unlock()
	l.sharedFloor(100)
	if l.floor.Load() != 300 {
		t.Errorf("floor %d, want the log's own 300 above the fleet's 100", l.floor.Load())
	}
	if !l.refuseFloor(9e18) || l.refuseFloor(9e18) || !l.refuseFloor(8e18) {
		t.Errorf("a refused floor is not said exactly once each")
	}
}
