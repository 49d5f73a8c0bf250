package disk

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"explorer-edge/cache"
)

// clock is a writer's clock the test moves.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration)          { c.ns.Add(int64(d)) }
func (c *clock) at(d time.Duration) time.Time { return c.now().Add(d) }

var t0 = time.Unix(1_800_000_000, 0)

func open(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 64 << 20
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// body is n bytes of an answer: random (incompressible, held as Body) or
// repetitive JSON (held as Gzip).
func body(r *rand.Rand, n int, compressible bool) []byte {
	b := make([]byte, n)
	if compressible {
		row := `{"hash":"0xabc","height":12,"state":"done"},`
		for i := range b {
			b[i] = row[i%len(row)]
		}
		return b
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// final is a final entry under key, stored at stored, with tags.
func final(key string, b []byte, stored time.Time, chain uint8, height int64) *cache.Entry {
	e := cache.NewEntry(key, b, cache.Final, stored, 24*time.Hour, 30*time.Second, 10*time.Minute)
	e.Source = cache.SourceUpstream
	e.Tags = cache.Tags{Route: 2, Chain: chain, Lo: height, Hi: height + 1, Hashes: []uint64{uint64(height) * 7, 99}}
	return e
}

func same(t *testing.T, got, want *cache.Entry) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: miss", want.Key)
	}
	switch {
	case got.Key != want.Key, !bytes.Equal(got.Body, want.Body), !bytes.Equal(got.Gzip, want.Gzip),
		got.Size != want.Size, !bytes.Equal(got.ETag, want.ETag), got.Class != want.Class,
		got.Stored != want.Stored, got.Fresh != want.Fresh,
		got.StaleWhileRevalidate != want.StaleWhileRevalidate, got.StaleIfError != want.StaleIfError,
		got.Status != want.Status, got.Source != want.Source,
		got.Tags.Route != want.Tags.Route, got.Tags.Chain != want.Tags.Chain,
		got.Tags.Lo != want.Tags.Lo, got.Tags.Hi != want.Tags.Hi,
		fmt.Sprint(got.Tags.Hashes) != fmt.Sprint(want.Tags.Hashes):
		t.Fatalf("%s read back differs:\n got %+v\nwant %+v", want.Key, got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	c := newClock(t0)
	s := open(t, Options{Now: c.now})
	r := rand.New(rand.NewPCG(1, 1))
	zipped := final("/api/v2/block/transactions?chain=ETH&height=12", body(r, 8000, true), t0, 1, 12)
	plain := final("/api/v2/cross/record?hash=0x1", body(r, 3000, false), t0, 0, 0)
	small := final("/small", []byte(`{"code":"0","data":[]}`), t0, 1, 3)
	small.Status = 404
	small.Tags.Hashes = nil
	if zipped.Gzip == nil || plain.Body == nil || small.Body == nil {
		t.Fatal("want one gzip entry and two held as is")
	}
	for _, e := range []*cache.Entry{zipped, plain, small} {
		s.Put(e)
	}
	s.Flush()
	for _, e := range []*cache.Entry{zipped, plain, small} {
		same(t, s.Get(e.Key, t0), e)
	}
	if e := s.Get("/absent", t0); e != nil {
		t.Fatalf("absent key: %+v", e)
	}
	st := s.Stats()
	if st.Hits != 3 || st.Misses != 1 || st.Writes != 3 || st.Entries != 3 || st.Bytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	// A newer answer under a key replaces the older one and its count.
	again := final(plain.Key, body(r, 2000, false), t0.Add(time.Second), 0, 0)
	s.Put(again)
	s.Flush()
	same(t, s.Get(plain.Key, t0.Add(time.Second)), again)
	if st := s.Stats(); st.Entries != 3 {
		t.Fatalf("after a replacement: %+v", st)
	}
	assertTotals(t, s)
}

// assertTotals checks the store's totals against its index records.
func assertTotals(t *testing.T, s *Store) {
	t.Helper()
	var bytes, n int64
	s.db.View(func(tx *bbolt.Tx) error {
		var e cache.Entry
		return tx.Bucket(bucketIndex).ForEach(func(k, v []byte) error {
			cost, err := decodeIndex(v, &e)
			if err != nil {
				t.Errorf("index record %q: %v", k, err)
			}
			if tx.Bucket(bucketEntries).Get(k[8:]) == nil {
				t.Errorf("index record %q has no entry", k)
			}
			bytes += cost
			n++
			return nil
		})
	})
	if st := s.Stats(); st.Bytes != bytes || st.Entries != n {
		t.Fatalf("totals: %d bytes, %d entries; the index holds %d, %d", st.Bytes, st.Entries, bytes, n)
	}
}

func TestLifetime(t *testing.T) {
	c := newClock(t0)
	s := open(t, Options{Now: c.now})
	e := final("/k", []byte(`{"code":"0"}`), t0, 1, 1)
	s.Put(e)
	// Past its lifetime when it reaches the writer: never written.
	s.Put(final("/old", []byte(`{"code":"0"}`), t0.Add(-25*time.Hour), 1, 1))
	s.Flush()
	if st := s.Stats(); st.Writes != 1 {
		t.Fatalf("writes %d, want 1 (the old entry is past its lifetime)", st.Writes)
	}
	if got := s.Get("/k", c.at(23*time.Hour)); got.StateAt(c.at(23*time.Hour).UnixNano()) != cache.Fresh {
		t.Fatal("fresh entry not served fresh")
	}
	// Within stale-if-error: returned, and the caller sees it expired.
	late := c.at(24*time.Hour + 5*time.Minute)
	if got := s.Get("/k", late); got.StateAt(late.UnixNano()) != cache.Expired {
		t.Fatalf("entry 5m past fresh: %v", got.StateAt(late.UnixNano()))
	}
	// Past fresh + stale-if-error: never served, and removed once the
	// writer's clock agrees.
	gone := c.at(24*time.Hour + 11*time.Minute)
	if got := s.Get("/k", gone); got != nil {
		t.Fatal("entry served past its lifetime")
	}
	s.Flush()
	if st := s.Stats(); st.Entries != 1 || st.Expired != 0 {
		t.Fatalf("removed while the writer's clock says usable: %+v", st)
	}
	c.add(24*time.Hour + 11*time.Minute)
	if s.Get("/k", gone) != nil {
		t.Fatal("served past its lifetime")
	}
	s.Flush()
	if st := s.Stats(); st.Entries != 0 || st.Expired != 1 {
		t.Fatalf("after the lifetime: %+v", st)
	}
	assertTotals(t, s)
}

func TestSweep(t *testing.T) {
	c := newClock(t0)
	s := open(t, Options{Now: c.now})
	for i := range 10 {
		s.Put(final(fmt.Sprint("/old", i), []byte(`{}`), t0, 1, 1))
	}
	s.Flush()
	c.add(25 * time.Hour)
	s.Put(final("/new", []byte(`{}`), c.now(), 1, 1))
	s.Flush()
	if st := s.Stats(); st.Entries != 1 || st.Expired != 10 {
		t.Fatalf("a commit after the old entries' lifetime: %+v", st)
	}
	assertTotals(t, s)
}

func TestOnlyFinal(t *testing.T) {
	s := open(t, Options{})
	for _, class := range []cache.Class{cache.Head, cache.Negative, cache.Volatile} {
		s.Put(cache.NewEntry(class.String(), []byte(`{}`), class, time.Now(), time.Hour, 0, 0))
	}
	s.Put(nil)
	s.Flush()
	for _, class := range []cache.Class{cache.Head, cache.Negative, cache.Volatile} {
		if s.Get(class.String(), time.Now()) != nil {
			t.Fatalf("%s entry stored", class)
		}
	}
	if st := s.Stats(); st.Writes != 0 || st.Drops != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCorruptRecord spoils the records in the file through bbolt: each is
// a miss, counted, removed, never served.
func TestCorruptRecord(t *testing.T) {
	spoil := map[string]func([]byte) []byte{
		"payload byte":     func(v []byte) []byte { v[len(v)-20] ^= 1; return v },
		"header byte":      func(v []byte) []byte { v[1] ^= 0x40; return v },
		"checksum":         func(v []byte) []byte { v[len(v)-1] ^= 0xff; return v },
		"truncated":        func(v []byte) []byte { return v[:len(v)/2] },
		"cut to 3 bytes":   func(v []byte) []byte { return v[:3] },
		"empty":            func(v []byte) []byte { return nil },
		"other version":    func(v []byte) []byte { v[0] = 9; return v },
		"checksummed junk": func(v []byte) []byte { return append([]byte{1, 1, 0}, v[len(v)-8:]...) },
	}
	for name, f := range spoil {
		t.Run(name, func(t *testing.T) {
			s := open(t, Options{})
			r := rand.New(rand.NewPCG(2, 2))
			e := final("/k", body(r, 6000, true), time.Now(), 1, 1)
			other := final("/other", body(r, 6000, true), time.Now(), 1, 1)
			s.Put(e)
			s.Put(other)
			s.Flush()
			err := s.db.Update(func(tx *bbolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				v := append([]byte(nil), b.Get([]byte("/k"))...)
				return b.Put([]byte("/k"), f(v))
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Get("/k", time.Now()); got != nil {
				t.Fatalf("corrupt record served: %+v", got)
			}
			s.Flush()
			st := s.Stats()
			if st.Corrupt != 1 || st.Entries != 1 {
				t.Fatalf("stats %+v: want 1 corrupt, 1 entry left", st)
			}
			if s.db.View(func(tx *bbolt.Tx) error {
				if tx.Bucket(bucketEntries).Get([]byte("/k")) != nil {
					t.Error("corrupt record still in the file")
				}
				return nil
			}) != nil {
				t.Fatal("view")
			}
			same(t, s.Get("/other", time.Now()), other)
			assertTotals(t, s)
		})
	}
}

// TestCorruptIndex spoils an index record: Delete and the count remove it
// and its entry rather than keep what they cannot judge.
func TestCorruptIndex(t *testing.T) {
	s := open(t, Options{})
	now := time.Now()
	for i := range 3 {
		s.Put(final(fmt.Sprint("/k", i), []byte(`{}`), now.Add(time.Duration(i)), 1, int64(i)))
	}
	s.Flush()
	s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		k, v := b.Cursor().First()
		v = append([]byte(nil), v...)
		v[5] ^= 1
		return b.Put(append([]byte(nil), k...), v)
	})
	if n, _ := s.Delete(func(e *cache.Entry) bool { return e.Key == "/k2" }); n != 1 {
		t.Fatalf("Delete matched %d", n)
	}
	if s.Get("/k0", now) != nil || s.Get("/k2", now) != nil || s.Get("/k1", now) == nil {
		t.Fatal("want /k1 alone left")
	}
	if st := s.Stats(); st.Entries != 1 || st.Corrupt != 1 {
		t.Fatalf("stats %+v", st)
	}
	assertTotals(t, s)
}

// TestCorruptFile spoils the file itself, the store closed: bytes of one
// record's payload, found in the file; then garbage over every page.
func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 3))
	var want []*cache.Entry
	// One commit, at Close: the same file at every run, so the same pages
	// spoiled below.
	s := open(t, Options{Dir: dir, BatchLen: 1000, BatchDelay: time.Hour})
	now := time.Now()
	for i := range 200 {
		e := final(fmt.Sprintf("/tx/%d", i), body(r, 1000+r.IntN(9000), false), now, 1, int64(i))
		want = append(want, e)
		s.Put(e)
	}
	s.Close()
	path := filepath.Join(dir, fileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	victim := want[77]
	at := bytes.Index(raw, victim.Body[100:164])
	if at < 0 {
		t.Fatal("payload not found in the file")
	}
	raw[at+10] ^= 0x55
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, Options{Dir: dir})
	if got := s.Get(victim.Key, now); got != nil {
		t.Fatal("record spoiled in the file served")
	}
	for i, e := range want {
		if i != 77 {
			same(t, s.Get(e.Key, now), e)
		}
	}
	s.Flush()
	if st := s.Stats(); st.Corrupt != 1 || st.Entries != 199 {
		t.Fatalf("stats %+v", st)
	}
	s.Close()

	// Garbage over every page but the two meta pages: bbolt's structure
	// is gone. Whatever happens, nothing panics and nothing wrong is served.
	raw, _ = os.ReadFile(path)
	for p := 2 * 4096; p+64 < len(raw); p += 4096 {
		for i := range 64 {
			raw[p+r.IntN(4096-64)+i%8] = byte(r.Uint32())
		}
	}
	os.WriteFile(path, raw, 0o600)
	var logs syncBuffer
	s2, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("open of a spoiled file: %v", err)
	}
	defer s2.Close()
	served := 0
	for _, e := range want {
		if got := s2.Get(e.Key, now); got != nil {
			same(t, got, e)
			served++
		}
	}
	s2.Put(final("/after", []byte(`{}`), now, 1, 1))
	s2.Flush()
	s2.Delete(func(*cache.Entry) bool { return false })
	t.Logf("after garbage over every page: %d of %d served (all intact), broken=%v, %+v\n%s",
		served, len(want), s2.broken.Load(), s2.Stats(), logs.String())
}

