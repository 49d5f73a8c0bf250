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
// Only the upstream is believed. An answer read back from a tier under
// memory (the disk, the fleet's Redis) is read (Read), never observed: it
// may be served when it shows nothing beyond what this node has confirmed
// from the upstream (its newest block at most Slack above the highest
// block of the upstream's answers, no hash that differs from one the
// upstream gave), and even then it never moves the confirmed head, never
// writes a hash, never reports a reorganization, and raises the finalized
// height only to blocks at or below the confirmed height. Anything else is
// Unconfirmed: the caller asks the upstream (docs/design.md, "Chain
// truth"). Whoever can write to Redis or to the disk so costs the node at
// most a confirming call, never a wrong head, finalized height or
// reorganization.
//
// It does no I/O: asking the upstream further back (a probe) or to
// confirm a read is the caller's, which then observes the upstream's
// answer like any other.
package truth

import (
	"sync"
	"sync/atomic"
)

// Recent is how many heights per chain a hash is remembered for.
const Recent = 1024

// Slack is how many blocks the newest block of an answer read from a tier
// may be above the highest block this node has confirmed from the
// upstream and still be served: the head moves on while a node takes
// another node's pages from Redis. Beyond it, the read is Unconfirmed.
// Done marks get no slack: a block above the confirmed height is never
// believed done from a read.
const Slack = 4

