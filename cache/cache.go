// Package cache holds answers of the explorer API in memory (Ristretto), with
// the times that decide whether an answer is fresh, stale or gone, and the
// policy that turns an answer into those times (policy.go).
package cache

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/ristretto/v2"
)

// Entry is one stored answer: the exact bytes to send and what the response
// headers need. Entries are immutable once stored; readers share them.
//
// An answer is held once: gzip-compressed (Gzip) when that is smaller,
// which it is for every answer of a few hundred bytes or more, else as is
// (Body). A client that takes gzip is sent Gzip; one that does not gets
// the identity body from Body, from a hot copy (identity.go) or inflated
// into its response (Inflate).
type Entry struct {
	Key    string // normalized key; checked on every read against hash collisions
	Body   []byte // identity body, sent as is; nil when Gzip holds the answer
	Gzip   []byte // the answer gzip-compressed; nil when it is held as Body
	Size   int    // length of the identity body
	ETag   []byte // strong validator of the identity body, quoted: "5f0c..."
	Class  Class
	Stored int64 // unix nanoseconds the upstream answered
	Fresh  int64 // unix nanoseconds until which the entry is fresh
	// Stale windows, copied from config at store time, so a reload does not
	// change what an entry already promised.
	StaleWhileRevalidate int64 // nanoseconds past Fresh
	StaleIfError         int64 // nanoseconds past Fresh
	// Status is the HTTP status to send; 0 means 200. Only a cached
	// refusal (an upstream envelope refusing the question) sets it.
	Status int
	// Source is where the answer came from (source.go), set where the
	// entry is made.
	Source Source

	held bool // counted in the cache's bytes and entries; guarded by Cache.mu

	// Tags are what a purge selects the entry by (tags.go): set by whoever
	// makes the entry, before it is stored or handed to anyone; immutable
	// after.
	Tags Tags
	slot int32 // place in Cache.live while held; guarded by Cache.mu
	// cdn is the tags header's value behind a CDN (tags.go: CDNTags),
	// built at the entry's first answer.
	cdn atomic.Pointer[CDNTags]
	// link is the Link header of a block-list answer (proxy/blocklist.go),
	// built at its first answer: empty when it has none.
	link atomic.Pointer[[]byte]

	// etag holds ETag's bytes inside the struct: a hit reads them with the
	// struct, not from one more place in memory.
	etag [18]byte

	// The hot identity copy, if the entry has one (identity.go).
	ident     atomic.Pointer[identCopy]
	identAsks atomic.Uint32 // identity asks served without a copy
}

// Link is e's Link header value as built by SetLink (empty: none), and
// whether it was built.
func (e *Entry) Link() ([]byte, bool) {
	if l := e.link.Load(); l != nil {
		return *l, true
	}
	return nil, false
}

// SetLink keeps e's Link header value; two answers may build it at once:
// either is kept (they are equal).
func (e *Entry) SetLink(v []byte) { e.link.Store(&v) }

// gzipMin is the body size below which an answer is held as is: the gzip
// header and trailer (18 bytes) and the inflate are not worth it.
const gzipMin = 512

// entryOverhead approximates the memory of an Entry beside its byte slices:
// the struct (256 bytes with its size class) and Ristretto's item, cost and
// expiry slots. BenchmarkMemory measures it: with 256 here the live heap
// was 218 bytes per entry above the accounted cost (10% of an entry held
// compressed, 1.10x); with 448, within 2%.
const entryOverhead = 448

// NewItem builds an entry holding a copy of body as is (the caller may
// reuse body): for answers read often as JSON rather than sent, such as the
// records of one hash that batch answers are assembled from, and cached
// refusals.
func NewItem(key string, body []byte, class Class, stored time.Time, ttl time.Duration, swr, sie time.Duration) *Entry {
	e := newEntry(key, body, class, stored, ttl, swr, sie)
	e.Body = bytes.Clone(body)
	return e
}

func newEntry(key string, body []byte, class Class, stored time.Time, ttl time.Duration, swr, sie time.Duration) *Entry {
	e := &Entry{
		Key:                  key,
		Size:                 len(body),
		Class:                class,
		Stored:               stored.UnixNano(),
		Fresh:                stored.Add(ttl).UnixNano(),
		StaleWhileRevalidate: int64(swr),
		StaleIfError:         int64(sie),
	}
	e.ComputeETag(body)
	return e
}

