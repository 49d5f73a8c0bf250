package cache

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// jsonBody is an answer-like body of about n bytes that compresses as
// answers do.
func jsonBody(n, seed int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"code":"0","msg":"","data":[`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"height":"%d","hash":"0x%064x"},`, seed*1000+i, (seed*7919+i)*104729)
	}
	b.WriteString(`{}]}`)
	return b.Bytes()
}

// TestIdentityCopies: an entry asked for without gzip gets a copy on its
// identityEvery-th ask; the copies stay within their share of max_bytes,
// count in Bytes, and go with their entries.
func TestIdentityCopies(t *testing.T) {
	c, err := New(Config{MaxBytes: 4 << 20, IdentityBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	var entries []*Entry
	for i := range 40 {
		e := NewEntry(fmt.Sprintf("k%d", i), jsonBody(8000, i), Final, now, time.Hour, 0, 0)
		if e.Gzip == nil {
			t.Fatal("not compressed")
		}
		c.Set(e, now)
		entries = append(entries, e)
	}
	e := entries[0]
	want, _ := e.Inflate(nil)
	for ask := 1; ask < identityEvery; ask++ {
		if c.Identity(e) != nil {
			t.Fatalf("a copy on ask %d", ask)
		}
	}
	held := c.Bytes()
	got := c.Identity(e)
	if !bytes.Equal(got, want) {
		t.Fatalf("no copy, or a wrong one, on ask %d", identityEvery)
	}
	if c.IdentityBytes() == 0 || c.Bytes() != held+c.IdentityBytes() {
		t.Fatalf("copy of %d bytes: identity %d, bytes %d -> %d", len(got), c.IdentityBytes(), held, c.Bytes())
	}
	if c.r.MaxCost() != c.MaxBytes()-c.IdentityBytes() {
		t.Fatalf("entries may hold %d bytes beside %d of copies, max_bytes %d", c.r.MaxCost(), c.IdentityBytes(), c.MaxBytes())
	}
	if again := c.Identity(e); &again[0] != &got[0] {
		t.Fatal("the copy was not served again")
	}
	// Every entry asked for often: the copies stay within 64 KB.
	for range 3 * identityEvery {
		for _, x := range entries {
			if b := c.Identity(x); b != nil {
				if w, _ := x.Inflate(nil); !bytes.Equal(b, w) {
					t.Fatalf("%s: copy differs from the answer", x.Key)
				}
			}
			if c.IdentityBytes() > 64<<10 {
				t.Fatalf("copies hold %d bytes, share 64 KiB", c.IdentityBytes())
			}
		}
	}
	if c.IdentityBytes() < 32<<10 {
		t.Fatalf("copies hold %d bytes: the share is not used", c.IdentityBytes())
	}
	// An entry leaving takes its copy along.
	before := c.IdentityBytes()
	var with *Entry
	for _, x := range entries {
		if x.ident.Load() != nil {
			with = x
			break
		}
	}
	c.Del(with.Key)
	c.r.Wait()
	if c.IdentityBytes() >= before || with.ident.Load() != nil {
		t.Fatalf("deleted entry's copy kept: %d -> %d bytes", before, c.IdentityBytes())
	}
	// An answer larger than a quarter of the share is never copied.
	big := NewEntry("big", jsonBody(40_000, 99), Final, now, time.Hour, 0, 0)
	c.Set(big, now)
	for range 4 * identityEvery {
		if c.Identity(big) != nil {
			t.Fatal("a copy of an answer larger than a quarter of the share")
		}
	}
	// No share: never a copy.
	none, _ := New(Config{MaxBytes: 4 << 20, IdentityBytes: -1})
	defer none.Close()
	x := NewEntry("x", jsonBody(8000, 1), Final, now, time.Hour, 0, 0)
	none.Set(x, now)
	for range 4 * identityEvery {
		if none.Identity(x) != nil {
			t.Fatal("a copy with no share")
		}
	}
}
