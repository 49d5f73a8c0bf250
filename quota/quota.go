// Package quota is the edge's one local token bucket of upstream calls: the
// single node's whole budget, and a fleet node's share while Redis is away.
// It is golang.org/x/time/rate's Limiter with one policy on top, the same
// for both: a reservation is never cancelled. x/time/rate's cancel gives
// tokens back only approximately and can hand out more than the rate
// (Limiter.Wait cancels too when its context ends before the timer fires),
// so the bucket checks the delay first and reserves only a token it will
// use, under a lock so that the check and the reservation agree.
package quota

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bucket is a token bucket of perSecond tokens and burst, safe for
// concurrent use.
type Bucket struct {
	mu sync.Mutex
	l  *rate.Limiter
}

// New returns a full bucket.
func New(perSecond float64, burst int) *Bucket {
	return &Bucket{l: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// Take draws a token, sleeping at most wait for one that is due. A
// background caller takes only while a quarter of the burst is left (the
// rest is for client misses) and never waits. When it fails, the duration
// says when a token is due.
func (b *Bucket) Take(wait time.Duration, background bool) (bool, time.Duration) {
	b.mu.Lock()
	now := time.Now()
	tokens := b.l.TokensAt(now)
	if background && tokens < max(1, float64(b.l.Burst())/4) {
		b.mu.Unlock()
		return false, time.Second
	}
	due := time.Duration(0)
	if tokens < 1 {
		due = time.Second
		if lim := float64(b.l.Limit()); lim > 0 {
			due = time.Duration((1 - tokens) / lim * float64(time.Second))
		}
	}
	if due > wait || (due > 0 && background) {
		b.mu.Unlock()
		return false, due
	}
	r := b.l.ReserveN(now, 1)
	b.mu.Unlock()
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		time.Sleep(d)
	}
	return true, 0
}

// Spend takes a token if one is there, without waiting: a fleet node keeps
// its share spent in step with what it takes from the shared bucket.
func (b *Bucket) Spend() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.l.AllowN(time.Now(), 1)
}

// Tokens is what the bucket holds now.
func (b *Bucket) Tokens() float64 { return b.l.Tokens() }

// SetRate changes the rate and burst; tokens held are kept.
func (b *Bucket) SetRate(perSecond float64, burst int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.SetLimit(rate.Limit(perSecond))
	b.l.SetBurst(burst)
}