// TestBrokenStartsEmpty: a panic reading the file stops the store, and
// the next Open starts an empty file.
func TestBrokenStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	s := open(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.Put(final("/k", []byte(`{}`), time.Now(), 1, 1))
	s.Flush()
	s.guard(func() error { panic("as bbolt does on a spoiled page") })
	if s.Get("/k", time.Now()) != nil {
		t.Fatal("a stopped store served")
	}
	s.Put(final("/k2", []byte(`{}`), time.Now(), 1, 1))
	s.Flush()
	s.Close()
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d errors logged, want 1:\n%s", n, logs.String())
	}
	s = open(t, Options{Dir: dir})
	if s.Get("/k", time.Now()) != nil || s.Stats().Entries != 0 {
		t.Fatal("the file of a stopped store was kept")
	}
	s.Put(final("/k3", []byte(`{}`), time.Now(), 1, 1))
	s.Flush()
	if s.Get("/k3", time.Now()) == nil {
		t.Fatal("the new file does not work")
	}
}

func TestEviction(t *testing.T) {
	const maxBytes = 1 << 20
	dir := t.TempDir()
	c := newClock(t0)
	s := open(t, Options{Dir: dir, MaxBytes: maxBytes, BatchLen: 16, Now: c.now})
	r := rand.New(rand.NewPCG(4, 4))
	var keys []string
	written := 0
	for i := range 1000 { // about 5.5 MB
		k := fmt.Sprint("/e/", i)
		keys = append(keys, k)
		b := body(r, 1024+r.IntN(9*1024), false)
		written += len(b)
		s.Put(final(k, b, t0.Add(time.Duration(i)*time.Millisecond), 1, int64(i)))
		if i%100 == 99 {
			s.Flush()
			if b := s.Stats().Bytes; b > maxBytes {
				t.Fatalf("%d bytes held, more than %d", b, maxBytes)
			}
		}
	}
	s.Flush()
	st := s.Stats()
	if st.Bytes > maxBytes || st.Evictions == 0 || st.Writes != 1000 || st.Drops != 0 {
		t.Fatalf("stats %+v", st)
	}
	if s.Get(keys[0], t0) != nil || s.Get(keys[len(keys)-1], t0) == nil {
		t.Fatal("want the oldest evicted and the newest kept")
	}
	// The entries kept are the newest ones, without a gap.
	kept := 0
	for i := len(keys) - 1; i >= 0 && s.Get(keys[i], t0) != nil; i-- {
		kept++
	}
	if int64(kept) != st.Entries {
		t.Fatalf("%d newest entries in a row, %d held", kept, st.Entries)
	}
	assertTotals(t, s)
	var fs syscall.Stat_t
	syscall.Stat(filepath.Join(dir, fileName), &fs)
	t.Logf("wrote %d bytes of bodies; hold %d entries, %d bytes (MaxBytes %d); file %d bytes long, %d on disk (%.2fx MaxBytes)",
		written, st.Entries, st.Bytes, maxBytes, fs.Size, fs.Blocks*512, float64(fs.Blocks*512)/maxBytes)
	// An entry larger than MaxBytes is dropped, not written.
	s.Put(final("/huge", body(r, 2*maxBytes, false), t0, 1, 1))
	s.Flush()
	if s.Stats().Drops != 1 || s.Get("/huge", t0) != nil {
		t.Fatal("an entry larger than MaxBytes was not dropped")
	}
}

