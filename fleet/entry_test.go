package fleet

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"explorer-edge/cache"
)

func testEntry(bodyLen int) *cache.Entry {
	var b strings.Builder
	b.WriteString(`{"code":"0","msg":"","data":[`)
	for i := 0; b.Len() < bodyLen; i++ {
		fmt.Fprintf(&b, `{"height":"%d","hash":"0x%064x","state":"done","txnCount":"%d"},`, 1000+i, i*7919, i%97)
	}
	b.WriteString(`{}]}`)
	now := time.Unix(1_780_000_000, 123)
	return cache.NewEntry("/api/v5/chainx/block/block-list?chainShortName=CHAINX&page=1&limit=20",
		[]byte(b.String()), cache.Final, now, 24*time.Hour, 30*time.Second, 10*time.Minute)
}

func TestEncodeDecode(t *testing.T) {
	for _, n := range []int{0, 100, 20_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := testEntry(n)
			if n == 0 {
				e.Body, e.Gzip, e.Size = []byte{}, nil, 0 // a per-hash item with no records
			}
			v := encode(e)
			if len(e.Gzip) > 0 && len(v) > len(e.Gzip)+len(e.Key)+len(e.ETag)+headerLen+4 {
				t.Errorf("value of %d bytes carries more than the gzip body (%d)", len(v), len(e.Gzip))
			}
			got, err := decode(v, 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != e.Key || got.Size != e.Size || !bytes.Equal(got.Body, e.Body) || !bytes.Equal(got.Gzip, e.Gzip) || !bytes.Equal(got.ETag, e.ETag) ||
				got.Class != e.Class || got.Stored != e.Stored || got.Fresh != e.Fresh ||
				got.StaleWhileRevalidate != e.StaleWhileRevalidate || got.StaleIfError != e.StaleIfError {
				t.Fatalf("round trip changed the entry:\n got %+v\nwant %+v", got, e)
			}
		})
	}
}

// A value this node cannot read is a miss, never a misread entry.
func TestDecodeRejects(t *testing.T) {
	ge := testEntry(2000)
	good := encode(ge)
	f := func(name string, v []byte) {
		t.Helper()
		if e, err := decode(v, 64<<20); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, e)
		}
	}
	next := bytes.Clone(good)
	next[0] = formatVersion + 1
	f("next version", next)
	f("version 0", append([]byte{0}, good[1:]...))
	f("empty", nil)
	f("header only", good[:headerLen-1])
	f("truncated key", good[:headerLen+3])
	flags := bytes.Clone(good)
	flags[2] |= 0x80
	f("unknown flag", flags)
	class := bytes.Clone(good)
	class[1] = 9
	f("unknown class", class)
	notGzip := bytes.Clone(good)
	notGzip[len(good)-len(ge.Gzip)] = '{' // the payload's first byte, gzip's magic
	f("not gzip", notGzip)
	// What only inflating finds, the proxy's check finds (checkedTier):
	// the entry read back does not inflate.
	inflates := func(name string, v []byte) {
		t.Helper()
		e, err := decode(v, 64<<20)
		if err != nil {
			return
		}
		if _, err := e.Inflate(nil); err == nil {
			t.Errorf("%s: inflated", name)
		}
	}
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-10] ^= 0xff // inside the gzip trailer's CRC
	inflates("bad gzip", corrupt)
	inflates("truncated gzip", good[:len(good)-20])
}

func BenchmarkDecode(b *testing.B) {
	e := testEntry(10_000)
	v := encode(e)
	b.ReportAllocs()
	b.SetBytes(int64(e.Size))
	for b.Loop() {
		if _, err := decode(v, 64<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeBoundsDeclaredSizes: whoever can write to Redis can write a
// value whose gzip trailer claims any size. A 60-byte value claiming 64 MiB
// cost 17.6 s of CPU per 100 reads (each allocated and zeroed 64 MiB before
// the inflate failed); the claim is now checked against what deflate can
// make of the bytes and against the body bound before anything is sized
// from it.
func TestDecodeBoundsDeclaredSizes(t *testing.T) {
	good := encode(testEntry(20_000))
	lie := func(size uint32) []byte {
		v := bytes.Clone(good)
		n := len(v)
		v[n-4], v[n-3], v[n-2], v[n-1] = byte(size), byte(size>>8), byte(size>>16), byte(size>>24)
		return v
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, err := decode(lie(64<<20), 64<<20); err == nil {
			t.Fatal("a value claiming 64 MiB from a few KB decoded")
		}
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("100 lying values allocated %d MiB", alloc>>20)
	}
	if _, err := decode(good, 10_000); err == nil {
		t.Fatal("a body above the bound decoded")
	}
	if _, err := decode(good, 64<<20); err != nil {
		t.Fatalf("the honest value: %v", err)
	}
}
