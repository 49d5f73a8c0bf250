package purge

import (
	"sync"
	"sync/atomic"

	"explorer-edge/cache"
)

// A purge removes what the cache holds when it runs, but an answer can be
// on its way then: fetched before the purge, stored after it (a refresh, a
// miss waiting for the upstream). The purge log keeps recent purges with
// their times, and an entry whose answer is older than a purge that
// selects it is judged by it as it is stored: dropped (hard) or stored
// stale (soft). In fleet mode the log also judges entries read from the
// shared tier, which other nodes may have stored before the purge.

// record is one purge: when it ran (unix ns) and what it selected.
type record struct {
	at  int64
	sel *Selector
}

// Log holds recent purges, oldest first. Readers load the slice
// without a lock; writers replace it.
type Log struct {
	mu   sync.Mutex
	recs atomic.Pointer[[]record]
	// floor: an entry whose answer is older than this is purged (hard),
	// whatever it is: the higher of trimmed and shared.
	floor atomic.Int64
	// trimmed rises when this log drops records for room; shared is the
	// fleet's floor as Redis last said it, and follows it down as well as
	// up (a floor deleted or expired in Redis holds nothing back any
	// more); refused is the last one refused as from the future. Under mu.
	trimmed, shared, refused int64
}

// maxRecords bounds the log. Beyond it the oldest records go and the
// floor rises to the newest of them: entries older than it are treated as
// purged, which costs refetches, never a purged answer.
const maxRecords = 10_000

// add appends r and drops records older than since (unix ns).
func (l *Log) add(r record, since int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var old []record
	if p := l.recs.Load(); p != nil {
		old = *p
	}
	i := 0
	for i < len(old) && old[i].at < since {
		i++
	}
	if n := len(old) - i + 1; n > maxRecords {
		drop := n - maxRecords
		l.trimmed = max(l.trimmed, old[i+drop-1].at)
		l.floor.Store(max(l.trimmed, l.shared))
		i += drop
	}
	recs := make([]record, 0, len(old)-i+1)
	recs = append(recs, old[i:]...)
	// Keep the order by time: a record from another node may be older
	// than the newest one here.
	j := len(recs)
	for j > 0 && recs[j-1].at > r.at {
		j--
	}
	recs = append(recs, record{})
	copy(recs[j+1:], recs[j:])
	recs[j] = r
	l.recs.Store(&recs)
}

// sharedFloor takes the fleet's floor as Redis says it (0: none).
func (l *Log) sharedFloor(at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shared = at
	l.floor.Store(max(l.trimmed, l.shared))
}

// refuseFloor notes a floor refused (as from the future) and reports
// whether it is another one than the last: each is said once, not at
// every poll.
func (l *Log) refuseFloor(at int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at == l.refused {
		return false
	}
	l.refused = at
	return true
}

// after reports whether a purge may have selected an answer fetched at
// stored (unix ns): the floor is above it or a record is newer. One load
// and a compare or two: the common case, no purge since, costs nothing.
func (l *Log) after(stored int64) bool {
	if stored < l.floor.Load() {
		return true
	}
	p := l.recs.Load()
	return p != nil && len(*p) > 0 && (*p)[len(*p)-1].at > stored
}

// verdict judges e by the purges that ran after its answer was fetched
// and not before since (unix ns): drop for a hard one, else the earliest
// time a soft one made it stale (0: none).
func (l *Log) verdict(e *cache.Entry, since int64) (drop bool, staleFrom int64) {
	if e.Stored < l.floor.Load() {
		return true, 0
	}
	p := l.recs.Load()
	if p == nil {
		return false, 0
	}
	recs := *p
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.at <= e.Stored || r.at < since {
			break // older purges cannot have missed this answer
		}
		if !r.sel.match(e) {
			continue
		}
		if !r.sel.soft {
			return true, 0
		}
		staleFrom = r.at
	}
	return false, staleFrom
}