func TestDelete(t *testing.T) {
	s := open(t, Options{})
	now := time.Now()
	for i := range 100 {
		s.Put(final(fmt.Sprint("/d/", i), []byte(`{"code":"0"}`), now, uint8(1+i%2), int64(i)))
	}
	s.Flush()
	// Queued, not yet written when Delete is called: judged too.
	s.Put(final("/queued", []byte(`{}`), now, 1, 1000))
	chain1 := func(e *cache.Entry) bool { return e.Tags.Chain == 1 }
	if n, err := s.Delete(chain1); err != nil || n != 51 {
		t.Fatalf("Delete matched %d, want 51", n)
	}
	for i := range 100 {
		if got := s.Get(fmt.Sprint("/d/", i), now); (got == nil) != (i%2 == 0) {
			t.Fatalf("entry %d after the delete: %v", i, got)
		}
	}
	if s.Get("/queued", now) != nil {
		t.Fatal("the queued entry escaped Delete")
	}
	heights := func(e *cache.Entry) bool { return e.Tags.HasHeights(10, 19) && e.Tags.HasHash(13*7) }
	if n, err := s.Delete(heights); err != nil || n != 1 {
		t.Fatalf("Delete by height and hash matched %d, want 1", n)
	}
	if st := s.Stats(); st.Deleted != 52 || st.Entries != 49 {
		t.Fatalf("stats %+v", st)
	}
	assertTotals(t, s)
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 5))
	s := open(t, Options{Dir: dir})
	now := time.Now()
	var want []*cache.Entry
	for i := range 50 {
		e := final(fmt.Sprint("/r/", i), body(r, 2000, i%2 == 0), now, 1, int64(i))
		want = append(want, e)
		s.Put(e)
	}
	if err := s.Close(); err != nil { // Close writes what is queued
		t.Fatal(err)
	}
	before := s.Stats()
	s.Put(want[0]) // after Close: nothing, no panic
	if s.Get(want[0].Key, now) != nil {
		t.Fatal("Get after Close")
	}
	s = open(t, Options{Dir: dir})
	for _, e := range want {
		same(t, s.Get(e.Key, now), e)
	}
	if st := s.Stats(); st.Entries != 50 || st.Bytes != before.Bytes {
		t.Fatalf("reopened: %+v, closed with %+v", st, before)
	}
	assertTotals(t, s)
}

