package upstream

import (
	"time"

	"explorer-edge/quota"
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

// NewLocalBudget is the single node's budget: the edge's one local bucket
// (package quota).
func NewLocalBudget(perSecond float64, burst int) Budget { return quota.New(perSecond, burst) }
