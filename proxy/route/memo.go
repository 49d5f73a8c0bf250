package route

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// Memo remembers, for request URIs exactly as clients sent them, the
// route and canonical cache key their parse produced. A repeated question
// then skips the URI and argument parsing and the normalization: on a hit
// under load those were about 6% of the edge's CPU per request (see
// docs/performance.md). The parse is a pure function of the raw URI and the
// settings, so a memo belongs to one settings value and a reload starts an
// empty one.
//
// It is a fixed table of slots holding pointers, each URI with two possible
// slots; a store overwrites. It holds no cache entries (an evicted entry is
// never kept alive by it), only URIs and keys of up to memoMaxURI bytes: at
// most memoSlots*(2*memoMaxURI+80) bytes, 9.3 MiB, in the worst case of
// every slot holding a different long URI, and 128 KiB when empty.
type Memo struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[Remembered]
}

const (
	memoSlots  = 1 << 14 // the many-keys benchmark cycles through 4000 URIs
	memoMaxURI = 256     // longer URIs (hash lists) are parsed every time
)

// Remembered is what a raw URI parsed to.
type Remembered struct {
	raw   string // the request URI as sent
	Key   string // the canonical key a successful parse of raw built
	Route *Route
}

// NewMemo is an empty memo.
func NewMemo() *Memo { return &Memo{seed: maphash.MakeSeed()} }

// slotsOf returns the two slots raw may live in.
func (m *Memo) slotsOf(raw []byte) (a, b *atomic.Pointer[Remembered]) {
	h := maphash.Bytes(m.seed, raw)
	return &m.slots[h%memoSlots], &m.slots[(h>>32)%memoSlots]
}

// Lookup returns what raw parsed to, or nil when it is not remembered.
func (m *Memo) Lookup(raw []byte) *Remembered {
	if len(raw) > memoMaxURI {
		return nil
	}
	a, b := m.slotsOf(raw)
	if e := a.Load(); e != nil && e.raw == string(raw) {
		return e
	}
	if e := b.Load(); e != nil && e.raw == string(raw) {
		return e
	}
	return nil
}

// Store remembers that raw parsed to key on route r. It takes the first
// empty slot of the two, else the second.
func (m *Memo) Store(raw, key []byte, r *Route) {
	if len(raw) > memoMaxURI || len(key) > memoMaxURI || r.PerHash {
		return
	}
	// One allocation, read together. (string(raw) + string(key) is three
	// when they are longer than 32 bytes: each conversion copies first.)
	var sb strings.Builder
	sb.Grow(len(raw) + len(key))
	sb.Write(raw)
	sb.Write(key)
	both := sb.String()
	e := &Remembered{raw: both[:len(raw)], Key: both[len(raw):], Route: r}
	a, b := m.slotsOf(raw)
	if a.CompareAndSwap(nil, e) {
		return
	}
	b.Store(e)
}
