package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/bbolt"

	"explorer-edge/cache"
)

// run is the writer: it commits queued entries a batch at a time, when
// BatchLen have gathered or BatchDelay after the first, and removes what
// Get found corrupt or past its lifetime.
func (s *Store) run() {
	defer close(s.done)
	var batch []*cache.Entry
	var bad []string
	t := time.NewTimer(time.Hour)
	t.Stop()
	armed := false
	// retryT tries failed Deletes again (retryPurges) until one commits.
	retryT := time.NewTimer(time.Hour)
	retryT.Stop()
	defer retryT.Stop()
	// finalsT writes tracked finalized heights that rose with no entry
	// written meanwhile.
	finalsT := time.NewTicker(finalsEvery)
	defer finalsT.Stop()
	commit := func() {
		if armed {
			t.Stop()
			armed = false
		}
		s.write(batch, bad)
		clear(batch)
		batch, bad = batch[:0], bad[:0]
	}
	arm := func() {
		if !armed {
			t.Reset(s.batchDelay)
			armed = true
		}
	}
	for {
		select {
		case e := <-s.queue:
			batch = append(batch, e)
			if len(batch) >= s.batchLen {
				commit()
			} else {
				arm()
			}
		case k := <-s.bad:
			bad = append(bad, k)
			arm()
		case <-s.retry:
			retryT.Reset(s.purgeRetry)
		case <-retryT.C:
			if s.retryPurges() {
				retryT.Reset(s.purgeRetry)
			}
		case <-s.track:
			arm()
		case <-finalsT.C:
			if !armed && s.finals.changed() {
				arm()
			}
		case <-t.C:
			armed = false
			commit()
		case done := <-s.flushes:
			batch, bad = s.drain(batch, bad)
			commit()
			close(done)
		case <-s.quit:
			batch, bad = s.drain(batch, bad)
			commit()
			return
		}
	}
}

// drain appends what the queue and the bad keys hold now.
func (s *Store) drain(batch []*cache.Entry, bad []string) ([]*cache.Entry, []string) {
	for {
		select {
		case e := <-s.queue:
			batch = append(batch, e)
		case k := <-s.bad:
			bad = append(bad, k)
		default:
			return batch, bad
		}
	}
}

// write commits batch (in transactions of at most BatchLen entries) and
// removes the bad keys. While writes are stopped after a failure, batches
// are dropped until RetryAfter has passed.
func (s *Store) write(batch []*cache.Entry, bad []string) {
	if len(batch) == 0 && len(bad) == 0 {
		if s.finals.changed() {
			s.wmu.Lock()
			if !s.broken.Load() && !s.failing {
				s.commit(func(*txn) error { return nil })
			}
			s.wmu.Unlock()
		}
		return
	}
	defer func(all []*cache.Entry) { // written or dropped: out of the queue's bytes
		for _, e := range all {
			s.queued.Add(-payload(e))
		}
	}(batch)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken.Load() || s.failing && s.now().Before(s.retryAt) {
		s.drops.Add(int64(len(batch)))
		return
	}
	if s.failing && s.relieve() != nil {
		s.drops.Add(int64(len(batch)))
		return
	}
	for len(batch) > 0 || len(bad) > 0 {
		part := batch[:min(len(batch), s.batchLen)]
		batch = batch[len(part):]
		err := s.commit(func(w *txn) error {
			for _, k := range bad {
				w.recheck(k)
			}
			for _, e := range part {
				if err := w.put(e); err != nil {
					return err
				}
			}
			return nil
		})
		bad = nil
		if err != nil {
			s.drops.Add(int64(len(part) + len(batch)))
			return
		}
	}
}

// relieve is the first commit tried after a failure: eviction alone, down
// to the lowered limit, so that the batch after it has the pages freed.
// (bbolt reuses the pages a transaction frees only once it has committed,
// and a value needs pages in a row: evicting in the batch's own
// transaction makes no room.) If the batch fails still, the limit is
// lowered again: the store settles below what the disk can hold.
func (s *Store) relieve() error {
	err := s.update(func(*txn) error { return nil })
	if err != nil {
		s.writeErrors.Add(1)
		s.retryAt = s.now().Add(s.retryAfter)
	}
	return err
}

// commit runs one write transaction (update) and keeps the state of
// writes: a failure stops them for RetryAfter, lowers the limit to nine
// tenths of what is held (the disk may be smaller than MaxBytes, or shared
// and full) and logs once, until a commit succeeds again.
func (s *Store) commit(fn func(w *txn) error) error {
	err := s.update(fn)
	if err == nil {
		if s.failing {
			s.failing = false
			s.log.Info("disk cache: writes resumed", "path", s.path, "max_bytes_now", s.limit)
		}
		return nil
	}
	s.writeErrors.Add(1)
	s.limit = min(s.limit, s.bytes.Load()/10*9)
	if !s.failing && !errors.Is(err, errPanicked) {
		s.log.Error("disk cache: write failed; writes stop, reads go on", "path", s.path,
			"retry_after", s.retryAfter, "max_bytes_now", s.limit, "err", err)
	}
	s.failing = true
	s.retryAt = s.now().Add(s.retryAfter)
	return err
}

