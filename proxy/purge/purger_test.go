package purge

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/cache"
	"explorer-edge/cache/disk"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// TestPurgeBetweenVerdictAndStore: a purge logged after an answer's
// verdict but before its store waits for the store, then removes it: the
// answer is never left in memory by the purge that should have removed it.
// (Without the ordering, the purge scanned memory before the answer was in
// it, and the answer stayed.)
func TestPurgeBetweenVerdictAndStore(t *testing.T) {
	c, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	chains := []string{"CHAINX"}
	p := New(c, Options{Metrics: metrics.New(route.Names(), chains, c), Logger: slog.New(slog.DiscardHandler),
		Clock: clock, Chains: chains, InFlight: func() time.Duration { return time.Minute }, Retain: func() time.Duration { return time.Hour }})
	sel, perr := Parse([]byte(`{"all":true}`), chains)
	if perr != nil {
		t.Fatal(perr)
	}
	e := cache.NewEntry("k", []byte(`{"code":"0","data":[]}`), cache.Final, now.Add(-time.Second), time.Hour, 0, 0)
	purged := make(chan struct{})
	p.Admit(e, now.Add(-time.Minute).UnixNano(), false, func(e *cache.Entry) {
		go func() { p.Purge(sel); close(purged) }()
		select {
		case <-purged:
			// The purge ran to its end between the verdict and the store.
		case <-time.After(time.Second):
			// It waits for this store, as it must.
		}
		c.Set(e, now)
	})
	<-purged
	if c.GetString("k") != nil {
		t.Fatal("an answer stored after the purge's scan, judged before the purge was logged, stayed in memory")
	}
}

// purgerAt is a purger of a fresh cache on a clock standing at now, with
// the disk tier d (nil: none).
func purgerAt(t *testing.T, now time.Time, d *disk.Store) (*Purger, *cache.Cache, *metrics.Metrics) {
	t.Helper()
	c, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m := metrics.New(route.Names(), testChains, c)
	p := New(c, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler), Clock: func() time.Time { return now },
		Chains: testChains, Disk: d, InFlight: func() time.Duration { return time.Minute }, Retain: func() time.Duration { return time.Hour }})
	return p, c, m
}

// TestPurgeJudgeAndPurged: after a purge, an entry read back (from Redis
// or the disk) whose answer is older is dropped (hard) or stale from the
// purge's time (soft); one fetched after it, or not selected, is as it
// was; Purged says which are not to be written to the shared tier.
func TestPurgeJudgeAndPurged(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, c, m := purgerAt(t, now, nil)
	if !p.Known() {
		t.Fatalf("a single node does not know its own purges")
	}
	before := testEntries(t, now.Add(-time.Second))
	for _, e := range before {
		c.Set(e, now)
	}
	res, err := p.Purge(mustParse(t, `{"route":"transaction-multi"}`))
	if err != nil || res.Memory != 3 || res.Disk != 0 || res.Selector != "route" || res.Mode != "hard" || res.Fleet || res.Seq != 0 {
		t.Fatalf("Purge = %+v %v, want 3 entries of memory (the answer and its two hashes'), no fleet", res, err)
	}
	if c.GetString(before["multi"].Key) != nil || c.GetString(before["itemA"].Key) != nil || c.GetString(before["blocks"].Key) == nil {
		t.Errorf("the purge removed the wrong entries from memory")
	}
	if n := testutil.ToFloat64(m.Purges.WithLabelValues("route", "hard")); n != 1 {
		t.Errorf("purges_total{route,hard} = %v", n)
	}
	older, newer := testEntries(t, now.Add(-time.Second)), testEntries(t, now.Add(time.Second))
	if p.Judge(older["itemB"]) != nil || !p.Purged(older["itemB"]) {
		t.Errorf("an entry older than a hard purge selecting it is read back or written on")
	}
	if p.Judge(newer["itemB"]) != newer["itemB"] || p.Purged(newer["itemB"]) {
		t.Errorf("an entry fetched after the purge is judged by it")
	}
	if p.Judge(older["blocks"]) != older["blocks"] || p.Purged(older["blocks"]) {
		t.Errorf("an entry the purge does not select is judged by it")
	}
	if p.Judge(nil) != nil {
		t.Errorf("Judge(nil) is not nil")
	}

	now2 := now.Add(10 * time.Second)
	p.o.Clock = func() time.Time { return now2 }
	res, _ = p.Purge(mustParse(t, `{"heights":{"chain":"CHAINX","from":101,"to":101},"soft":true}`))
	if res.Memory != 1 || res.Mode != "soft" {
		t.Errorf("soft purge of height 101: %+v, want the block list marked", res)
	}
	if e := c.GetString(before["blocks"].Key); e == nil || e.Fresh > now2.UnixNano() {
		t.Errorf("a soft purge removed the entry or left it fresh: %v", e)
	}
	blocks := older["blocks"]
	fresh := blocks.Fresh
	if got := p.Judge(blocks); got == nil || got.Fresh != now2.UnixNano() || fresh <= now2.UnixNano() {
		t.Errorf("an entry read back after a soft purge: %v, want it stale from the purge", got)
	}
	if p.Purged(older["blocks"]) {
		t.Errorf("a soft purge keeps an entry from the shared tier")
	}
	stale := testEntries(t, now.Add(-time.Hour))["blocks"] // already stale before the purge
	if got := p.Judge(stale); got == nil || got.Fresh != stale.Fresh {
		t.Errorf("a soft purge made an entry fresher or dropped it")
	}
}

