package proxy

import (
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

type localBudget struct{ l *rate.Limiter }

func newLocalBudget(perSecond float64, burst int) *localBudget {
	return &localBudget{l: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

func (b *localBudget) Take(wait time.Duration, background bool) (bool, time.Duration) {
	now := time.Now()
	if background {
		if b.l.TokensAt(now) < max(1, float64(b.l.Burst())/4) {
			return false, time.Second
		}
		return b.l.AllowN(now, 1), 0
	}
	r := b.l.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	d := r.DelayFrom(now)
	if d > wait {
		r.CancelAt(now)
		return false, d
	}
	if d > 0 {
		time.Sleep(d)
	}
	return true, 0
}

func (b *localBudget) Tokens() float64 { return b.l.Tokens() }

func (b *localBudget) SetRate(perSecond float64, burst int) {
	b.l.SetLimit(rate.Limit(perSecond))
	b.l.SetBurst(burst)
}