// update runs one write transaction; wmu is held. Before fn it removes
// what the matches of failed Deletes select; after, it removes entries
// past their lifetime and evicts down to the limit, so the bound holds at
// every commit. The counters change once the transaction commits.
func (s *Store) update(fn func(w *txn) error) error {
	w := &txn{s: s, now: s.now().UnixNano(), bytes: s.bytes.Load(), entries: s.entries.Load()}
	pending := s.pending.Load()
	err := s.guard(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			w.tx, w.e, w.o = tx, tx.Bucket(bucketEntries), tx.Bucket(bucketIndex)
			if s.fail != nil {
				if err := s.fail(); err != nil {
					return err
				}
			}
			if pending != nil {
				for _, match := range *pending {
					w.deleteMatching(match)
				}
			}
			if err := fn(w); err != nil {
				return err
			}
			w.sweep()
			if w.recount {
				w.count()
			}
			w.evict()
			if err := w.saveFinals(); err != nil {
				return err
			}
			return w.saveTotals()
		})
	})
	if err != nil {
		return err
	}
	if pending != nil {
		s.pending.Store(nil) // only Delete adds to it, under wmu
		s.markUnpurged(false)
	}
	s.finals.committed(w.finals)
	s.bytes.Store(w.bytes)
	s.entries.Store(w.entries)
	s.writes.Add(w.writes)
	s.drops.Add(w.drops)
	s.evictions.Add(w.evictions)
	s.expired.Add(w.expired)
	s.corrupt.Add(w.corrupt)
	s.deleted.Add(w.deleted)
	return nil
}

// txn is one write transaction and what it changes of the counters.
type txn struct {
	s    *Store
	tx   *bbolt.Tx
	e, o *bbolt.Bucket
	now  int64

	bytes, entries                                      int64 // the totals as the transaction leaves them
	writes, drops, evictions, expired, corrupt, deleted int64
	recount                                             bool // the totals are in doubt: count them again

	okey    []byte
	scratch cache.Entry
	finals  map[string]int64 // heights written (saveFinals)
}

// cost is what a record of k key bytes and v value bytes takes in the
// file: bbolt's 16-byte element header beside it, and a value larger than
// half a page takes whole pages of its own (with a 16-byte page header).
func (s *Store) cost(k, v int) int64 {
	n := int64(16 + k + v)
	if n > s.pageSize/2 {
		return (n + 16 + s.pageSize - 1) / s.pageSize * s.pageSize
	}
	return n
}

// sweepMax bounds the entries one transaction removes past their lifetime.
const sweepMax = 256

// put writes e, replacing any entry under its key.
func (w *txn) put(e *cache.Entry) error {
	if !e.UsableOnError(w.now) {
		return nil
	}
	if len(e.Key) == 0 || len(e.Key) > maxKeyLen || e.Size > w.s.maxBody || !wellFormedETag(e.ETag) {
		w.drops++
		return nil
	}
	rec := encodeEntry(e)
	ix := encodeIndex(e, 0)
	cost := w.s.cost(len(e.Key), len(rec)) + w.s.cost(8+len(e.Key), len(ix))
	if cost > w.s.maxBytes {
		w.drops++
		return nil
	}
	ix = encodeIndex(e, cost)
	key := []byte(e.Key)
	w.removeKey(key)
	w.okey = indexKey(w.okey[:0], e.Stored, e.Key)
	if err := w.e.Put(key, rec); err != nil {
		return err
	}
	if err := w.o.Put(w.okey, ix); err != nil {
		return err
	}
	w.bytes += cost
	w.entries++
	w.writes++
	return nil
}

// removeKey removes the entry under key, if any, and its index record.
func (w *txn) removeKey(key []byte) {
	rec := w.e.Get(key)
	if rec == nil {
		return
	}
	w.e.Delete(key)
	if stored, ok := storedOf(rec); ok {
		okey := indexKey(nil, stored, string(key))
		if ix := w.o.Get(okey); ix != nil {
			w.uncount(ix)
			w.o.Delete(okey)
			return
		}
	}
	// The entry record's stored time is corrupt: look for its index
	// record among all of them (rare: a corrupt record).
	var found [][]byte
	c := w.o.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if bytes.Equal(k[8:], key) {
			found = append(found, append([]byte(nil), k...))
		}
	}
	for _, k := range found {
		w.uncount(w.o.Get(k))
		w.o.Delete(k)
	}
}

