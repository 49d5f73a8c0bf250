package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/truth"
	"explorer-edge/proxy/upstream"
)

// Chain truth (package truth) is fed here, explicitly, by the request
// path: observe is called with every upstream answer that shows blocks (a
// block list or a transaction list) before it is classified and stored,
// and acts on the verdict (an answer read back from the disk or the
// shared tier is only read, never observed: believe, tier.go):
//
//   - a reorganization found to its fork point is counted and logged once
//     (at error when it replaced a block called done), and purged, hard,
//     from the fork up on this node and, through the fleet's purge log, on
//     every node: an answer of the replaced branch is never served again,
//     not even as a stand-in for a failure;
//   - one whose fork lies below the answer (every block it compared
//     changed) is purged from there at once, and the chain's fork search
//     (search, one per chain, run to its end) asks pages of older blocks
//     until the fork is found, purging further as it goes;
//   - a head list behind the newest head seen is not stored (observe
//     reports how far behind).

// observe feeds chain truth with the blocks of an answer to f asked at
// asked (unix ns) and acts on the verdict. It returns how many blocks a
// head list is behind the newest head seen (0: current).
func (p *Proxy) observe(f *upstream.Request, body []byte, asked int64) (behind int64) {
	blocks := route.Blocks(f.Route.ID, f.Height, body)
	if len(blocks) == 0 {
		return 0
	}
	v := p.truth.Observe(f.Chain, blocks, asked, f.HeadList)
	p.metrics.FinalHeight(f.Chain, p.truth.Final(f.Chain))
	p.metrics.FinalSource(f.Chain, p.truth.Source(f.Chain))
	switch {
	case v.Reorg != nil:
		p.reorganized(v.Reorg)
	case v.Partial != nil:
		p.purgeReplaced(v.Partial)
		p.search(f.Chain, f.Tenant)
	}
	if f.Route.ID == route.BlockList && v.Behind == 0 {
		p.blocks.Add(f.Chain, body, asked, f.HeadList) // after any purge: the new branch's blocks
	}
	return v.Behind
}

// probeLimit is the size of the block lists the fork search asks (the
// route's largest page).
const probeLimit = 100

// maxProbes bounds the calls of one fork search: the pages that cover
// every height chain truth remembers, and one more.
const maxProbes = truth.Recent/probeLimit + 2

// search starts the fork search of chain unless one runs: one search per
// chain, in the background, that runs to its end. The search reads what
// is still to be found from chain truth (truth.Open) each round, so a
// reorganization found deeper while it runs (by its own pages or by
// client answers) is searched by the same search; one found after its
// last look starts it again (the check and the end are one step under
// p.work.mu). Its key is among the background work (p.work.refreshing),
// so Close waits for it.
func (p *Proxy) search(chain string, t *upstream.Tenant) {
	key := "search|" + chain
	p.work.mu.Lock()
	if _, busy := p.work.refreshing[key]; busy || p.work.closed {
		p.work.mu.Unlock()
		return
	}
	p.work.refreshing[key] = struct{}{}
	p.work.bg.Add(1)
	p.work.mu.Unlock()
	go func() {
		defer p.work.bg.Done()
		done := false
		defer func() {
			if !done { // a panic: the search ends, the key with it
				p.work.mu.Lock()
				delete(p.work.refreshing, key)
				p.work.mu.Unlock()
			}
		}()
		defer p.recoverBackground()
		for {
			p.walk(chain, t)
			p.work.mu.Lock()
			if _, open := p.truth.Open(chain); !open || p.work.closed {
				delete(p.work.refreshing, key)
				done = true
				p.work.mu.Unlock()
				if open {
					p.giveUp(chain)
				}
				return
			}
			p.work.mu.Unlock()
		}
	}()
}

// walk looks for the fork of chain's open reorganization down the newest
// blocks, a page of probeLimit at a time (block-list without a height,
// page=k): those pages mean the same whatever the upstream makes of
// height (the blocks down from it, or the block at it alone:
// docs/explorer-readings.md), and each shows 100 heights, so a
// reorganization d blocks deep costs at most ceil(d/100)+1 calls. Each
// round asks the page holding the nearest height below the lowest found
// replaced whose hash was known before the reorganization showed
// (truth.Open; the head is read from the last page's newest block, as
// the chain moves); chain truth says when the fork is found. A page that
// cannot be had within the budget after a few tries, or the end of what
// the upstream keeps, ends the search with what is known (truth.GiveUp).
func (p *Proxy) walk(chain string, t *upstream.Tenant) {
	head, _, _ := p.truth.Head(chain)
	lastPage, lastBelow, short := 0, int64(-1), 0
	for calls := 0; calls < maxProbes; calls++ {
		below, open := p.truth.Open(chain)
		if !open || p.closing() {
			return
		}
		if below < 0 {
			break
		}
		page := max(int((head-below)/probeLimit)+1, 1)
		if below == lastBelow && page <= lastPage && short == 0 {
			page = lastPage + 1 // the page asked did not reach it: the next one does
		}
		lastPage, lastBelow = page, below
		blocks, err := p.probe(chain, page, t)
		if err != nil {
			p.log.Warn("reorganization fork search: a page could not be asked; purged from the lowest height known replaced",
				"chain", chain, "page", page, "below", below, "err", err)
			break
		}
		top := int64(-1)
		for _, b := range blocks {
			top = max(top, b.Height)
		}
		if top >= 0 {
			head = top + int64(page-1)*probeLimit
		}
		if len(blocks) < probeLimit {
			// Fewer blocks than asked: the end of what the upstream
			// keeps, or an account that answers otherwise. Asked once
			// more; twice, nothing lies below to ask.
			if short++; short > 1 {
				break
			}
			continue
		}
		short = 0
	}
	p.giveUp(chain)
}