// TestTagSpace: entries tagged under another route table or chain list
// are not kept.
func TestTagSpace(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	s := open(t, Options{Dir: dir, TagSpace: "routes:a,b chains:ETH,BSC"})
	s.Put(final("/k", []byte(`{}`), now, 1, 1))
	s.Close()
	s = open(t, Options{Dir: dir, TagSpace: "routes:a,b chains:ETH,BSC"})
	if s.Get("/k", now) == nil {
		t.Fatal("same tag space: entry lost")
	}
	s.Close()
	s = open(t, Options{Dir: dir, TagSpace: "routes:a,b chains:BSC,ETH"})
	if s.Get("/k", now) != nil || s.Stats().Entries != 0 {
		t.Fatalf("entry of another tag space kept: %+v", s.Stats())
	}
	s.Put(final("/k2", []byte(`{}`), now, 1, 1))
	s.Flush()
	assertTotals(t, s)
}

// TestKill writes from a child process that is killed (SIGKILL) after its
// first batches were committed and while more were queued: what was
// committed is there after a reopen.
func TestKill(t *testing.T) {
	if dir := os.Getenv("DISK_TEST_CHILD"); dir != "" {
		child(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill$")
	cmd.Env = append(os.Environ(), "DISK_TEST_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "committed\n" {
		cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s := open(t, Options{Dir: dir})
	for i := range 500 {
		if s.Get(fmt.Sprint("/kill/", i), time.Now()) == nil {
			t.Fatalf("committed entry %d lost", i)
		}
	}
	st := s.Stats()
	if st.Entries < 500 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("after kill -9: %d entries (500 committed, up to 500 more queued)", st.Entries)
	assertTotals(t, s)
}

func child(dir string) {
	s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	r := rand.New(rand.NewPCG(6, 6))
	for i := range 500 {
		s.Put(final(fmt.Sprint("/kill/", i), body(r, 4000, false), time.Now(), 1, int64(i)))
	}
	s.Flush()
	for i := 500; i < 1000; i++ {
		s.Put(final(fmt.Sprint("/kill/", i), body(r, 4000, false), time.Now(), 1, int64(i)))
	}
	fmt.Println("committed")
	select {}
}

func TestQueueFull(t *testing.T) {
	s := open(t, Options{QueueLen: 4, BatchLen: 1})
	now := time.Now()
	// Hold the writer at its first commit, so that the queue fills.
	s.wmu.Lock()
	s.Put(final("/q/0", []byte(`{}`), now, 1, 1))
	waitFor(t, func() bool { return len(s.queue) == 0 })
	for i := 1; i <= 7; i++ {
		s.Put(final(fmt.Sprint("/q/", i), []byte(`{}`), now, 1, 1))
	}
	if d := s.Stats().Drops; d != 3 {
		t.Fatalf("%d dropped, want 3", d)
	}
	s.wmu.Unlock()
	s.Flush()
	if st := s.Stats(); st.Writes != 5 || st.Drops != 3 {
		t.Fatalf("stats %+v", st)
	}
	for i := range 8 {
		if (s.Get(fmt.Sprint("/q/", i), now) != nil) != (i < 5) {
			t.Fatalf("entry %d", i)
		}
	}
}

// waitFor waits for cond, up to a deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond) // polling the condition, not a synchronization
	}
}

// mountTmpfs mounts a tmpfs of size on a new directory, or skips.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	// mode=0700: a tmpfs is 1777 by default, which Open refuses (CheckDir).
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0700,"+opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs not permitted: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// TestDiskFull fills a 1 MiB tmpfs: writes stop with one logged error and
// a counter, reads go on, and a Delete that cannot commit still hides what
// it selects.
func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=1m")
	var logs syncBuffer
	c := newClock(t0)
	s := open(t, Options{Dir: dir, MaxBytes: 64 << 20, BatchLen: 8, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: c.now})
	r := rand.New(rand.NewPCG(7, 7))
	var first []*cache.Entry
	for i := 0; s.Stats().WriteErrors == 0; i++ {
		if i > 1000 {
			t.Fatal("no write error after 8 MB into 1 MiB")
		}
		e := final(fmt.Sprint("/full/", i), body(r, 8000, false), t0, 1, int64(i))
		if i < 10 {
			first = append(first, e)
		}
		s.Put(e)
		s.Flush()
	}
	full := s.Stats()
	for i := range 50 {
		s.Put(final(fmt.Sprint("/more/", i), body(r, 8000, false), t0, 1, 1))
	}
	s.Flush()
	st := s.Stats()
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d errors logged, want 1:\n%s", n, logs.String())
	}
	if st.Drops < 50 {
		t.Fatalf("stats %+v: the entries after the failure not dropped", st)
	}
	for _, e := range first {
		same(t, s.Get(e.Key, t0), e)
	}
	// Before RetryAfter nothing is tried; past it, the store evicts below
	// what it held when the disk filled, and writes resume.
	s.Put(final("/early", []byte(`{}`), t0, 1, 1))
	s.Flush()
	if st := s.Stats(); st.WriteErrors != 1 || s.Get("/early", t0) != nil {
		t.Fatalf("a write was tried before RetryAfter: %+v", st)
	}
	// bbolt needs pages in a row for a value: a tenth freed may not give
	// them, and then the limit is lowered again at the next retry.
	for round := 0; s.Get("/resumed/2", t0) == nil; round++ {
		if round == 10 {
			t.Fatalf("writes did not resume: %+v\n%s", s.Stats(), logs.String())
		}
		c.add(2 * time.Minute)
		for i := range 3 {
			s.Put(final(fmt.Sprint("/resumed/", i), body(r, 8000, false), t0, 1, 1))
		}
		s.Flush()
	}
	if strings.Count(logs.String(), "writes resumed") != 1 || strings.Count(logs.String(), "level=ERROR") != 1 {
		t.Fatalf("want one error and one resume logged:\n%s", logs.String())
	}
	if st := s.Stats(); st.Bytes > full.Bytes {
		t.Fatalf("holds %d bytes, more than the %d the disk filled at", st.Bytes, full.Bytes)
	}
	t.Logf("resumed: %+v\n%s", s.Stats(), logs.String())
	assertTotals(t, s)
}

