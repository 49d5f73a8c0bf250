package proxy

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Budget is the upstream quota. The local one is a token bucket of
// golang.org/x/time/rate; fleet mode shares one in Redis.
type Budget interface {
	// Take draws a token, waiting at most wait. Background callers take
	// only while the bucket is well above empty, leaving the rest to
	// client misses. When it fails, retryAfter says when a token is due.
	Take(wait time.Duration, background bool) (ok bool, retryAfter time.Duration)
	Tokens() float64
	SetRate(perSecond float64, burst int)
}

// localBudget never cancels a reservation: x/time/rate's cancel restores
// tokens approximately and can hand out more than the rate (Limiter.Wait
// cancels too when its context ends before the timer fires). It checks the
// delay first and reserves only a token it will use, under mu so that the
// check and the reservation agree.
type localBudget struct {
	mu sync.Mutex
	l  *rate.Limiter
}

func newLocalBudget(perSecond float64, burst int) *localBudget {
	return &localBudget{l: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

func (b *localBudget) Take(wait time.Duration, background bool) (bool, time.Duration) {
	b.mu.Lock()
	now := time.Now()
	tokens := b.l.TokensAt(now)
	if background && tokens < max(1, float64(b.l.Burst())/4) {
		b.mu.Unlock()
		return false, time.Second
	}
	due := untilToken(b.l, now)
	if tokens >= 1 {
		due = 0
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

func (b *localBudget) Tokens() float64 { return b.l.Tokens() }

func (b *localBudget) SetRate(perSecond float64, burst int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.SetLimit(rate.Limit(perSecond))
	b.l.SetBurst(burst)
}
