package cache

import (
	"time"
)

// Purging (docs/purge.md) finds entries by what they hold,
// not only by key: the route and chain of the answer, the hashes asked and
// the block heights it contains. Those are an entry's Tags, set once when it
// is stored (the miss path; a hit never reads them) by whoever stores it:
// the request core reads them from the key and the body before Set, and
// they never change after.
//
// The index is the list of entries the cache holds, kept under Cache.mu
// exactly where an entry is counted in (Set) and out (release, Ristretto's
// OnExit: evicted, expired, replaced, deleted): an entry is in the list if
// and only if it is counted in cache_entries, so the list is bounded by
// cache.max_bytes as the entries are. A purge scans it once with the
// selector's match function. A scan of every entry is simpler than one map
// per kind of tag and, measured (BenchmarkPurge), fast enough: the time of a
// purge is that of the deletions, not of the scan.

// Tags are what a purge can select an entry by. The proxy gives the numbers
// their meaning; the cache only stores them. The zero value is an untagged
// entry: a purge finds it by key and by route-less selectors (all) only.
type Tags struct {
	Route uint8 // the proxy's route number + 1; 0 = untagged
	Chain uint8 // the proxy's chain number + 1; 0 = none
	// [Lo, Hi) are the block heights the answer contains (a block, a
	// transaction or a record of one), from the lowest to one past the
	// highest; Hi <= Lo (the zero value): none.
	Lo, Hi int64
	// Hashes are xxhash digests of the hashes the request asked for, in
	// canonical (lower) case.
	Hashes []uint64
}

// HasHeights reports whether the entry contains a block height in [from, to].
func (t *Tags) HasHeights(from, to int64) bool {
	return t.Lo < t.Hi && t.Lo <= to && from < t.Hi
}

// HasHash reports whether the request asked for the hash with digest h.
func (t *Tags) HasHash(h uint64) bool {
	for _, x := range t.Hashes {
		if x == h {
			return true
		}
	}
	return false
}

// tagsCost is the memory of an entry's tags and its slot in the index
// beside what entryOverhead counts: the Tags struct, the slot number, the
// list's pointer (and its slack: the list doubles) and the digests.
func (t *Tags) cost() int64 { return 48 + 4 + 16 + 8*int64(cap(t.Hashes)) }

// StaleFrom is a copy of e that is fresh until at, no longer; its stale
// windows count from there (a soft purge selected e while its answer was
// on its way). The bytes are shared: entries never change.
func (e *Entry) StaleFrom(at int64) *Entry {
	c := &Entry{
		Key: e.Key, Body: e.Body, Gzip: e.Gzip, Size: e.Size, ETag: e.ETag,
		Class: e.Class, Stored: e.Stored, Fresh: min(e.Fresh, at),
		StaleWhileRevalidate: e.StaleWhileRevalidate, StaleIfError: e.StaleIfError,
		Status: e.Status, Source: e.Source, Tags: e.Tags, slot: -1,
	}
	c.cdn.Store(e.cdn.Load())
	c.link.Store(e.link.Load())
	return c
}

// index adds e to the list of held entries; mu is held.
func (c *Cache) index(e *Entry) {
	e.slot = int32(len(c.live))
	c.live = append(c.live, e)
}

// unindex removes e from the list (swap with the last); mu is held.
func (c *Cache) unindex(e *Entry) {
	i := int(e.slot)
	if i < 0 || i >= len(c.live) || c.live[i] != e {
		return
	}
	last := len(c.live) - 1
	c.live[i] = c.live[last]
	c.live[i].slot = int32(i)
	c.live[last] = nil
	c.live = c.live[:last]
	e.slot = -1
	// Give memory back after a purge or a flood of evictions emptied most of
	// the list; the list never shrinks below a few pages.
	if cap(c.live) > 4096 && len(c.live) < cap(c.live)/4 {
		c.live = append(make([]*Entry, 0, cap(c.live)/2), c.live...)
		for j, x := range c.live {
			x.slot = int32(j)
		}
	}
}