// TestWriteError fails every commit (as a read-only or failing disk
// does): one error logged, a counter, reads go on, and a Delete that
// cannot commit hides what it selects until a commit removes it.
func TestWriteError(t *testing.T) {
	var logs syncBuffer
	var failing atomic.Bool
	c := newClock(t0)
	s := open(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: c.now,
		fail: func() error {
			if failing.Load() {
				return syscall.EROFS
			}
			return nil
		}})
	for i := range 10 {
		s.Put(final(fmt.Sprint("/w/", i), []byte(`{}`), t0, 1, int64(i)))
	}
	s.Flush()
	failing.Store(true)
	for round := range 3 {
		s.Put(final(fmt.Sprint("/lost/", round), []byte(`{}`), t0, 1, 1))
		s.Flush()
		c.add(2 * time.Minute) // each round retries, and fails
	}
	if n, _ := s.Delete(func(e *cache.Entry) bool { return e.Tags.Lo < 5 }); n != 5 {
		t.Fatalf("Delete matched %d", n)
	}
	st := s.Stats()
	if st.WriteErrors != 4 || st.Drops != 3 || st.Deleted != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d errors logged, want 1:\n%s", n, logs.String())
	}
	for i := range 10 {
		if got := s.Get(fmt.Sprint("/w/", i), t0); (got == nil) != (i < 5) {
			t.Fatalf("entry %d while the Delete is pending: %v", i, got)
		}
	}
	failing.Store(false)
	c.add(2 * time.Minute)
	s.Put(final("/after", []byte(`{}`), t0, 1, 100))
	s.Flush()
	if s.pending.Load() != nil || s.Stats().Deleted != 5 || s.Get("/after", t0) == nil {
		t.Fatalf("after the disk recovered: %+v", s.Stats())
	}
	s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketEntries).Get([]byte("/w/0")) != nil {
			t.Error("the pending Delete left its entry in the file")
		}
		return nil
	})
	t.Logf("%+v\n%s", s.Stats(), logs.String())
	assertTotals(t, s)
}