// TestAdmitJudgesAnAnswerOnItsWay: an answer fetched before a purge and
// stored after it is not stored (hard), is stored stale from the purge's
// time (soft), or is stored as it is; a final one admitted whole goes to
// the disk tier too, where a later purge finds it.
func TestAdmitJudgesAnAnswerOnItsWay(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	d, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 16 << 20, MaxBody: 1 << 20, Logger: slog.New(slog.DiscardHandler),
		TagSpace: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p, _, _ := purgerAt(t, now, d)
	since := now.Add(-time.Minute).UnixNano()
	fetched := now.Add(-time.Second)
	admit := func(e *cache.Entry, toDisk bool) *cache.Entry {
		var stored *cache.Entry
		n := 0
		p.Admit(e, since, toDisk, func(e *cache.Entry) { stored = e; n++ })
		if n > 1 {
			t.Errorf("Admit stored %s %d times", e.Key, n)
		}
		return stored
	}
	es := testEntries(t, fetched)
	if got := admit(es["txlist"], true); got != es["txlist"] {
		t.Fatalf("no purge: Admit stored %v, want the entry itself", got)
	}
	p.Purge(mustParse(t, `{"hash":"`+hashA+`","chain":"TRADE_ZONE"}`))
	p.Purge(mustParse(t, `{"route":"block-list","soft":true}`))
	if got := admit(es["itemA"], true); got != nil {
		t.Errorf("an answer a hard purge selected on its way was stored")
	}
	got := admit(es["blocks"], true)
	if got == nil || got == es["blocks"] || got.Fresh != now.UnixNano() || got.Key != es["blocks"].Key {
		t.Errorf("an answer a soft purge selected on its way: %v, want a copy stale from the purge", got)
	}
	if got := admit(es["itemB"], true); got != es["itemB"] {
		t.Errorf("an answer no purge selected was not stored as it is")
	}
	// Before the purge: judged by nothing since the answer is newer.
	later := testEntries(t, now.Add(time.Second))
	if got := admit(later["itemA"], false); got != later["itemA"] {
		t.Errorf("an answer fetched after the hard purge was judged by it")
	}
	// The final answers admitted whole went to the disk (txlist, itemB);
	// the dropped one and the head page did not. A purge of all finds
	// those two there, queued or written.
	res, err := p.Purge(mustParse(t, `{"all":true}`))
	if err != nil || res.Disk != 2 || res.DiskError != "" {
		t.Errorf("purge all: %+v %v, want the 2 final answers admitted to the disk tier removed", res, err)
	}
	if d.Get(es["txlist"].Key, now) != nil {
		t.Errorf("the disk tier still holds a purged answer")
	}
}

// fakeFleet is a shared tier that carries purges, in memory.
type fakeFleet struct {
	published []string
	keys      [][]string
	soft      []bool
	watch     func(apply func(int64, int64, []byte, bool), lost func(), floor func(int64), refused func(string, string))
}

func (f *fakeFleet) PublishPurge(at int64, request []byte, keys []string, soft bool, retain time.Duration) (int64, int, error) {
	f.published = append(f.published, string(request))
	f.keys = append(f.keys, keys)
	f.soft = append(f.soft, soft)
	return int64(len(f.published)), len(keys), nil
}

func (f *fakeFleet) WatchPurges(apply func(int64, int64, []byte, bool), lost func(), floor func(int64), refused func(string, string)) {
	if f.watch != nil {
		f.watch(apply, lost, floor, refused)
	}
}