// probe asks the upstream, within the budget, page of chain's newest
// blocks (probeLimit a page) and observes it; the answer is not stored
// (only chain truth wants it). A refused budget is waited out a few
// times. It returns the blocks shown.
func (p *Proxy) probe(chain string, page int, t *upstream.Tenant) ([]truth.Block, error) {
	r := &route.Table[route.BlockList]
	key := r.Path + "?chainShortName=" + chain + "&limit=" + strconv.Itoa(probeLimit)
	if page > 1 {
		key += "&page=" + strconv.Itoa(page)
	}
	g := &upstream.Request{Route: r, Key: key, Chain: chain, Height: -1, Background: true, Tenant: t, HeadList: page == 1}
	var blocks []truth.Block
	var err error
	for try, wait := 0, 100*time.Millisecond; try < 5 && !p.closing(); try, wait = try+1, wait*2 {
		if try > 0 {
			time.Sleep(wait)
		}
		p.metrics.ReorgProbes.WithLabelValues(chain).Inc()
		asked := p.clock().UnixNano()
		h := *g
		h.Observe = func(body []byte) int64 {
			blocks = route.Blocks(r.ID, -1, body)
			return p.observe(g, body, asked)
		}
		var w upstream.Reservation
		if w, err = p.up.Reserve(&h); err != nil {
			continue
		}
		var a upstream.Answer
		a, err = p.up.Fetch(&h)
		p.up.Release(w, 0)
		switch {
		case err != nil:
		case a.Code != "0" || a.Status != 200:
			return nil, fmt.Errorf("the upstream answered %d, code %s", a.Status, a.Code)
		default:
			return blocks, nil
		}
	}
	return nil, err
}

// closing reports whether Close has begun: background work ends.
func (p *Proxy) closing() bool {
	p.work.mu.Lock()
	defer p.work.mu.Unlock()
	return p.work.closed
}

// finalityDepths gives chain truth each chain's chain_finality_depth, at
// start and on every reload.
func (p *Proxy) finalityDepths(s *settings) {
	for _, c := range s.chains {
		p.truth.SetDepth(c, s.cfg.FinalityDepth(c))
	}
}

// finalityDetail is what /readyz says of the chains whose finalized
// height does not come from their blocks' state (truth.Source): by depth,
// or nowhere (nothing final); "" when every chain's does, or is not known
// yet.
func (p *Proxy) finalityDetail() string {
	s := p.settings.Load()
	var out []string
	for _, c := range s.chains {
		switch p.truth.Source(c) {
		case truth.SourceDepth:
			out = append(out, c+" by depth (chain_finality_depth "+strconv.FormatInt(s.cfg.FinalityDepth(c), 10)+
				", finalized height "+strconv.FormatInt(p.truth.Final(c), 10)+")")
		case truth.SourceNone:
			out = append(out, c+" none (its blocks carry no state and chain_finality_depth is not set: nothing is final)")
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "finality: " + strings.Join(out, "; ")
}

func (p *Proxy) giveUp(chain string) {
	if r := p.truth.GiveUp(chain); r != nil {
		p.reorganized(r)
	}
}

// reorganized handles a reorganization found to its fork: counted and
// logged once, purged here and published to the fleet.
func (p *Proxy) reorganized(r *truth.Reorg) {
	p.metrics.Reorgs.WithLabelValues(r.Chain).Inc()
	n := p.purgeReplaced(r)
	p.events.Reorg(r) // announced once purged: a page asked on the event holds the new branch
	attrs := []any{"chain", r.Chain, "from", r.Fork, "depth", r.Depth, "new_hash", r.NewHash,
		"final_height", p.truth.Final(r.Chain), "entries", n}
	if !r.Deep {
		p.log.Warn("chain reorganized: answers from the fork up purged", attrs...)
		return
	}
	p.log.Error("chain reorganized below its finalized height: the upstream was wrong about finality; final answers purged too", attrs...)
}

// learnReorg takes a reorganization another node reported, whose purge
// this node has just applied from the fleet's log: chain truth learns it
// as reported, so this node, seeing the new branch's hashes later, takes
// them silently (no count, no event, no purge record of its own: a second
// record meant a second CDN purge); and the blocks it held from fork up,
// of the replaced branch, are forgotten as reorganized would have.
func (p *Proxy) learnReorg(chain string, fork, at int64) {
	p.truth.Learn(chain, fork, at)
	p.blocks.Drop(chain, fork)
}

// purgeReplaced purges, hard, what r replaced, on this node and (fleet
// mode) through the fleet's purge log: every answer holding a height from
// r.Fork up that is older than the answer that showed r. Hard, whatever
// the class: an answer of the replaced branch is never served again, not
// even as a stand-in for a failure. It returns the entries purged here.
func (p *Proxy) purgeReplaced(r *truth.Reorg) int {
	p.blocks.Drop(r.Chain, r.Fork)
	sel := purge.Replaced(p.settings.Load().chains, r.Chain, r.Fork, r.At)
	res, err := p.purges.PurgeAt(sel, r.At)
	if err != nil {
		p.log.Warn("reorganization purge not passed on to the fleet", "chain", r.Chain, "fork", r.Fork, "err", err)
	}
	return res.Memory
}