// TestUnpurgedStartsEmpty: a Delete that could not commit (disk full)
// hides its entries from this process only; until a commit removes them,
// a restart starts an empty file rather than serve what a purge selected.
// Once a commit removed them, a restart keeps the rest.
func TestUnpurgedStartsEmpty(t *testing.T) {
	for _, recovered := range []bool{false, true} {
		t.Run(fmt.Sprint("recovered=", recovered), func(t *testing.T) {
			dir := t.TempDir()
			var failing atomic.Bool
			c := newClock(t0)
			s := open(t, Options{Dir: dir, Now: c.now, fail: func() error {
				if failing.Load() {
					return syscall.ENOSPC
				}
				return nil
			}})
			for i := range 10 {
				s.Put(final(fmt.Sprint("/u/", i), []byte(`{}`), t0, 1, int64(i)))
			}
			s.Flush()
			failing.Store(true)
			if n, err := s.Delete(func(e *cache.Entry) bool { return e.Tags.Lo < 5 }); err == nil || n != 5 {
				t.Fatalf("Delete matched %d", n)
			}
			if recovered {
				failing.Store(false)
				c.add(2 * time.Minute)
				s.Put(final("/after", []byte(`{}`), t0, 1, 100))
				s.Flush()
			}
			s.Close()
			s = open(t, Options{Dir: dir})
			for i := range 10 {
				got := s.Get(fmt.Sprint("/u/", i), t0)
				if got != nil && (i < 5 || !recovered) {
					t.Fatalf("entry %d after the restart: served", i)
				}
				if got == nil && i >= 5 && recovered {
					t.Fatalf("entry %d after the restart: lost", i)
				}
			}
			if fi, err := os.Stat(filepath.Join(dir, purgesMark)); err != nil || fi.Size() != 0 {
				t.Fatalf("the mark outlived the Open that read it: %v, %v", fi, err)
			}
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for name, o := range map[string]Options{
		"missing":      {Dir: filepath.Join(t.TempDir(), "nope"), MaxBytes: 1 << 20},
		"file":         {Dir: file, MaxBytes: 1 << 20},
		"no dir":       {MaxBytes: 1 << 20},
		"no max bytes": {Dir: t.TempDir()},
	} {
		if s, err := Open(o); err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	t.Run("read-only", func(t *testing.T) {
		dir := t.TempDir()
		if os.Geteuid() == 0 { // root writes through permissions: a read-only mount
			dir = mountTmpfs(t, "size=1m,ro")
		} else {
			os.Chmod(dir, 0o500)
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
		}
		s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
		if err == nil {
			s.Close()
			t.Fatal("opened in a read-only directory")
		}
		if !strings.Contains(err.Error(), "not a writable directory") {
			t.Fatalf("unclear error: %v", err)
		}
		t.Log(err)
	})
	t.Run("held by another store", func(t *testing.T) {
		dir := t.TempDir()
		open(t, Options{Dir: dir})
		s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
		if err == nil {
			s.Close()
			t.Fatal("opened twice")
		}
		t.Log(err)
	})
}

func TestConcurrent(t *testing.T) {
	s := open(t, Options{MaxBytes: 2 << 20, QueueLen: 64, BatchLen: 8})
	now := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 8))
			for i := range 300 {
				k := fmt.Sprint("/c/", r.IntN(200))
				switch i % 10 {
				case 0:
					s.Delete(func(e *cache.Entry) bool { return e.Tags.Lo == int64(g) })
				case 1, 2, 3:
					s.Put(final(k, body(r, 1000+r.IntN(8000), false), now, 1, int64(r.IntN(4))))
				default:
					if e := s.Get(k, now); e != nil && e.Key != k {
						panic("wrong key")
					}
				}
			}
		})
	}
	wg.Wait()
	s.Flush()
	if st := s.Stats(); st.Bytes > 2<<20 {
		t.Fatalf("stats %+v", st)
	}
	assertTotals(t, s)
}