// TestPurgeInAFleet: a purge is published as its normalized request with
// the Redis keys it names, and answered with the record's number; the
// other nodes' purges are applied to what is older than they are, kept
// to judge what is read later, and refused when from the future or
// unreadable; a node knows every purge once the log was read to its end.
func TestPurgeInAFleet(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, c, m := purgerAt(t, now, nil)
	var apply func(int64, int64, []byte, bool)
	var floor func(int64)
	var lost func()
	f := &fakeFleet{watch: func(a func(int64, int64, []byte, bool), l func(), fl func(int64), _ func(string, string)) {
		apply, floor, lost = a, fl, l
		// The first read: a record from before this node started, no
		// floor read yet (a read that failed before its floor).
		apply(1, now.Add(-time.Minute).UnixNano(), []byte(`{"route":"position-list"}`), false)
	}}
	p.Join(f)
	if p.Known() {
		t.Errorf("a node that has not read the fleet's log to its end claims to know every purge")
	}
	floor(0)
	if p.Known() {
		t.Errorf("known after the first floor: the read it begins is not over")
	}
	floor(0)
	if !p.Known() {
		t.Errorf("not known after a second read began")
	}
	es := testEntries(t, now.Add(-2*time.Minute))
	if p.Judge(es["position"]) != nil {
		t.Errorf("a record read at start does not judge an older answer read later")
	}
	if c.Entries() != 0 {
		t.Fatalf("cache not empty")
	}

	res, err := p.Purge(mustParse(t, `{"hash":"0x`+strings.ToUpper(hashA[2:])+`","chain":"trade_zone","soft":true}`))
	if err != nil || !res.Fleet || res.Seq != 1 || res.Redis != 1 {
		t.Fatalf("Purge in a fleet: %+v %v", res, err)
	}
	if f.published[0] != `{"hash":"`+hashA+`","chain":"TRADE_ZONE","soft":true}` || len(f.keys[0]) != 1 || f.keys[0][0] != route.HashKey("TRADE_ZONE", hashA) || !f.soft[0] {
		t.Errorf("published %s keys %q soft %v, want the normalized request and the hash's own entry", f.published[0], f.keys[0], f.soft[0])
	}

	// Another node's live purge: what this node fetched after it stays.
	old, fresh := testEntries(t, now.Add(-time.Second)), testEntries(t, now.Add(time.Second))
	c.Set(old["blocks"], now)
	c.Set(fresh["txlist"], now)
	apply(2, now.UnixNano(), []byte(`{"heights":{"chain":"CHAINX","from":0,"to":200}}`), true)
	if c.GetString(old["blocks"].Key) != nil || c.GetString(fresh["txlist"].Key) == nil {
		t.Errorf("another node's purge: removed %v, kept %v; want the older answer removed, the newer kept",
			c.GetString(old["blocks"].Key) == nil, c.GetString(fresh["txlist"].Key) != nil)
	}
	if n := testutil.ToFloat64(m.Purges.WithLabelValues("heights", "hard")); n != 1 {
		t.Errorf("the fleet's purge counted %v times", n)
	}

	// From the future, or unreadable: refused and counted, never applied.
	c.Set(old["internal"], now)
	apply(3, now.Add(Skew+time.Minute).UnixNano(), []byte(`{"all":true}`), true)
	apply(4, now.UnixNano(), []byte(`{"all":"yes"}`), true)
	if c.GetString(old["internal"].Key) == nil {
		t.Errorf("a refused record was applied")
	}
	if n := testutil.ToFloat64(m.SharedRejected.WithLabelValues("purge_record")); n != 2 {
		t.Errorf("shared_rejected_total{purge_record} = %v, want 2", n)
	}
	floor(now.Add(Skew + time.Hour).UnixNano())
	floor(now.Add(Skew + time.Hour).UnixNano()) // the same floor at every poll: said once
	if p.log.floor.Load() != 0 || testutil.ToFloat64(m.SharedRejected.WithLabelValues("purge_floor")) != 1 {
		t.Errorf("a floor from the future was taken (%d) or not counted once (%v)", p.log.floor.Load(),
			testutil.ToFloat64(m.SharedRejected.WithLabelValues("purge_floor")))
	}
	floor(now.Add(-time.Second).UnixNano())
	if p.Judge(old["internal"]) != nil {
		t.Errorf("an answer older than the fleet's floor is read back")
	}

	// Records missed: the memory cache goes whole.
	lost()
	if c.GetString(old["internal"].Key) != nil || c.GetString(fresh["txlist"].Key) != nil {
		t.Errorf("purges lost, and the memory cache kept entries")
	}
}