// ComputeETag sets ETag from the identity body: a strong validator, quoted.
func (e *Entry) ComputeETag(body []byte) {
	sum := xxhash.Sum64(body)
	var raw [8]byte
	for i := range raw {
		raw[i] = byte(sum >> (56 - 8*i))
	}
	e.ETag = append(e.etag[:0], '"')
	e.ETag = hex.AppendEncode(e.ETag, raw[:])
	e.ETag = append(e.ETag, '"')
}

// NewEntry builds an entry for an answer that is sent: compressed once,
// here, and held only compressed when that is smaller (gzip.go); else as
// NewItem holds it. body is not kept.
func NewEntry(key string, body []byte, class Class, stored time.Time, ttl time.Duration, swr, sie time.Duration) *Entry {
	if len(body) < gzipMin {
		return NewItem(key, body, class, stored, ttl, swr, sie)
	}
	z := compress(body)
	if z == nil {
		return NewItem(key, body, class, stored, ttl, swr, sie)
	}
	e := newEntry(key, body, class, stored, ttl, swr, sie)
	e.Gzip = z
	return e
}

// Cost is the memory the entry holds, in bytes (its hot identity copy, if
// any, is counted by the copies' set).
func (e *Entry) Cost() int64 {
	return int64(len(e.Key)+cap(e.Body)+cap(e.Gzip)+cap(e.ETag)) + entryOverhead + e.Tags.cost()
}

// State is what an entry is good for at a given time.
type State uint8

const (
	Missing State = iota // nothing usable
	Fresh                // serve as a hit
	Stale                // serve and refresh in the background (stale-while-revalidate)
	Expired              // refetch; serve only if the upstream fails (stale-if-error)
)