// scanChunk bounds how long one scan holds mu: misses storing their
// answers wait for it, hits never do.
const scanChunk = 4096

// Purge removes the held entries for which match is true, or with soft
// makes them stale from now on: fresh no longer, served only within their
// stale windows while one refresh runs, as any stale entry. match runs with
// the cache's lock held: it must be quick and must not call the cache.
// Purge returns the number of entries matched.
//
// The list is scanned from its end in chunks, releasing the lock between
// them: a removal swaps the last entry into the removed one's place, which
// lies below the scan point (scanned next) or above it (scanned already),
// so every entry held when the purge began and still held is seen.
func (c *Cache) Purge(match func(e *Entry) bool, soft bool, now time.Time) int {
	var hit []*Entry
	c.mu.Lock()
	i := len(c.live) - 1
	chunks := 0
	for i >= 0 {
		for stop := max(i-scanChunk, -1); i > stop; i-- {
			if e := c.live[i]; match(e) {
				hit = append(hit, e)
			}
		}
		chunks++
		c.mu.Unlock()
		c.mu.Lock()
		i = min(i, len(c.live)-1)
	}
	c.mu.Unlock()
	if chunks > 1 {
		// An entry scanned already can be swapped below the scan point
		// while the lock was free, and matched twice.
		seen := make(map[*Entry]struct{}, len(hit))
		kept := hit[:0]
		for _, e := range hit {
			if _, dup := seen[e]; !dup {
				seen[e] = struct{}{}
				kept = append(kept, e)
			}
		}
		hit = kept
	}
	c.apply(hit, soft, now)
	return len(hit)
}

// PurgeKeys is Purge for the entries of known keys; match, if not nil,
// must hold too.
func (c *Cache) PurgeKeys(keys []string, match func(e *Entry) bool, soft bool, now time.Time) int {
	var hit []*Entry
	for _, k := range keys {
		if e := c.GetString(k); e != nil && (match == nil || match(e)) {
			hit = append(hit, e)
		}
	}
	c.apply(hit, soft, now)
	return len(hit)
}

// apply deletes the entries, or replaces each still fresh with a copy that
// is stale from now. A copy can replace an answer stored meanwhile by a
// refresh: that costs one more refresh, never a wrong answer.
func (c *Cache) apply(entries []*Entry, soft bool, now time.Time) {
	ns := now.UnixNano()
	for _, e := range entries {
		if !soft {
			if c.GetString(e.Key) == e { // not replaced by a newer answer meanwhile
				c.r.Del(e.Key)
			}
			continue
		}
		if e.Fresh <= ns {
			continue // stale already
		}
		if c.GetString(e.Key) == e {
			c.Set(e.StaleFrom(ns), now)
		}
	}
}

// indexLen is the number of entries in the index (equal to Entries once
// every Set has returned).
func (c *Cache) indexLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

// CDNTags is an entry's tags as the CDN reads them (proxy/purge:
// Naming), under one naming (a configuration's cdn.tag_header and
// tag_prefix): built once, at the entry's first answer under that naming,
// so a hit only copies them. Their bytes are not in Cost: at most 50 tags
// of 128 characters, a hundred bytes for most answers.
type CDNTags struct {
	Naming any // the naming they were built under, compared by identity
	Value  []byte
}

// CDNTags are e's tags under naming, or nil when they were not built
// under it yet.
func (e *Entry) CDNTags(naming any) []byte {
	if t := e.cdn.Load(); t != nil && t.Naming == naming {
		return t.Value
	}
	return nil
}

// SetCDNTags keeps e's tags under naming; entries being shared, two
// answers may build them at once: either is kept.
func (e *Entry) SetCDNTags(naming any, value []byte) {
	e.cdn.Store(&CDNTags{Naming: naming, Value: value})
}
