package cache

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestEntryStates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := NewEntry("k", []byte(`{"code":"0"}`), Head, t0, 2*time.Second, 10*time.Second, time.Minute)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	cases := []struct {
		d    time.Duration
		want State
		ttl  int64
	}{
		{0, Fresh, 2},
		{1500 * time.Millisecond, Fresh, 0},
		{2 * time.Second, Stale, 0},
		{2500 * time.Millisecond, Stale, -1},
		{12 * time.Second, Expired, -10},
		{62 * time.Second, Missing, -60},
	}
	for _, c := range cases {
		if got := e.StateAt(at(c.d)); got != c.want {
			t.Errorf("at +%v: state %v, want %v", c.d, got, c.want)
		}
		if got := e.TTL(at(c.d)); got != c.ttl {
			t.Errorf("at +%v: ttl %d, want %d", c.d, got, c.ttl)
		}
	}
	if e.Age(at(3500*time.Millisecond)) != 3 {
		t.Error("age")
	}
	if !e.UsableOnError(at(61*time.Second)) || e.UsableOnError(at(62*time.Second)) {
		t.Error("usable on error window")
	}
	var none *Entry
	if none.StateAt(0) != Missing || none.UsableOnError(0) {
		t.Error("nil entry")
	}
}

// TestEntryHeldOnceCompressed: an answer is held once, as its gzip, which
// inflates to the answer; a small one is held as is; the ETag is the
// identity body's.
func TestEntryHeldOnceCompressed(t *testing.T) {
	body := bytes.Repeat([]byte(`{"hash":"0xabc","height":"12"},`), 100)
	want := bytes.Clone(body)
	e := NewEntry("k", body, Final, time.Now(), time.Hour, 0, 0)
	if e.Body != nil || len(e.Gzip) == 0 || len(e.Gzip) >= len(body) || e.Size != len(body) {
		t.Fatalf("held: body %d bytes, gzip %d bytes, size %d; want only a gzip smaller than %d", len(e.Body), len(e.Gzip), e.Size, len(body))
	}
	zr, err := gzip.NewReader(bytes.NewReader(e.Gzip))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, body) {
		t.Fatal("the gzip does not inflate to the body")
	}
	body[0] = 'X' // the entry does not alias the caller's buffer
	got, err := e.Inflate(make([]byte, 3))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Inflate: %v, equal %v", err, bytes.Equal(got, want))
	}
	small := NewEntry("k", []byte(`{}`), Final, time.Now(), time.Hour, 0, 0)
	if small.Gzip != nil || string(small.Body) != `{}` {
		t.Error("tiny body compressed")
	}
	if got, _ := small.Inflate(nil); string(got) != `{}` {
		t.Errorf("Inflate of an identity entry: %q", got)
	}
	other := NewEntry("k", append(bytes.Clone(want), ' '), Final, time.Now(), time.Hour, 0, 0)
	if bytes.Equal(e.ETag, other.ETag) || e.ETag[0] != '"' || e.ETag[len(e.ETag)-1] != '"' {
		t.Errorf("etags %s %s", e.ETag, other.ETag)
	}
	id := NewItem("k", want, Final, time.Now(), time.Hour, 0, 0)
	if !bytes.Equal(id.ETag, e.ETag) {
		t.Errorf("the same body held as is has ETag %s, compressed %s", id.ETag, e.ETag)
	}
	corrupt := NewEntry("k", want, Final, time.Now(), time.Hour, 0, 0)
	corrupt.Gzip = bytes.Clone(corrupt.Gzip)
	corrupt.Gzip[len(corrupt.Gzip)-6] ^= 0xff // the CRC
	if _, err := corrupt.Inflate(nil); err == nil {
		t.Error("a gzip with a wrong CRC inflated")
	}
}

func TestCacheSetGetAndBound(t *testing.T) {
	c, err := New(Config{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	e := NewEntry("a", []byte("hello"), Final, now, time.Hour, 0, 0)
	c.Set(e, now)
	if got := c.Get([]byte("a")); got != e {
		t.Fatal("set entry not found")
	}
	if c.Get([]byte("b")) != nil || c.GetString("b") != nil {
		t.Fatal("found a key never set")
	}
	if c.Entries() != 1 || c.Bytes() != e.Cost() {
		t.Fatalf("entries %d bytes %d, want 1 and %d", c.Entries(), c.Bytes(), e.Cost())
	}
	// Fill far beyond the bound: bytes held stay under it. (Random bytes
	// do not compress: each entry holds its 4000 bytes.)
	body := make([]byte, 4000)
	rand.Read(body)
	for i := 0; i < 2000; i++ {
		c.Set(NewEntry(fmt.Sprintf("k%d", i), body, Final, now, time.Hour, 0, 0), now)
	}
	if c.Bytes() > c.MaxBytes() {
		t.Fatalf("holding %d bytes, bound %d", c.Bytes(), c.MaxBytes())
	}
	if c.Evictions() == 0 {
		t.Fatal("no evictions after overfilling")
	}
	// An expired entry is not stored.
	old := NewEntry("old", body, Head, now.Add(-time.Hour), time.Second, 0, 0)
	c.Set(old, now)
	if c.GetString("old") != nil {
		t.Fatal("stored an entry past its last usable moment")
	}
}

func TestTTLs(t *testing.T) {
	bl, pl := TTLs{Head: time.Second}, TTLs{Volatile: 30 * time.Second}
	if bl.For(Head) != time.Second {
		t.Fatal("named class")
	}
	// A class the route does not name falls back to its shortest TTL.
	if pl.For(Final) != 30*time.Second || bl.For(Negative) != time.Second {
		t.Fatal("fallback to the shortest TTL")
	}
	if (TTLs{}).Shortest() != 0 || (TTLs{Final: time.Hour, Head: time.Second}).Shortest() != time.Second {
		t.Fatal("Shortest")
	}
}

// The bytes and entries gauges follow what the cache holds, also when a key
// is stored again after its keep time passed but before Ristretto's cleanup
// removed it (Ristretto then replaces the value in place), and they fall to
// zero once everything has expired and been cleaned up.
func TestAccountingFollowsReplacementsAndExpiry(t *testing.T) {
	c, err := New(Config{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := bytes.Repeat([]byte("y"), 1000)
	var last []*Entry
	for round := 0; round < 2; round++ {
		now := time.Now()
		last = last[:0]
		for i := 0; i < 100; i++ {
			e := NewEntry(fmt.Sprintf("k%d", i), body, Head, now, 30*time.Millisecond, 0, 0)
			c.Set(e, now) // kept 30 ms + 1 s
			last = append(last, e)
		}
		if c.Entries() != 100 {
			t.Fatalf("round %d: %d entries counted, 100 held", round, c.Entries())
		}
		var want int64
		for _, e := range last {
			want += e.Cost()
		}
		if c.Bytes() != want {
			t.Fatalf("round %d: %d bytes counted, %d held", round, c.Bytes(), want)
		}
		// Past the keep time: Get no longer returns them, Ristretto may
		// still hold them until its cleanup runs.
		deadline := time.Now().Add(5 * time.Second)
		for c.GetString("k0") != nil {
			if time.Now().After(deadline) {
				t.Fatal("entry outlived its keep time")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Ristretto's cleanup removes them all: it runs every 2.5 s over
	// buckets of 5 s, so up to about 7.5 s after they expired.
	deadline := time.Now().Add(20 * time.Second)
	for c.Entries() != 0 || c.Bytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after expiry: %d entries, %d bytes counted, none held", c.Entries(), c.Bytes())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
