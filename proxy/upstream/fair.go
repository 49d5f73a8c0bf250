package upstream

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	"explorer-edge/metrics"
)

// fairQueue admits misses that wait for the upstream budget in weighted
// fair order among the clients waiting (start-time fair queueing): each
// waiter gets a start tag, max(the queue's virtual time, the finish tag of
// its client's previous waiter), and its client's finish tag moves on by
// 1/share. Tokens go to the waiter with the smallest start tag, so a
// client with many misses queued waits behind its own queue while a quiet
// client's next miss goes near the front. A client alone takes every token
// (the queue is work-conserving), and a miss that finds no one waiting and
// a token due now goes straight through.
//
// The queue knows the budget only through try, a non-blocking take from
// the best account with a token (pool.go), which says when a token is due
// if none is. One goroutine, running only while
// someone waits, takes tokens for the head of the queue.
type fairQueue struct {
	mu     sync.Mutex
	vtime  float64 // start tag of the waiter served last
	finish map[*Tenant]float64
	queue  waiters
	// refreshes wait here, in arrival order, and get the next tokens
	// before any miss in queue (takeRefresh).
	refreshes []*waiter
	running   bool // the dispatcher goroutine is up
	try       func(background bool, avoid *account) (*account, time.Duration)
	maxSleep  time.Duration // longest the dispatcher sleeps before trying again
}

// Tenant is who a miss is charged to: a configured client, or the one
// anonymous pool. Its share weighs it against the others waiting.
type Tenant struct {
	Name  string
	Share float64
	Acct  *metrics.ClientAccount
}

// unattributed is the tenant of a fetch no request of a client made
// (none today outside tests); it has no series.
var unattributed = &Tenant{Name: "unattributed", Share: 1}

type waiter struct {
	t     *Tenant
	start float64
	seq   uint64   // arrival order among equal tags
	index int      // in the heap; -1 once out of it
	avoid *account // an account the waiter's last attempt failed on
	got   *account // the account whose token it was given
	ready chan struct{}
}

type waiters struct {
	w   []*waiter
	seq uint64
}

func (q waiters) Len() int { return len(q.w) }
func (q waiters) Less(i, j int) bool {
	if q.w[i].start != q.w[j].start {
		return q.w[i].start < q.w[j].start
	}
	return q.w[i].seq < q.w[j].seq
}
func (q waiters) Swap(i, j int) {
	q.w[i], q.w[j] = q.w[j], q.w[i]
	q.w[i].index, q.w[j].index = i, j
}
func (q *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(q.w)
	q.w = append(q.w, w)
}
func (q *waiters) Pop() any {
	n := len(q.w) - 1
	w := q.w[n]
	q.w[n] = nil
	q.w = q.w[:n]
	w.index = -1
	return w
}

func newFairQueue(try func(background bool, avoid *account) (*account, time.Duration)) *fairQueue {
	return &fairQueue{finish: map[*Tenant]float64{}, try: try, maxSleep: 50 * time.Millisecond}
}

// take draws a token for t, waiting at most wait in fair order. With wait
// 0 (a caller with a stale copy) or background (a refresh, which takes
// only while the budget is well above empty) it never queues,
// and takes nothing while others wait: they are owed the next tokens.
func (g *fairQueue) take(t *Tenant, wait time.Duration, background bool, avoid *account) (*account, time.Duration) {
	if background {
		wait = 0
	}
	g.mu.Lock()
	if len(g.queue.w) == 0 && len(g.refreshes) == 0 {
		g.mu.Unlock()
		u, due := g.try(background, avoid)
		if u != nil || wait <= 0 || due > wait {
			return u, due
		}
		g.mu.Lock()
	} else if wait <= 0 {
		g.mu.Unlock()
		return nil, g.maxSleep
	}
	w := g.enqueue(t)
	w.avoid = avoid
	return g.await(w, wait, func() {
		heap.Remove(&g.queue, w.index)
		// Its place is given back: the client is not charged for a miss
		// that never went.
		if f := g.finish[t]; f == w.start+1/t.Share {
			g.finish[t] = w.start
		}
		g.forget()
	})
}

