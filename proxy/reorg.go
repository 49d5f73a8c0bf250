package proxy

import (
	"math"
	"sync"

	"explorer-edge/cache"
)

// Reorganizations, handled without an operator: every block list stored
// (from the upstream or the shared tier) tells the hash of each block in
// it. The edge remembers the hash per height for recent heights; a block
// list that shows another hash at a height than an older answer did means
// the chain reorganized from there. The edge then soft-purges what it holds
// from that height up (refreshed at once, one refresh per key, answered
// stale meanwhile), except final answers: a reorganization within the
// pending depth never touches done blocks. One that reaches below the
// finalized height means the upstream was wrong about finality: it is
// logged at error and the final answers from that height up are purged
// (hard) too.

// recentBlocks is how many heights per chain the edge remembers a hash for.
const recentBlocks = 1024

type blockSeen struct {
	height int64
	hash   string
	stored int64 // unix ns the answer showing it was asked
	done   bool  // the upstream said the block was done (final)
}

// chainBlocks are the hashes seen on one chain, by height mod recentBlocks.
type chainBlocks struct {
	mu   sync.Mutex
	ring [recentBlocks]blockSeen
}

// blockRow is a block of a block list.
type blockRow struct {
	height int64
	hash   string
	done   bool
}

// observeBlocks remembers the blocks of a block list asked at stored, and
// reports the lowest height whose hash differs from an older answer's (-1:
// none), and whether a block replaced was done: the reorganization
// reaches below the finalized height.
func (p *Proxy) observeBlocks(chain string, rows []blockRow, stored int64) (low int64, deep bool) {
	cb := p.blocks[chain]
	low = -1
	if cb == nil {
		return low, false
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	for _, r := range rows {
		s := &cb.ring[r.height%recentBlocks]
		switch {
		case s.height > r.height: // a newer height holds the slot
		case s.height < r.height || s.hash == "":
			*s = blockSeen{r.height, r.hash, stored, r.done}
		case stored < s.stored: // an older answer: it tells nothing new
		case s.hash != r.hash:
			if low < 0 || r.height < low {
				low = r.height
			}
			deep = deep || s.done
			*s = blockSeen{r.height, r.hash, stored, r.done}
		default:
			s.stored, s.done = stored, s.done || r.done
		}
	}
	return low, deep
}

// reorganized handles a reorganization of chain from height from, seen in
// an answer asked at at: answers older than that one holding heights from
// there up are purged (soft; final ones too, hard, when deep: a block the
// upstream had called done was replaced).
func (p *Proxy) reorganized(chain string, from, at int64, deep bool) {
	p.metrics.Reorgs.WithLabelValues(chain).Inc()
	final := p.FinalHeight(chain)
	tag := p.chainTag(chain)
	now := p.clock()
	sel := func(soft bool, classes uint8) *selector {
		return &selector{kind: purgeHeights, soft: soft, chain: tag, from: from, to: math.MaxInt64, before: at, classes: classes,
			req: purgeRequest{Heights: &purgeHeightsIn{Chain: chain, From: from, To: math.MaxInt64}, Soft: soft}}
	}
	nonFinal := sel(true, ^uint8(1<<cache.Final))
	p.purges.add(purgeRecord{at: at, sel: nonFinal}, now.Add(-p.keepPurges()).UnixNano())
	n := p.purgeMemory(nonFinal, now)
	if !deep {
		p.log.Warn("chain reorganized: answers from the height up marked stale", "chain", chain, "from", from,
			"final_height", final, "entries", n)
		return
	}
	finals := sel(false, 1<<cache.Final)
	p.purges.add(purgeRecord{at: at, sel: finals}, now.Add(-p.keepPurges()).UnixNano())
	m := p.purgeMemory(finals, now)
	p.log.Error("chain reorganized below its finalized height: the upstream was wrong about finality; final answers purged too",
		"chain", chain, "from", from, "final_height", final, "entries", n, "final_entries", m)
}

// newBlocks makes the per-chain memory of block hashes.
func newBlocks(chains []string) map[string]*chainBlocks {
	m := make(map[string]*chainBlocks, len(chains))
	for _, c := range chains {
		m[c] = &chainBlocks{}
	}
	return m
}