// BenchmarkGet is a disk hit: 20,000 entries of 1-10 KiB, files in the
// page cache, read at random.
func BenchmarkGet(b *testing.B) {
	s := open(b, Options{MaxBytes: 1 << 30})
	r := rand.New(rand.NewPCG(9, 9))
	now := time.Now()
	keys := make([]string, 20_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("/api/v2/transaction/transactions?chain=ETH&hash=0x%064x", r.Uint64())
		s.Put(final(keys[i], body(r, 1024+r.IntN(9*1024), false), now, 1, int64(i)))
		if i%512 == 0 {
			s.Flush()
		}
	}
	s.Flush()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s.Get(keys[r.IntN(len(keys))], now) == nil {
				b.Fatal("miss")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(rand.Uint64(), 9))
			for pb.Next() {
				if s.Get(keys[r.IntN(len(keys))], now) == nil {
					panic("miss")
				}
			}
		})
	})
	// Each read timed: the 50th and 99th percentiles of a disk hit, the
	// file in the page cache (p50-ns and p99-ns).
	b.Run("latency", func(b *testing.B) {
		b.ReportAllocs()
		took := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if s.Get(keys[r.IntN(len(keys))], now) == nil {
				b.Fatal("miss")
			}
			took = append(took, time.Since(t0))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	})
}