// takeRefresh draws a token for the refresh of a key clients are being
// served from (a background refresh, or a request holding a copy past its
// stale-while-revalidate window), waiting at most wait ahead of every
// miss: however many misses queue, the copies clients see keep being
// renewed, and the newest page does not freeze. Pool.take bounds how many
// refreshes take this way (a share of the budget).
func (g *fairQueue) takeRefresh(wait time.Duration, avoid *account) (*account, time.Duration) {
	g.mu.Lock()
	if len(g.queue.w) == 0 && len(g.refreshes) == 0 {
		g.mu.Unlock()
		u, due := g.try(false, avoid)
		if u != nil || wait <= 0 || due > wait {
			return u, due
		}
		g.mu.Lock()
	}
	w := &waiter{index: -1, avoid: avoid, ready: make(chan struct{})}
	g.refreshes = append(g.refreshes, w)
	return g.await(w, wait, func() {
		if i := slices.Index(g.refreshes, w); i >= 0 {
			g.refreshes = slices.Delete(g.refreshes, i, i+1)
		}
	})
}

// await waits at most wait for the token of w, just put in a line; g.mu
// is held, and released. When the time runs out first, leave takes w out
// of its line, under g.mu, unless the token came as it ran out.
func (g *fairQueue) await(w *waiter, wait time.Duration, leave func()) (*account, time.Duration) {
	if !g.running {
		g.running = true
		go g.dispatch()
	}
	g.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return w.got, 0
	case <-timer.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.got != nil { // the token came as the time ran out: use it
		return w.got, 0
	}
	leave()
	return nil, wait
}

// enqueue tags a waiter of t; g.mu is held.
func (g *fairQueue) enqueue(t *Tenant) *waiter {
	start := max(g.vtime, g.finish[t])
	g.finish[t] = start + 1/t.Share
	g.queue.seq++
	w := &waiter{t: t, start: start, seq: g.queue.seq, ready: make(chan struct{})}
	heap.Push(&g.queue, w)
	return w
}

// forget drops the finish tags of clients that no longer wait once no one
// does, so the map holds only the clients of the current contention;
// g.mu is held.
func (g *fairQueue) forget() {
	if len(g.queue.w) == 0 {
		clear(g.finish)
	}
}

// dispatch takes tokens for the head of the queue until it is empty.
func (g *fairQueue) dispatch() {
	for {
		g.mu.Lock()
		if len(g.queue.w) == 0 && len(g.refreshes) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		var head *waiter
		if len(g.refreshes) > 0 {
			head = g.refreshes[0]
		} else {
			head = g.queue.w[0]
		}
		g.mu.Unlock()
		u, due := g.try(false, head.avoid)
		g.mu.Lock()
		if u != nil && len(g.refreshes) > 0 {
			// Refreshes first, in arrival order.
			w := g.refreshes[0]
			g.refreshes = g.refreshes[1:]
			w.got = u
			close(w.ready)
			g.mu.Unlock()
			continue
		}
		if u != nil {
			if len(g.queue.w) == 0 {
				// Every waiter left while the token was taken: it is
				// spent, as any token a caller gave up on.
				g.running = false
				g.mu.Unlock()
				return
			}
			// The token goes to whoever heads the queue now (a waiter
			// may have come before the one it was taken for).
			w := heap.Pop(&g.queue).(*waiter)
			g.vtime = w.start
			w.got = u
			close(w.ready)
			g.forget()
			g.mu.Unlock()
			continue
		}
		g.mu.Unlock()
		time.Sleep(min(max(due, time.Millisecond), g.maxSleep))
	}
}

// waiting reports how many misses wait, for tests and the gauge.
func (g *fairQueue) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue.w)
}
