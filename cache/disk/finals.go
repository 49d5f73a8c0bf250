package disk

import (
	"bytes"
	"encoding/binary"
	"maps"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/bbolt"
)

// The finalized height of each chain is kept in the file (bucket "m",
// keys "final:" and the chain's name: the height, 8 bytes, and the
// xxhash64 of the name and the height), so that a restarted node classes
// settled answers as final before its first block list shows a done block
// (proxy/truth's Restore). What the node confirmed from the upstream is
// tracked (Track) and written by the commit after it rises: a write of
// entries, or a commit of its own at most every finalsEvery.

// finalsPrefix begins the keys of the finalized heights in bucket "m".
var finalsPrefix = []byte("final:")

// maxChainName bounds a chain's name read back (the configuration's are
// a few letters).
const maxChainName = 64

type finals struct {
	mu     sync.Mutex
	kept   map[string]int64 // as the file holds them
	chains []string
	final  func(chain string) int64
}

// Finals returns the finalized height of each chain as the file kept it:
// read at Open, and raised by every commit since (Track).
func (s *Store) Finals() map[string]int64 {
	s.finals.mu.Lock()
	defer s.finals.mu.Unlock()
	return maps.Clone(s.finals.kept)
}

// Track has the store keep final(chain) of each chain in the file, for
// Finals after a restart: written by the next commit after it rises (a
// batch of entries, or within finalsEvery). A height never goes down in
// the file. final must be safe to call from the writer.
func (s *Store) Track(chains []string, final func(chain string) int64) {
	s.finals.mu.Lock()
	s.finals.chains, s.finals.final = append([]string(nil), chains...), final
	s.finals.mu.Unlock()
	select {
	case s.track <- struct{}{}:
	default:
	}
}

// changed says whether a tracked height is above the file's.
func (f *finals) changed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final == nil {
		return false
	}
	for _, c := range f.chains {
		if f.final(c) > f.kept[c] {
			return true
		}
	}
	return false
}

// rising returns the tracked heights above the file's.
func (f *finals) rising() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final == nil {
		return nil
	}
	var up map[string]int64
	for _, c := range f.chains {
		if h := f.final(c); h > f.kept[c] {
			if up == nil {
				up = make(map[string]int64)
			}
			up[c] = h
		}
	}
	return up
}

// committed records heights the file now holds.
func (f *finals) committed(up map[string]int64) {
	if len(up) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kept == nil {
		f.kept = make(map[string]int64)
	}
	for c, h := range up {
		f.kept[c] = max(f.kept[c], h)
	}
}

// finalRecord is a height's value in the file.
func finalRecord(chain string, h int64) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(h))
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(append([]byte(chain), b...)))
}

// saveFinals writes the tracked heights that rose; update records them as
// kept once the transaction commits.
func (w *txn) saveFinals() error {
	w.finals = w.s.finals.rising()
	m := w.tx.Bucket(bucketMeta)
	for c, h := range w.finals {
		if err := m.Put(append(bytes.Clone(finalsPrefix), c...), finalRecord(c, h)); err != nil {
			return err
		}
	}
	return nil
}

// loadFinals reads the heights at Open: one that does not check out is
// not taken (a miss costs only the first block list's wait).
func loadFinals(tx *bbolt.Tx) map[string]int64 {
	got := map[string]int64{}
	c := tx.Bucket(bucketMeta).Cursor()
	for k, v := c.Seek(finalsPrefix); k != nil && bytes.HasPrefix(k, finalsPrefix); k, v = c.Next() {
		chain := string(k[len(finalsPrefix):])
		if len(chain) == 0 || len(chain) > maxChainName || len(v) != 16 {
			continue
		}
		h := int64(binary.BigEndian.Uint64(v))
		if h > 0 && bytes.Equal(v, finalRecord(chain, h)) {
			got[chain] = h
		}
	}
	return got
}

// finalsEvery is how often the writer looks for tracked heights that rose.
const finalsEvery = 5 * time.Second
