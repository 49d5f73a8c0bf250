// Package truth holds what the edge believes about each chain it serves:
// the newest head it has seen (height, hash, when asked), the finalized
// height, the hashes of the recent heights, and the reorganizations found
// in them. It is fed explicitly by the request path with the blocks of
// every answer that shows them (block lists from the upstream or the
// shared tier), and answers with a verdict the request path acts on: a
// reorganization to purge, a fork point still to find below, or an answer
// behind the newest head (from an account that lags) that must not be
// served or stored as the head.
//
// Invariants, per chain:
//   - the head never goes back: an answer whose newest block is below the
//     head seen is "behind" and changes nothing;
//   - the finalized height never goes back;
//   - a reorganization is reported once, with the height where the
//     branches fork (the lowest height whose hash changed, with the height
//     below it known to agree, or nothing known below it) and its depth
//     (the old head less the fork, plus one);
//   - an answer asked before the one that last set a height's hash tells
//     nothing new about that height.
//
// It does no I/O: asking the upstream further back (a probe) is the
// caller's, which then observes the probe's answer like any other.
package truth

import (
	"sync"
	"sync/atomic"
)

// Recent is how many heights per chain a hash is remembered for.
const Recent = 1024

// Block is a block as an answer shows it.
type Block struct {
	Height int64
	Hash   string
	Done   bool // the upstream says it is final
}

// Reorg is one reorganization.
type Reorg struct {
	Chain   string
	Fork    int64  // the lowest height replaced: the first block of the new branch
	Depth   int64  // blocks replaced: the head before it, less Fork, plus one
	Deep    bool   // a replaced block had been called done: finality was wrong
	NewHash string // the new branch's block at Fork
	At      int64  // unix ns: when the answer that first showed it was asked
}

// Verdict is what an observed answer means.
type Verdict struct {
	// Reorg is a reorganization found to its fork point: purge from
	// Reorg.Fork, count and log it once.
	Reorg *Reorg
	// Partial is a reorganization whose fork lies lower than the answer
	// shows (every block it compared differed): purge from Partial.Fork at
	// once, then ask a block list ending at ProbeBelow and observe it; the
	// reorganization is reported (Reorg) when that finds the fork.
	Partial    *Reorg
	ProbeBelow int64
	// Behind is how many blocks the newest block of a head answer is below
	// the newest head seen; such an answer changed nothing.
	Behind int64
}

type seen struct {
	height int64
	hash   string
	asked  int64
	done   bool
}

// pending is a reorganization whose fork is not found yet.
type pending struct {
	low     int64 // lowest height found replaced so far
	newHash string
	oldHead int64
	deep    bool
	at      int64
}

type chainState struct {
	name  string
	mu    sync.Mutex
	ring  [Recent]seen
	head  seen
	open  *pending
	final atomic.Int64
}

// Chains is the truth of every chain served. Create it with New.
type Chains struct {
	by map[string]*chainState
}

// New makes the truth of chains (canonical, upper-case names).
func New(chains []string) *Chains {
	c := &Chains{by: make(map[string]*chainState, len(chains))}
	for _, n := range chains {
		c.by[n] = &chainState{name: n}
	}
	return c
}

// Final is the finalized height of chain: the highest block seen done (0:
// none yet, or a chain not served).
func (c *Chains) Final(chain string) int64 {
	if s := c.by[chain]; s != nil {
		return s.final.Load()
	}
	return 0
}

