package proxy

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// inflight bounds the bytes of upstream answers being read, decoded and
// compressed at once. Each whole-key fetch reserves what its route's
// answers have weighed lately before it calls the upstream, and gives it
// back once its answer is stored: the upstream's body, the decoded copy
// and the compression buffer are garbage then. A route of 10 KB answers
// is never held back; one of 8 MB answers runs a few at a time, so a burst
// of misses cannot hold dozens of them at once (bench/membound: the peak
// RSS with 8 MB answers at full budget varied from 431 to 466 MiB against
// the bound of 448 without this gate).
type inflight struct {
	sem      *semaphore.Weighted
	capacity int64
	floor    int64                   // the least a fetch reserves
	weight   [numRoutes]atomic.Int64 // recent answer bytes per route
}

// newInflight allows capacity bytes at once. Until a route's first answer
// a fetch on it reserves the floor: cold misses at start are not held back
// (an empty cache has the room), and a failing upstream, whose calls
// answer nothing, does not make misses queue.
func newInflight(capacity int64) *inflight {
	return &inflight{sem: semaphore.NewWeighted(capacity), capacity: capacity, floor: 64 << 10}
}

// acquire reserves route id's weight and returns what to release.
func (f *inflight) acquire(id routeID) int64 {
	w := min(max(f.weight[id].Load(), f.floor), f.capacity)
	f.sem.Acquire(context.Background(), w) // no error without a deadline
	return w
}

// release gives back w and learns the route's answer size: the larger of
// the answer and a moving average, so a route of mixed sizes reserves for
// its large answers.
func (f *inflight) release(id routeID, w int64, answered int) {
	f.sem.Release(w)
	if answered <= 0 {
		return
	}
	n := int64(answered)
	for {
		old := f.weight[id].Load()
		next := max(n, old-old/8+n/8)
		if f.weight[id].CompareAndSwap(old, next) {
			return
		}
	}
}
