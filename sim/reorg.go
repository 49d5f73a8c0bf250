package sim

import (
	"math/rand/v2"
	"sync/atomic"
)

// A reorganization replaces the newest blocks of a chain with others (the
// reorg fault): from its first height up, every block is on a new branch,
// the blocks produced after it too. A branch is a key: the block's hash,
// its transactions (how many, which, their hashes) and its internal
// transactions are drawn from it, so the transactions of the replaced
// blocks are dropped (their hashes no longer resolve) and others take
// their places. Heights below the reorg keep the chain's own key.

// fork is one reorganization: from height from up, the branch key.
type fork struct {
	from int64
	key  uint64
}

// forks are a chain's reorganizations, oldest first; replaced whole.
type forks = atomic.Pointer[[]fork]

// bkey is the key of the branch height h is on now: that of the newest
// reorganization at or below h, else the chain's own.
func (c *chain) bkey(h int64) uint64 {
	if p := c.forks.Load(); p != nil {
		fs := *p
		for i := len(fs) - 1; i >= 0; i-- {
			if fs[i].from <= h {
				return fs[i].key
			}
		}
	}
	return c.key
}

// keys are every branch key a hash of this chain may be sealed with.
func (c *chain) keys() []uint64 {
	out := []uint64{c.key}
	if p := c.forks.Load(); p != nil {
		for _, f := range *p {
			out = append(out, f.key)
		}
	}
	return out
}

// reorg replaces the newest n blocks (up to head) with a new branch.
func (c *chain) reorg(head int64, n int) {
	old := c.forks.Load()
	var fs []fork
	if old != nil {
		fs = append(fs, *old...)
	}
	fs = append(fs, fork{from: max(head-int64(n)+1, 0), key: mix(c.key ^ rand.Uint64())})
	c.forks.Store(&fs)
}

// Reorg replaces the newest n blocks of every chain with others, now.
// n <= 0 does nothing.
func (s *Server) Reorg(n int) {
	if n <= 0 {
		return
	}
	now := s.cfg.Now()
	for _, c := range s.chains {
		head := c.head(now, s.cfg.BlockInterval)
		c.reorg(head, n)
		s.log.Info("chain reorganized", "chain", c.short, "depth", n, "from", max(head-int64(n)+1, 0), "head", head)
	}
}