// Block is a block as an answer shows it.
type Block struct {
	Height int64
	Hash   string
	Done   bool // the upstream says it is final
	// Stateless: the block carries no state at all (the vendor's v6
	// page: empty where it does not apply), so it cannot say it is
	// final: the chain's finality follows its configured depth
	// (SetDepth).
	Stateless bool
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
	// Unconfirmed (Read only): the answer read from a tier shows a block
	// more than Slack above the confirmed height, or a hash other than
	// the one the upstream gave for its height. It changed nothing and
	// must not be served: the upstream is asked.
	Unconfirmed bool
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
	name string
	mu   sync.Mutex
	ring [Recent]seen // hashes the upstream gave
	// first is, per slot of ring, when its height was first seen (unix
	// ns): a height first seen since a reorganization showed never held a
	// hash of the replaced branch, so it cannot say where the fork is.
	first [Recent]int64
	head  seen // the newest head the upstream gave
	// confirmed is the highest block height of the upstream's answers
	// (or restored, Restore): what a read is measured against.
	confirmed int64
	read      seen // the newest head read from a tier and taken (Read)
	open      *pending
	// reports are the forks and times of the last reorganizations
	// reported here or learned from the fleet (Learn), newest at
	// reports[next-1]: replaced.
	reports [keptReports]report
	next    int
	final   atomic.Int64
	// depth is the configured finality depth (SetDepth; 0: none), source
	// where the finalized height comes from (Source).
	depth     atomic.Int64
	source    atomic.Int32
	confirmAt atomic.Int64 // unix ns of the last confirming call (TryConfirm)
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
// answer showing it was asked (unix ns): the upstream's, or one read from
// a tier and taken (Read) when that is newer.
func (c *Chains) Head(chain string) (height int64, hash string, asked int64) {
	s := c.by[chain]
	if s == nil {
		return 0, "", 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.head
	if s.read.height > h.height || (s.read.height == h.height && s.read.asked > h.asked) {
		h = s.read
	}
	return h.height, h.hash, h.asked
}

// Confirmed is the highest block height on chain the upstream's answers
// showed (or Restore set), and when the newest head the upstream gave was
// asked (unix ns; 0: none yet).
func (c *Chains) Confirmed(chain string) (height, headAsked int64) {
	s := c.by[chain]
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed, s.head.asked
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
// a finalized height learned other than from blocks (another node's,
// through Redis): never above the height this node confirmed from the
// upstream, since whoever writes to Redis could say any height. It
// reports whether it rose.
func (c *Chains) RaiseFinal(chain string, h int64) bool {
	s := c.by[chain]
	if s == nil {
		return false
	}
	s.mu.Lock()
	h = min(h, s.confirmed)
	s.mu.Unlock()
	return s.raiseFinal(h)
}

// Restore sets chain's finalized height and confirmed height to at least
// h: this node's own finalized height, kept across a restart, which it
// confirmed from the upstream before it stopped. Answers read from the
// disk at or below it are then taken before the first upstream answer.
func (c *Chains) Restore(chain string, h int64) {
	s := c.by[chain]
	if s == nil || h <= 0 {
		return
	}
	s.mu.Lock()
	s.confirmed = max(s.confirmed, h)
	s.mu.Unlock()
	s.raiseFinal(h)
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
	top := blocks[0].Height
	for _, b := range blocks[1:] {
		top = max(top, b.Height)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if head && top < s.head.height {
		return Verdict{Behind: s.head.height - top}
	}
	s.confirmed = max(s.confirmed, top)
	oldHead := s.head.height
	// Compare, then remember.
	low, lowHash, deep := int64(-1), "", false
	done, stateless := false, false
	for _, b := range blocks {
		done, stateless = done || b.Done, stateless || b.Stateless
		if b.Height < 0 || b.Hash == "" {
			continue
		}
		r := &s.ring[b.Height%Recent]
		switch {
		case r.height > b.Height: // a newer height holds the slot
			continue
		case r.height < b.Height || r.hash == "":
			*r = seen{b.Height, b.Hash, asked, b.Done}
			s.first[b.Height%Recent] = asked
		case asked < r.asked: // an older answer: nothing new
		case r.hash != b.Hash && s.replaced(b.Height, r.asked):
			// A height the last reorganization replaced, seen again for
			// the first time since: that one, already reported and
			// purged, not another.
			*r = seen{b.Height, b.Hash, asked, b.Done}
		case r.hash != b.Hash:
			if low < 0 || b.Height < low {
				low, lowHash = b.Height, b.Hash
			}
			// Deep: it had been called done, or lay at or below the
			// finalized height (by depth, blocks say nothing).
			deep = deep || r.done || b.Height <= s.final.Load()
			*r = seen{b.Height, b.Hash, asked, b.Done}
		default:
			r.asked, r.done = max(r.asked, asked), r.done || b.Done
		}
		if b.Done && b.Height > 0 {
			s.raiseFinal(b.Height)
		}
	}
	s.finalByDepth(top, done, stateless)
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
	p, lower := &pending{low: low, newHash: lowHash, oldHead: oldHead, deep: deep, at: asked}, true
	if s.open != nil {
		// A reorganization whose fork is still to be found: this answer
		// (a probe, or any list reaching that low) continues the search.
		p, lower = s.open, low >= 0 && low < s.open.low
		if lower {
			p.low, p.newHash = low, lowHash
		}
		p.deep = p.deep || deep
	}
	// The fork is at p.low once the nearest height below it whose hash
	// was known before the reorganization showed is known to agree: this
	// answer, asked since, has that very height (had it changed, p.low
	// would be lower), or there is none (nothing to compare). Heights in
	// between were never seen, or first seen since, with no hash of the
	// replaced branch. An answer that merely reaches lower (one block at a
	// height, a short page) has not looked there. Else the fork may be
	// lower still: ask below.
	kb, looked := s.knownBelow(p), false
	for _, b := range blocks {
		looked = looked || (asked >= p.at && b.Height == kb && b.Hash != "")
	}
	if !looked && kb >= 0 {
		s.open = p
		if !lower {
			return Verdict{} // nothing new
		}
		return Verdict{Partial: s.reorg(p), ProbeBelow: p.low - 1}
	}
	s.open = nil
	return Verdict{Reorg: s.reported(s.reorg(p))}
}

// TryConfirm reports whether the caller may ask the upstream now (unix
// ns) to confirm a read (Unconfirmed): not when the upstream's newest
// head, or another confirming call, is less than every old. So however
// many unconfirmed reads come, a chain costs at most one confirming call
// per every.
func (c *Chains) TryConfirm(chain string, now, every int64) bool {
	s := c.by[chain]
	if s == nil {
		return false
	}
	s.mu.Lock()
	asked := s.head.asked
	s.mu.Unlock()
	if asked > 0 && now-asked < every {
		return false
	}
	for {
		last := s.confirmAt.Load()
		if last > 0 && now-last < every {
			return false
		}
		if s.confirmAt.CompareAndSwap(last, now) {
			return true
		}
	}
}

// Read judges the blocks of an answer read from a tier under memory (the
// disk, the shared tier), stored at asked (unix ns): Behind when it is a
// head answer below the newest head seen (the upstream's or one read
// before), Unconfirmed when its newest block is more than Slack above the
// confirmed height or one of its hashes differs from the upstream's for
// that height. Otherwise it may be served: a head answer becomes the
// newest head read (Head), and its blocks marked done at or below the
// confirmed height raise the finalized height. A read never writes a
// hash, never moves the confirmed height and never reports a
// reorganization: only the upstream's answers do (Observe).
func (c *Chains) Read(chain string, blocks []Block, asked int64, head bool) Verdict {
	return c.read(chain, blocks, asked, head, true)
}

// Judge is Read without its effects: what Read would say now (the admin
// port's GET /cache).
func (c *Chains) Judge(chain string, blocks []Block, head bool) Verdict {
	return c.read(chain, blocks, 0, head, false)
}

func (c *Chains) read(chain string, blocks []Block, asked int64, head, apply bool) Verdict {
	s := c.by[chain]
	if s == nil || len(blocks) == 0 {
		return Verdict{}
	}
	top := blocks[0].Height
	for _, b := range blocks[1:] {
		top = max(top, b.Height)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if newest := max(s.head.height, s.read.height); head && top < newest {
		return Verdict{Behind: newest - top}
	}
	if top > s.confirmed+Slack {
		return Verdict{Unconfirmed: true}
	}
	for _, b := range blocks {
		if b.Height < 0 || b.Hash == "" {
			continue
		}
		if r := s.ring[b.Height%Recent]; r.height == b.Height && r.hash != "" && r.hash != b.Hash {
			return Verdict{Unconfirmed: true}
		}
	}
	if !apply {
		return Verdict{}
	}
	for _, b := range blocks {
		if b.Done && b.Height > 0 && b.Height <= s.confirmed {
			s.raiseFinal(b.Height)
		}
	}
	if head && top >= s.read.height {
		for _, b := range blocks {
			if b.Height == top {
				s.read = seen{top, b.Hash, asked, false}
			}
		}
	}
	return Verdict{}
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
	r := s.reported(s.reorg(s.open))
	s.open = nil
	return r
}

// Open reports whether a reorganization's fork is still to be found on
// chain, and the height an answer must show to find it: the nearest below
// the lowest found replaced whose hash was known before the
// reorganization showed. The search asks the upstream for it
// (proxy/reorg.go) until Observe finds the fork or GiveUp ends it.
func (c *Chains) Open(chain string) (below int64, open bool) {
	s := c.by[chain]
	if s == nil {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		return 0, false
	}
	return s.knownBelow(s.open), true
}

// keptReports is how many reorganizations per chain replaced looks at:
// the one this node reported and the fleet's reports of it (one a node)
// with room to spare.
const keptReports = 8

// report is a reorganization reported or learned: every height from fork
// up, as known before at (unix ns), was replaced.
type report struct{ fork, at int64 }

// reported notes r as the last reorganization reported.
func (s *chainState) reported(r *Reorg) *Reorg {
	s.note(r.Fork, r.At)
	return r
}

func (s *chainState) note(fork, at int64) {
	for i := range s.reports {
		if k := &s.reports[i]; k.at == at && k.at > 0 {
			k.fork = min(k.fork, fork) // the same one again: the lowest fork
			return
		}
	}
	s.reports[s.next%keptReports] = report{fork, at}
	s.next++
}

// replaced reports whether height, whose hash was last set by an answer
// asked at asked, lies in a reorganization reported (or learned) and was
// not seen since it. Overlapping reports cover their union: the lowest
// fork of those found after the hash was set.
func (s *chainState) replaced(height, asked int64) bool {
	for _, k := range s.reports {
		if k.at > 0 && height >= k.fork && asked < k.at {
			return true
		}
	}
	return false
}

// Learn takes a reorganization another node of the fleet reported (its
// purge from the fleet's log, applied here): every height of chain from
// fork up, as known before at (unix ns), was replaced and is purged. A
// new hash this node then sees at such a height, in place of one it had
// before at, is that reorganization, already reported and purged by the
// fleet: it is taken silently (replaced), not reported again. It never
// moves the head or the finalized height, and leaves a search already
// open here alone (a reorganization this node found first, or another).
func (c *Chains) Learn(chain string, fork, at int64) {
	s := c.by[chain]
	if s == nil || fork < 0 || at <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note(fork, at)
}

// knownBelow is the nearest height below p.low whose hash was known
// before p showed (first seen before p.at), within Recent; -1: none.
func (s *chainState) knownBelow(p *pending) int64 {
	for h := p.low - 1; h >= 0 && h > p.low-Recent; h-- {
		if r := s.ring[h%Recent]; r.height == h && r.hash != "" && s.first[h%Recent] < p.at {
			return h
		}
	}
	return -1
}

// Where a chain's finalized height comes from (Source).
const (
	SourceUnknown = "unknown" // no block list seen yet
	SourceState   = "state"   // blocks marked done
	SourceDepth   = "depth"   // blocks carry no state: the head less the configured depth
	SourceNone    = "none"    // blocks carry no state and no depth is configured: nothing is final
)

// Sources lists every Source value.
var Sources = []string{SourceUnknown, SourceState, SourceDepth, SourceNone}

// SetDepth sets chain's finality depth (0: none): where its blocks carry
// no state, a block depth below the newest block the upstream showed is
// taken as final. Applied from the next upstream answer; a finalized
// height already reached is kept (it never goes back).
func (c *Chains) SetDepth(chain string, depth int64) {
	if s := c.by[chain]; s != nil {
		s.depth.Store(max(depth, 0))
	}
}

// Source says where chain's finalized height comes from: SourceState,
// SourceDepth, SourceNone, or SourceUnknown before its first block list.
func (c *Chains) Source(chain string) string {
	s := c.by[chain]
	if s == nil {
		return SourceUnknown
	}
	return Sources[s.source.Load()]
}

// finalByDepth notes where the finalized height comes from, seeing an
// upstream answer whose newest block is top: from the blocks' state when
// one is done; from the depth when they carry none (the head less the
// depth, raised here), or nowhere without a depth. An answer with neither
// (pending blocks only, a transaction list) changes nothing.
func (s *chainState) finalByDepth(top int64, done, stateless bool) {
	switch d := s.depth.Load(); {
	case done:
		s.source.Store(1)
	case stateless && d > 0:
		s.source.Store(2)
		if top-d > 0 {
			s.raiseFinal(top - d)
		}
	case stateless:
		s.source.Store(3)
	}
}

func (s *chainState) reorg(p *pending) *Reorg {
	return &Reorg{Chain: s.name, Fork: p.low, Depth: max(p.oldHead-p.low+1, 1), Deep: p.deep, NewHash: p.newHash, At: p.at}
}
