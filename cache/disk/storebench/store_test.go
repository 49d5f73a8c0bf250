// Package storebench compares the two embedded stores considered for the
// disk tier (package disk's doc comment gives the figures and the choice).
// It is a module of its own so that the losing store never enters the
// edge's go.mod:
//
//	cd cache/disk/storebench && go test -run '^$' -bench . -benchtime 2s
package storebench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/bbolt"
)

// The workload: final answers as the disk tier holds them, already gzip
// (so incompressible), 1-10 KiB each, under keys shaped like the edge's.
const (
	numEntries = 20_000
	batchLen   = 64 // entries per committed batch
)

type kv struct{ k, v []byte }

func workload() []kv {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]kv, numEntries)
	for i := range out {
		k := fmt.Appendf(nil, "/api/v2/transaction/transactions?chain=ETH&hash=0x%064x", r.Uint64())
		v := make([]byte, 1024+r.IntN(9*1024+1))
		for j := 0; j+8 <= len(v); j += 8 {
			binary.LittleEndian.PutUint64(v[j:], r.Uint64())
		}
		out[i] = kv{k, v}
	}
	return out
}

// store is what the benchmark asks of each candidate.
type store interface {
	putBatch([]kv) error
	get(k []byte, dst []byte) ([]byte, bool)
	close() error
}

type pebbleStore struct {
	db   *pebble.DB
	sync bool
}

func openPebble(dir string, sync bool) (store, error) { return openPebbleCache(dir, sync, 0) }

// openPebbleCache opens Pebble with a block cache of cacheBytes (0: its
// default, 8 MB).
func openPebbleCache(dir string, sync bool, cacheBytes int64) (store, error) {
	o := &pebble.Options{Logger: quietLogger{}}
	if cacheBytes > 0 {
		c := pebble.NewCache(cacheBytes)
		defer c.Unref()
		o.Cache = c
	}
	// The values are gzip already: no block compression.
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db: db, sync: sync}, nil
}

func (s *pebbleStore) putBatch(b []kv) error {
	bt := s.db.NewBatch()
	for _, x := range b {
		bt.Set(x.k, x.v, nil)
	}
	wo := pebble.NoSync
	if s.sync {
		wo = pebble.Sync
	}
	return bt.Commit(wo)
}

func (s *pebbleStore) get(k, dst []byte) ([]byte, bool) {
	v, c, err := s.db.Get(k)
	if err != nil {
		return dst, false
	}
	dst = append(dst[:0], v...)
	c.Close()
	return dst, true
}

func (s *pebbleStore) close() error { return s.db.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

type boltStore struct{ db *bbolt.DB }

var bucket = []byte("e")

func openBolt(dir string, sync bool) (store, error) {
	// The options package disk opens its file with (disk.go, open).
	db, err := bbolt.Open(filepath.Join(dir, "disk.db"), 0o600, &bbolt.Options{
		NoSync:          !sync,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: 1 << 30,
	})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
	return &boltStore{db}, err
}

func (s *boltStore) putBatch(b []kv) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, x := range b {
			if err := bk.Put(x.k, x.v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) get(k, dst []byte) ([]byte, bool) {
	ok := false
	s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucket).Get(k)
		if v != nil {
			dst, ok = append(dst[:0], v...), true
		}
		return nil
	})
	return dst, ok
}

func (s *boltStore) close() error { return s.db.Close() }

var candidates = []struct {
	name string
	open func(dir string, sync bool) (store, error)
}{
	{"pebble", openPebble},
	{"bbolt", openBolt},
}

// BenchmarkGetPebbleCached is Pebble's best case: a block cache (256 MB)
// that holds every block, which a disk tier larger than memory never has.
func BenchmarkGetPebbleCached(b *testing.B) {
	w := workload()
	dir := b.TempDir()
	open := func() store {
		s, err := openPebbleCache(dir, false, 256<<20)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := open()
	fill(b, s, w)
	s.close()
	s = open()
	defer s.close()
	var buf []byte
	for range 2 {
		for _, x := range w {
			buf, _ = s.get(x.k, buf)
		}
	}
	b.ReportAllocs()
	r := rand.New(rand.NewPCG(3, 4))
	var ok bool
	for b.Loop() {
		if buf, ok = s.get(w[r.IntN(len(w))].k, buf); !ok {
			b.Fatal("miss")
		}
	}
}

func fill(b *testing.B, s store, w []kv) {
	for i := 0; i < len(w); i += batchLen {
		if err := s.putBatch(w[i:min(i+batchLen, len(w))]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet is a disk hit: the store written, closed and opened again
// (as after a restart), its files in the page cache; each op reads one
// random entry's value into a reused buffer.
func BenchmarkGet(b *testing.B) {
	w := workload()
	for _, c := range candidates {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			s, err := c.open(dir, false)
			if err != nil {
				b.Fatal(err)
			}
			fill(b, s, w)
			if err := s.close(); err != nil {
				b.Fatal(err)
			}
			if s, err = c.open(dir, false); err != nil {
				b.Fatal(err)
			}
			defer s.close()
			// One pass to pull the files into the page cache.
			var buf []byte
			for _, x := range w {
				buf, _ = s.get(x.k, buf)
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				r := rand.New(rand.NewPCG(3, 4))
				var buf []byte
				var ok bool
				for b.Loop() {
					if buf, ok = s.get(w[r.IntN(len(w))].k, buf); !ok {
						b.Fatal("miss")
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r := rand.New(rand.NewPCG(rand.Uint64(), 4))
					var buf []byte
					var ok bool
					for pb.Next() {
						if buf, ok = s.get(w[r.IntN(len(w))].k, buf); !ok {
							panic("miss")
						}
					}
				})
			})
		})
	}
}

// BenchmarkWrite writes the 20,000 entries (about 110 MB) into an empty
// store in batches of 64, one commit per batch, with and without an fsync
// per commit, and closes it (pebble's close flushes its memtable).
func BenchmarkWrite(b *testing.B) {
	w := workload()
	var total int64
	for _, x := range w {
		total += int64(len(x.k) + len(x.v))
	}
	for _, c := range candidates {
		for _, sync := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/sync=%v", c.name, sync), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(total)
				for b.Loop() {
					dir, err := os.MkdirTemp(b.TempDir(), "w")
					if err != nil {
						b.Fatal(err)
					}
					s, err := c.open(dir, sync)
					if err != nil {
						b.Fatal(err)
					}
					fill(b, s, w)
					if err := s.close(); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					os.RemoveAll(dir)
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/numEntries, "ns/entry")
			})
		}
	}
}
