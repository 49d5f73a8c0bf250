package upstream

import (
	"context"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// ByteGate bounds the bytes of upstream answers being read, decoded and
// compressed at once. Each whole-key fetch reserves what its route's
// answers have weighed lately before it calls the upstream, and gives it
// back once its answer is stored: the upstream's body, the decoded copy
// and the compression buffer are garbage then. A route of 10 KB answers
// is never held back; one of 8 MB answers runs a few at a time, so a burst
// of misses cannot hold dozens of them at once (bench/membound: the peak
// RSS with 8 MB answers at full budget varied from 431 to 466 MiB against
// the bound of 448 without this gate).
//
// The capacity is split in two lanes, each first come first served, whose
// sizes add up to it: the sum of what is reserved stays within capacity,
// the bound it always was. A small fetch (its route's answers at most
// smallMax lately: 128 KiB at the default max_bytes) goes in the small
// lane, or in room of the large lane that no large fetch is queued for,
// and otherwise waits only behind other small ones: one semaphore, first
// come first served, kept a 9 KB miss 7.75 s behind a dozen 7.5 MB ones on
// another route. The small lane is a 32nd of the capacity, at
// least 16 fetches at the floor and at most half: at the default 32 MiB
// it is 1 MiB, and the large lane still holds four 8 MB answers at once,
// as the single semaphore did (make bench-memory).
//
// No fetch waits longer than it is allowed (acquire's wait: budget_wait,
// none for one with a stale copy or a background refresh); then it is
// refused like a fetch the budget refused (ErrBytes).
type ByteGate struct {
	large, small *semaphore.Weighted
	capacity     int64                     // of both lanes
	largeCap     int64                     // the most one fetch reserves
	smallMax     int64                     // the most a fetch of the small lane reserves
	floor        int64                     // the least a fetch reserves
	weight       [route.Count]atomic.Int64 // recent answer bytes per route
}

// Reservation is what a fetch holds of one lane; the zero value holds
// nothing.
type Reservation struct {
	sem *semaphore.Weighted
	id  route.ID
	n   int64
}

// NewByteGate allows capacity bytes at once. Until a route's first answer
// a fetch on it reserves the floor: cold misses at start are not held back
// (an empty cache has the room), and a failing upstream, whose calls
// answer nothing, does not make misses queue.
func NewByteGate(capacity int64) *ByteGate {
	const floor = 64 << 10
	smallCap := min(max(capacity/32, 16*floor), capacity/2)
	return &ByteGate{
		large:    semaphore.NewWeighted(capacity - smallCap),
		small:    semaphore.NewWeighted(smallCap),
		capacity: capacity,
		largeCap: capacity - smallCap,
		smallMax: min(max(floor, smallCap/8), smallCap),
		floor:    floor,
	}
}

// acquire reserves route id's weight, waiting at most wait; ok is false
// when the wait ran out (at once for a wait of 0).
func (f *ByteGate) acquire(id route.ID, wait time.Duration) (r Reservation, ok bool) {
	w := max(f.weight[id].Load(), f.floor)
	if w <= f.smallMax {
		// Room in the large lane goes to a small fetch only while no large
		// one waits for it: TryAcquire fails behind a waiter.
		if f.small.TryAcquire(w) {
			return Reservation{f.small, id, w}, true
		}
		if f.large.TryAcquire(w) {
			return Reservation{f.large, id, w}, true
		}
		return f.wait(f.small, id, w, wait)
	}
	return f.wait(f.large, id, min(w, f.largeCap), wait)
}

// wait reserves n of sem, waiting at most d.
func (f *ByteGate) wait(sem *semaphore.Weighted, id route.ID, n int64, d time.Duration) (Reservation, bool) {
	if sem.TryAcquire(n) {
		return Reservation{sem, id, n}, true
	}
	if d <= 0 {
		return Reservation{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if sem.Acquire(ctx, n) != nil {
		return Reservation{}, false
	}
	return Reservation{sem, id, n}, true
}

// release gives r back and learns its route's answer size: the larger of
// the answer and a moving average, so a route of mixed sizes reserves for
// its large answers. A zero Reservation gives back nothing.
func (f *ByteGate) release(r Reservation, answered int) {
	if r.sem == nil {
		return
	}
	r.sem.Release(r.n)
	if answered <= 0 {
		return
	}
	n := int64(answered)
	for {
		old := f.weight[r.id].Load()
		next := max(n, old-old/8+n/8)
		if f.weight[r.id].CompareAndSwap(old, next) {
			return
		}
	}
}

// ErrBytes refuses a fetch that found no room for its answer within its
// wait, as envelope.ErrBudget refuses one that found no token: 503, 50001, with a
// Retry-After.
var ErrBytes = &envelope.Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: too many large answers being fetched", RetryAfter: 1, Kind: envelope.KindBytes}

// Reserve takes room for f's answer, waiting as long as the budget lets a
// miss wait for a token (upstream.budget_wait; not at all with a stale copy
// to serve or for a background refresh), or refuses it: counted in
// upstream_throttled_total{source="bytes"}.
func (pl *Pool) Reserve(f *Request) (Reservation, error) {
	wait := pl.cfg().BudgetWait
	if f.HaveStale || f.Background {
		wait = 0
	}
	r, ok := pl.bytes.acquire(f.Route.ID, wait)
	if !ok {
		pl.m.Throttled.WithLabelValues("bytes").Inc()
		return r, ErrBytes.With(nil, 0)
	}
	return r, nil
}

// Release gives r back once f's answer of n bytes is stored (0: none).
func (pl *Pool) Release(r Reservation, n int) { pl.bytes.release(r, n) }
