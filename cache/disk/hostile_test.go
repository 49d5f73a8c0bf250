package disk

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"explorer-edge/cache"
)

// TestCraftedRecords writes records whose checksum holds but whose fields
// lie, as whoever can write to disk_path can: each is a miss, counted
// corrupt, never an entry a request would size an allocation by, serve
// under another key, or fail to send. Before the bounds, the record
// claiming 2^40 bytes was returned and the first request for it ended the
// process (fatal error: runtime: out of memory in Inflate).
func TestCraftedRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	zipped := func() *cache.Entry { return final("/k", body(r, 6000, true), time.Now(), 1, 1) }
	plain := func() *cache.Entry { return final("/k", body(r, 600, false), time.Now(), 1, 1) }
	for name, craft := range map[string]func() []byte{
		"size 2^40": func() []byte {
			e := zipped()
			e.Size = 1 << 40
			return encodeEntry(e)
		},
		"size 2^40, trailer agreeing": func() []byte {
			e := zipped()
			e.Size = 1<<40 + int(binary.LittleEndian.Uint32(e.Gzip[len(e.Gzip)-4:]))
			return encodeEntry(e)
		},
		"size above max_response_bytes": func() []byte {
			e := zipped()
			e.Size = 1<<20 + 1
			return encodeEntry(e)
		},
		"size beyond deflate's ratio": func() []byte {
			e := zipped()
			e.Gzip = append([]byte(nil), e.Gzip[:20]...)
			e.Size = 20*gzipMaxRatio + 1
			binary.LittleEndian.PutUint32(e.Gzip[16:], uint32(e.Size))
			return encodeEntry(e)
		},
		"size not the gzip's": func() []byte {
			e := zipped()
			e.Size--
			return encodeEntry(e)
		},
		"empty etag": func() []byte {
			e := zipped()
			e.ETag = nil
			return encodeEntry(e)
		},
		"etag not quoted hex": func() []byte {
			e := zipped()
			e.ETag = []byte(`"zzzzzzzzzzzzzzzz"`)
			return encodeEntry(e)
		},
		"etag of another body": func() []byte {
			e := plain()
			e.ComputeETag([]byte("another body"))
			return encodeEntry(e)
		},
		"another key's record": func() []byte {
			e := plain()
			e.Key = "/other"
			return encodeEntry(e)
		},
		"key of 40 KB": func() []byte {
			e := plain()
			e.Key = "/k" + strings.Repeat("x", 40<<10)
			return encodeEntry(e)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t, Options{MaxBody: 1 << 20})
			if err := s.db.Update(func(tx *bbolt.Tx) error {
				return tx.Bucket(bucketEntries).Put([]byte("/k"), craft())
			}); err != nil {
				t.Fatal(err)
			}
			if got := s.Get("/k", time.Now()); got != nil {
				t.Fatalf("crafted record returned: key %q, size %d, etag %q", got.Key, got.Size, got.ETag)
			}
			if st := s.Stats(); st.Corrupt != 1 {
				t.Fatalf("stats %+v: want it counted corrupt", st)
			}
		})
	}
}

// TestMaxBody: an answer larger than MaxBody is not written (it could not
// be read back), and one within it is.
func TestMaxBody(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	s := open(t, Options{MaxBody: 4096})
	big := final("/big", body(r, 4097, false), time.Now(), 1, 1)
	ok := final("/ok", body(r, 4096, false), time.Now(), 1, 1)
	s.Put(big)
	s.Put(ok)
	s.Flush()
	if s.Get("/big", time.Now()) != nil {
		t.Fatal("an answer above MaxBody was written")
	}
	same(t, s.Get("/ok", time.Now()), ok)
	if st := s.Stats(); st.Drops != 1 || st.Writes != 1 {
		t.Fatalf("stats %+v: want 1 drop, 1 write", st)
	}
}