// String names the state for logs and traces: "miss", "fresh", "stale",
// "expired". A switch rather than a table, so a state added later cannot
// index past a table that was not grown with it.
func (s State) String() string {
	switch s {
	case Missing:
		return "miss"
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	case Expired:
		return "expired"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// StateAt classifies the entry at now (unix nanoseconds).
func (e *Entry) StateAt(now int64) State {
	switch {
	case e == nil:
		return Missing
	case now < e.Fresh:
		return Fresh
	case now < e.Fresh+e.StaleWhileRevalidate:
		return Stale
	case now < e.Fresh+e.StaleIfError:
		return Expired
	}
	return Missing
}

// UsableOnError reports whether the entry may stand in for a failed upstream
// call at now.
func (e *Entry) UsableOnError(now int64) bool {
	return e != nil && now < e.Fresh+max(e.StaleIfError, e.StaleWhileRevalidate)
}

// TTL is the remaining fresh time at now in whole seconds; negative when stale
// (RFC 9211 ttl parameter).
func (e *Entry) TTL(now int64) int64 {
	d := e.Fresh - now
	if d >= 0 {
		return d / int64(time.Second)
	}
	return -((-d + int64(time.Second) - 1) / int64(time.Second))
}

// Lifetime is the freshness lifetime in whole seconds: from the upstream's
// answer to the end of the fresh time (RFC 9111 section 4.2.1, max-age).
func (e *Entry) Lifetime() int64 {
	return max(e.Fresh-e.Stored, 0) / int64(time.Second)
}

// Age is the entry's age at now in whole seconds (RFC 9111 section 5.1).
func (e *Entry) Age(now int64) int64 {
	if now <= e.Stored {
		return 0
	}
	return (now - e.Stored) / int64(time.Second)
}

// Config sizes the cache.
type Config struct {
	MaxBytes int64 // bound on the bytes held by entries; must be > 0
	// IdentityBytes is the most of MaxBytes hot identity copies may hold
	// (identity.go): 0 is MaxBytes/4, below 0 none (every identity answer
	// is inflated).
	IdentityBytes int64
}

// Cache is a bounded in-memory cache of entries, safe for concurrent use.
type Cache struct {
	r *ristretto.Cache[string, *Entry]
	// mu orders counting an entry in (Set) against counting it out (OnExit):
	// Ristretto removes a value from its store before it calls OnExit.
	mu        sync.Mutex
	live      []*Entry // the entries counted in: the purge index (tags.go)
	bytes     atomic.Int64
	entries   atomic.Int64
	evictions atomic.Int64
	maxBytes  int64
	identity  identitySet // hot identity copies (identity.go); guarded by mu
}

// MemoryLimit is the soft Go heap limit (debug.SetMemoryLimit) that keeps
// a process whose memory is mostly a full, evicting cache of maxBytes
// within 1.5x maxBytes plus its baseline. Without a limit the heap of such
// a cache settles near 2x (BenchmarkMemory). explorer-edge sets it at start
// unless GOMEMLIMIT is set. It is 32 MiB under the RSS bound the docs give
// (1.5x + 64 MiB): with 8 MB answers at full upstream budget the GC runs
// that far past a soft limit (bench/membound: 463 MiB with the limit at
// the bound, 441 MiB with it 32 MiB under).
func MemoryLimit(maxBytes int64) int64 { return RSSBound(maxBytes) - 32<<20 }

// RSSBound is the resident memory a process holding a full cache of
// maxBytes stays within, whatever the answers' size: 1.5x maxBytes + 64 MiB
// (bench/membound checks it with 8 MB answers).
func RSSBound(maxBytes int64) int64 { return maxBytes + maxBytes/2 + 64<<20 }

// New returns a cache bounded by cfg.MaxBytes.
func New(cfg Config) (*Cache, error) {
	if cfg.MaxBytes <= 0 {
		return nil, fmt.Errorf("cache: max_bytes must be > 0, got %d", cfg.MaxBytes)
	}
	c := &Cache{maxBytes: cfg.MaxBytes}
	switch {
	case cfg.IdentityBytes == 0:
		c.identity.budget = cfg.MaxBytes / identityShare
	case cfg.IdentityBytes > 0:
		c.identity.budget = min(cfg.IdentityBytes, cfg.MaxBytes/2)
	}
	// Counters: about ten per expected entry, expecting 2 KB entries on average.
	counters := max(cfg.MaxBytes/2048*10, 10_000)
	r, err := ristretto.NewCache(&ristretto.Config[string, *Entry]{
		NumCounters:        counters,
		MaxCost:            cfg.MaxBytes, // less the identity copies held (identity.go)
		BufferItems:        64,
		IgnoreInternalCost: true, // Entry.Cost already counts the overhead
		OnEvict:            func(*ristretto.Item[*Entry]) { c.evictions.Add(1) },
		// Every way out: evicted, expired and cleaned up, replaced by a
		// newer entry for its key, deleted, or rejected (never counted in).
		OnExit: c.release,
	})
	if err != nil {
		return nil, err
	}
	c.r = r
	return c, nil
}

// Get returns the entry for key, or nil. The key may alias a reused buffer:
// Ristretto keeps only hashes of it, so the entry's key is compared too.
// (Comparing only lengths beside Ristretto's two hashes measured within
// the noise of BenchmarkHitManyKeys, so the full check stays.)
func (c *Cache) Get(key []byte) *Entry {
	e, ok := c.r.Get(unsafe.String(unsafe.SliceData(key), len(key)))
	if !ok || e.Key != unsafe.String(unsafe.SliceData(key), len(key)) {
		return nil
	}
	return e
}

// GetString is Get for a key held as a string.
func (c *Cache) GetString(key string) *Entry {
	e, ok := c.r.Get(key)
	if !ok || e.Key != key {
		return nil
	}
	return e
}

// Set stores e under e.Key until its last usable moment and waits until the
// entry is visible to Get, so the next request for the same key is a hit.
func (c *Cache) Set(e *Entry, now time.Time) {
	keep := time.Duration(e.Fresh+max(e.StaleWhileRevalidate, e.StaleIfError)-now.UnixNano()) + time.Second
	if keep <= 0 {
		return
	}
	if !c.r.SetWithTTL(e.Key, e, e.Cost(), keep) {
		return
	}
	c.r.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	// Admitted and not already gone: count it in. The entry it replaced, if
	// any, was counted out by release.
	if got, ok := c.r.Get(e.Key); ok && got == e && !e.held {
		e.held = true
		c.bytes.Add(e.Cost())
		c.entries.Add(1)
		c.index(e)
	}
}

// release counts out an entry leaving the cache, if it was counted in.
func (c *Cache) release(e *Entry) {
	if e == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.held {
		e.held = false
		c.bytes.Add(-e.Cost())
		c.entries.Add(-1)
		c.unindex(e)
		c.dropIdentity(e)
	}
}

// Del removes key.
func (c *Cache) Del(key string) { c.r.Del(key) }

// Bytes is the cost held by entries and their hot identity copies now.
func (c *Cache) Bytes() int64 { return c.bytes.Load() }

// Entries is the number of entries held now.
func (c *Cache) Entries() int64 { return c.entries.Load() }

// Evictions is the number of entries evicted or expired so far.
func (c *Cache) Evictions() int64 { return c.evictions.Load() }

// MaxBytes is the configured bound.
func (c *Cache) MaxBytes() int64 { return c.maxBytes }

// Close releases the cache's goroutines.
func (c *Cache) Close() { c.r.Close() }
