package cache

// Hot identity copies. Answers are held compressed; a client that does not
// take gzip is sent the body inflated, which costs about 1 us per KB
// (BenchmarkHitInflated). For the answers such clients ask for again and
// again, the cache keeps an identity copy, in a set of at most a share of
// cache.max_bytes (identityShare, or cache.identity_bytes). The copies
// count against max_bytes: the entries get what they do not hold
// (Ristretto's bound follows them), so a cache no such client asks holds
// as many answers as it can, and one they ask gives up answers for their
// copies.
//
// An entry earns a copy on every n-th identity ask served without one.
// n adapts: it doubles (up to identityEveryMax) each time a copy leaves
// never served, as when clients walk through more answers than the set
// holds, so that such a walk does not pay for copies it never uses; it
// halves (down to identityEvery) each time one leaves having been served.
// The set makes room by CLOCK (a copy served since the hand last passed is
// spared once), and an entry's copy goes with the entry.

import "sync/atomic"

const (
	// identityShare: the copies may hold 1/identityShare of max_bytes.
	identityShare = 4
	// identityEvery: every so many identity asks without a copy, try to
	// make one, at least.
	identityEvery = 8
	// identityEveryMax: at most.
	identityEveryMax = 1024
)

// identCopy is an entry's identity body kept for clients that do not take
// gzip; used says it was served since the CLOCK hand passed it.
type identCopy struct {
	body   []byte
	used   atomic.Bool
	served atomic.Bool // ever
	slot   int         // place in identitySet.ring; guarded by Cache.mu
}

// identitySet is the bounded set of copies; guarded by Cache.mu but every.
type identitySet struct {
	budget int64
	used   int64
	ring   []*Entry
	hand   int
	every  atomic.Uint32 // asks between tries; 0 until the first (identityEvery)
}

// identityCost is the memory a copy holds beyond its body.
const identityCost = 48

func (c *identCopy) cost() int64 { return int64(cap(c.body)) + identityCost }

// Identity returns the identity body of e to send as is: Body, or e's hot
// copy, or nil when the caller must inflate (Inflate). It counts the ask
// and makes a copy when e has earned one. It allocates only then.
func (c *Cache) Identity(e *Entry) []byte {
	if e.Gzip == nil {
		return e.Body
	}
	if ic := e.ident.Load(); ic != nil {
		if !ic.used.Load() {
			ic.used.Store(true)
			ic.served.Store(true)
		}
		return ic.body
	}
	if c.identity.budget == 0 || int64(e.Size)+identityCost > c.identity.budget/4 {
		return nil // no set, or an answer that would take a quarter of it
	}
	if e.identAsks.Add(1)%max(c.identity.every.Load(), identityEvery) != 0 {
		return nil
	}
	body, err := e.Inflate(nil)
	if err != nil {
		return nil
	}
	ic := &identCopy{body: body}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !e.held || e.ident.Load() != nil { // gone from the cache, or raced
		return nil
	}
	s := &c.identity
	// Make room: CLOCK over the copies, at most two turns of the hand.
	for steps := 2 * len(s.ring); s.used+ic.cost() > s.budget && steps > 0 && len(s.ring) > 0; steps-- {
		s.hand %= len(s.ring)
		v := s.ring[s.hand]
		if vc := v.ident.Load(); vc.used.Load() {
			vc.used.Store(false)
			s.hand++
			continue
		}
		c.dropIdentity(v) // the last copy takes its place under the hand
	}
	if s.used+ic.cost() > s.budget {
		return nil
	}
	ic.slot = len(s.ring)
	s.ring = append(s.ring, e)
	s.used += ic.cost()
	c.bytes.Add(ic.cost())
	c.r.UpdateMaxCost(c.maxBytes - s.used) // entries make room at the next Set
	e.ident.Store(ic)
	return body
}

// dropIdentity lets go of e's copy, if it has one; mu is held. A request
// that loaded the copy before keeps sending it: the memory goes when the
// last of them is done.
func (c *Cache) dropIdentity(e *Entry) {
	ic := e.ident.Load()
	if ic == nil {
		return
	}
	s := &c.identity
	every := max(s.every.Load(), identityEvery)
	if ic.served.Load() {
		s.every.Store(max(every/2, identityEvery))
	} else {
		s.every.Store(min(every*2, identityEveryMax))
	}
	last := len(s.ring) - 1
	moved := s.ring[last]
	s.ring[ic.slot] = moved
	moved.ident.Load().slot = ic.slot
	s.ring[last] = nil
	s.ring = s.ring[:last]
	s.used -= ic.cost()
	c.bytes.Add(-ic.cost())
	c.r.UpdateMaxCost(c.maxBytes - s.used)
	e.ident.Store(nil)
	e.identAsks.Store(0)
}

// IdentityBytes is the memory held by hot identity copies now.
func (c *Cache) IdentityBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity.used
}
