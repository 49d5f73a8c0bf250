package proxy

import (
	"context"
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
	if background && b.l.TokensAt(now) < max(1, float64(b.l.Burst())/4) {
		return false, time.Second
	}
	if wait <= 0 || background {
		if b.l.AllowN(now, 1) {
			return true, 0
		}
		return false, untilToken(b.l, now)
	}
	// Wait reserves only a token due within the deadline; otherwise it
	// takes nothing. (Reserve-then-cancel can hand out more than the rate.)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := b.l.Wait(ctx); err != nil {
		return false, untilToken(b.l, time.Now())
	}
	return true, 0
}

func (b *localBudget) Tokens() float64 { return b.l.Tokens() }

func (b *localBudget) SetRate(perSecond float64, burst int) {
	b.l.SetLimit(rate.Limit(perSecond))
	b.l.SetBurst(burst)
}