// BenchmarkDelete scans the index of 20,000 entries, selecting none.
func BenchmarkDelete(b *testing.B) {
	s := open(b, Options{MaxBytes: 1 << 30})
	now := time.Now()
	for i := range 20_000 {
		s.Put(final(fmt.Sprintf("/api/v2/transaction/transactions?chain=ETH&hash=0x%064x", i), []byte(`{}`), now, 1, int64(i)))
		if i%512 == 0 {
			s.Flush()
		}
	}
	s.Flush()
	b.ReportAllocs()
	for b.Loop() {
		s.Delete(func(e *cache.Entry) bool { return e.Tags.Chain == 9 })
	}
}

// TestResident: the pages of the file a Get read are counted as resident
// in the process's memory map (Linux: /proc/self/smaps).
func TestResident(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps")
	}
	s := open(t, Options{})
	r := rand.New(rand.NewPCG(3, 3))
	now := time.Now()
	for i := range 500 {
		s.Put(final(fmt.Sprint("/res/", i), body(r, 8000, false), now, 1, int64(i)))
	}
	s.Flush()
	before := s.Resident()
	for i := range 500 {
		if s.Get(fmt.Sprint("/res/", i), now) == nil {
			t.Fatalf("entry %d missing", i)
		}
	}
	after := s.Resident()
	if after <= before || after < 500*8000 {
		t.Fatalf("resident %d bytes before reading 4 MB of entries, %d after", before, after)
	}
	t.Logf("resident: %d before the reads, %d after", before, after)
}

// TestQueueBytes: the answers waiting for the writer are bounded in bytes
// too: past QueueBytes, Put drops; once written, they leave the count.
func TestQueueBytes(t *testing.T) {
	s := open(t, Options{QueueBytes: 10_000, BatchLen: 1})
	r := rand.New(rand.NewPCG(9, 9))
	now := time.Now()
	s.wmu.Lock() // the writer waits at its first commit
	for i := range 5 {
		s.Put(final(fmt.Sprint("/qb/", i), body(r, 3000, false), now, 1, int64(i)))
	}
	if d := s.Stats().Drops; d != 2 {
		t.Fatalf("%d dropped, want 2 (3 x 3000 bytes fit in 10000)", d)
	}
	s.wmu.Unlock()
	s.Flush()
	if q := s.queued.Load(); q != 0 {
		t.Fatalf("%d bytes still counted as queued after the flush", q)
	}
	s.Put(final("/qb/after", body(r, 3000, false), now, 1, 9))
	s.Flush()
	if st := s.Stats(); st.Writes != 4 || st.Drops != 2 {
		t.Fatalf("stats %+v", st)
	}
}