// Head is the newest head seen on chain (height 0: none yet) and when the
// answer showing it was asked (unix ns).
func (c *Chains) Head(chain string) (height int64, hash string, asked int64) {
	s := c.by[chain]
	if s == nil {
		return 0, "", 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head.height, s.head.hash, s.head.asked
}

// Hash is the hash last seen at height on chain, "" when none is known.
func (c *Chains) Hash(chain string, height int64) string {
	s := c.by[chain]
	if s == nil || height < 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.ring[height%Recent]; r.height == height {
		return r.hash
	}
	return ""
}

// RaiseFinal raises chain's finalized height to h (never lowers it), for
// a finalized height learned other than from blocks (the fleet's). It
// reports whether it rose.
func (c *Chains) RaiseFinal(chain string, h int64) bool {
	s := c.by[chain]
	if s == nil {
		return false
	}
	return s.raiseFinal(h)
}

func (s *chainState) raiseFinal(h int64) bool {
	for {
		cur := s.final.Load()
		if h <= cur {
			return false
		}
		if s.final.CompareAndSwap(cur, h) {
			return true
		}
	}
}

// Observe takes the blocks of an answer asked at asked (unix ns). head
// says the answer is the chain's newest page (a block list asked without
// a height, its first page): its newest block is the upstream's head.
func (c *Chains) Observe(chain string, blocks []Block, asked int64, head bool) Verdict {
	s := c.by[chain]
	if s == nil || len(blocks) == 0 {
		return Verdict{}
	}
	top, bottom := blocks[0].Height, blocks[0].Height
	for _, b := range blocks[1:] {
		top, bottom = max(top, b.Height), min(bottom, b.Height)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if head && top < s.head.height {
		return Verdict{Behind: s.head.height - top}
	}
	oldHead := s.head.height
	// Compare, then remember.
	low, lowHash, deep := int64(-1), "", false
	for _, b := range blocks {
		if b.Height < 0 || b.Hash == "" {
			continue
		}
		r := &s.ring[b.Height%Recent]
		switch {
		case r.height > b.Height: // a newer height holds the slot
			continue
		case r.height < b.Height || r.hash == "":
			*r = seen{b.Height, b.Hash, asked, b.Done}
		case asked < r.asked: // an older answer: nothing new
		case r.hash != b.Hash:
			if low < 0 || b.Height < low {
				low, lowHash = b.Height, b.Hash
			}
			deep = deep || r.done
			*r = seen{b.Height, b.Hash, asked, b.Done}
		default:
			r.asked, r.done = max(r.asked, asked), r.done || b.Done
		}
		if b.Done && b.Height > 0 {
			s.raiseFinal(b.Height)
		}
	}
	if head && top >= s.head.height {
		for _, b := range blocks {
			if b.Height == top {
				s.head = seen{top, b.Hash, asked, b.Done}
			}
		}
	}
	if low < 0 && s.open == nil {
		return Verdict{}
	}
	p := &pending{low: low, newHash: lowHash, oldHead: oldHead, deep: deep, at: asked}
	if s.open != nil {
		// A reorganization whose fork is still to be found: this answer
		// (a probe, or any list reaching that low) continues the search.
		p = s.open
		if low < 0 && bottom >= p.low {
			return Verdict{} // nothing new
		}
		if low >= 0 && low < p.low {
			p.low, p.newHash = low, lowHash
		}
		p.deep = p.deep || deep
	}
	// The fork is at p.low when the height below it is in this answer (it
	// agreed, or was not known: had it changed, p.low would be lower), or
	// was never seen. Else it may be lower still: ask below.
	below := s.ring[(p.low-1+Recent)%Recent]
	if bottom >= p.low && p.low > 0 && below.height == p.low-1 && below.hash != "" {
		s.open = p
		return Verdict{Partial: s.reorg(p), ProbeBelow: p.low - 1}
	}
	s.open = nil
	return Verdict{Reorg: s.reorg(p)}
}

// GiveUp ends the search for an open reorganization's fork on chain (a
// probe could not be made): it is reported with the lowest height found
// replaced. nil when none is open.
func (c *Chains) GiveUp(chain string) *Reorg {
	s := c.by[chain]
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		return nil
	}
	r := s.reorg(s.open)
	s.open = nil
	return r
}

func (s *chainState) reorg(p *pending) *Reorg {
	return &Reorg{Chain: s.name, Fork: p.low, Depth: max(p.oldHead-p.low+1, 1), Deep: p.deep, NewHash: p.newHash, At: p.at}
}