// removeIndexed removes the index record okey holding ix and its entry.
// ix is read before anything is deleted: it may alias a page.
func (w *txn) removeIndexed(okey, ix []byte) {
	okey = append([]byte(nil), okey...)
	w.uncount(ix)
	key := okey[8:]
	if rec := w.e.Get(key); rec != nil {
		// Only the entry this index record is for: not a newer one under
		// the same key whose index record is elsewhere.
		if stored, ok := storedOf(rec); ok && stored == int64(binary.BigEndian.Uint64(okey)) {
			w.e.Delete(key)
		}
	}
	w.o.Delete(okey)
}

// uncount takes the entry of index record ix out of the totals.
func (w *txn) uncount(ix []byte) {
	cost, err := decodeIndex(ix, &w.scratch)
	if err != nil {
		w.corrupt++
		w.recount = true
		return
	}
	w.bytes -= cost
	w.entries--
}

// recheck removes the entry under key if it is still what Get found:
// corrupt or past its lifetime (a Put may have replaced it meanwhile).
func (w *txn) recheck(key string) {
	k := []byte(key)
	rec := w.e.Get(k)
	if rec == nil {
		return
	}
	e, err := decodeEntry(rec, w.s.maxBody)
	switch {
	case err != nil || e.Key != key || e.Class != cache.Final:
		w.removeKey(k)
	case !e.UsableOnError(w.now):
		w.removeKey(k)
		w.expired++
	}
}

// sweep removes entries past their lifetime from the oldest on, stopping
// at the first one still usable. Final entries all live about as long, so
// that is nearly all of them; one kept longer by a longer TTL waits for
// eviction or a Get.
func (w *txn) sweep() {
	c := w.o.Cursor()
	for range sweepMax {
		k, v := c.First()
		if k == nil {
			return
		}
		if _, err := decodeIndex(v, &w.scratch); err == nil && w.scratch.UsableOnError(w.now) {
			return
		}
		w.removeIndexed(k, v)
		w.expired++
	}
}

// evict removes the oldest entries until the totals are within the limit
// (MaxBytes unless a write failed).
func (w *txn) evict() {
	for w.bytes > w.s.limit {
		k, v := w.o.Cursor().First()
		if k == nil {
			w.bytes, w.entries = 0, 0 // nothing is left to count
			return
		}
		w.removeIndexed(k, v)
		w.evictions++
	}
}

// deleteMatching removes the entries match selects, and corrupt index
// records (an entry that cannot be judged is not kept). The keys are
// gathered first: bbolt's cursor is not moved safely across deletions.
func (w *txn) deleteMatching(match func(*cache.Entry) bool) int {
	var hit [][]byte
	n := 0
	c := w.o.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if _, err := decodeIndex(v, &w.scratch); err != nil || match(&w.scratch) {
			hit = append(hit, append([]byte(nil), k...))
			if err == nil {
				n++
			}
		}
	}
	for _, k := range hit {
		if v := w.o.Get(k); v != nil {
			w.removeIndexed(k, v)
		}
	}
	w.deleted += int64(n)
	return n
}

// count sets the totals from the index records, removing corrupt ones.
func (w *txn) count() {
	w.bytes, w.entries = 0, 0
	var bad [][]byte
	c := w.o.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		cost, err := decodeIndex(v, &w.scratch)
		if err != nil {
			bad = append(bad, append([]byte(nil), k...))
			continue
		}
		w.bytes += cost
		w.entries++
	}
	for _, k := range bad {
		okey := k
		if rec := w.e.Get(okey[8:]); rec != nil {
			if stored, ok := storedOf(rec); ok && stored == int64(binary.BigEndian.Uint64(okey)) {
				w.e.Delete(okey[8:])
			}
		}
		w.o.Delete(okey)
		w.corrupt++
	}
	w.recount = false
}

// The totals record (bucket "m") holds bytes and entries as the last
// commit left them, with their xxhash64, so that Open need not read every
// index record. One that is missing or does not check out is counted again.
func (w *txn) saveTotals() error {
	b := binary.BigEndian.AppendUint64(nil, uint64(w.bytes))
	b = binary.BigEndian.AppendUint64(b, uint64(w.entries))
	b = binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
	return w.tx.Bucket(bucketMeta).Put(keyTotals, b)
}

// load reads the totals at Open, counting them again when they do not
// check out.
func (s *Store) load() error {
	ok := false
	err := s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			s.finals.kept = loadFinals(tx)
			b := tx.Bucket(bucketMeta).Get(keyTotals)
			if len(b) == 24 && xxhash.Sum64(b[:16]) == binary.BigEndian.Uint64(b[16:]) {
				s.bytes.Store(int64(binary.BigEndian.Uint64(b)))
				s.entries.Store(int64(binary.BigEndian.Uint64(b[8:])))
				ok = true
			}
			return nil
		})
	})
	if err != nil || ok {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.update(func(w *txn) error {
		w.recount = true
		return nil
	})
}
