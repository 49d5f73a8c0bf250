package proxy

import (
	"strconv"

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
//     changed) is purged from there at once, and a probe asks block lists
//     further back until the fork is found;
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
	switch {
	case v.Reorg != nil:
		p.reorganized(v.Reorg)
	case v.Partial != nil:
		p.purgeReplaced(v.Partial)
		p.probe(f, v.ProbeBelow)
	}
	return v.Behind
}

// probeLimit is the size of the block lists a probe asks (the route's
// largest page).
const probeLimit = 100

// probe asks, in the background and within the budget (it yields to
// client misses as a refresh does), the block list of f's chain ending at
// height below, and observes it: the search for an open reorganization's
// fork goes on until its fork is found. A probe that fails ends the search
// with what is known (truth.GiveUp).
func (p *Proxy) probe(f *upstream.Request, below int64) {
	if below < 0 {
		p.giveUp(f.Chain)
		return
	}
	r := &route.Table[route.BlockList]
	key := r.Path + "?chainShortName=" + f.Chain + "&height=" + strconv.FormatInt(below, 10) + "&limit=" + strconv.Itoa(probeLimit)
	g := &upstream.Request{Route: r, Key: key, Chain: f.Chain, Height: below, Background: true, Tenant: f.Tenant}
	s := p.settings.Load()
	p.background([]string{"probe|" + f.Chain}, func([]string) {
		p.metrics.ReorgProbes.WithLabelValues(f.Chain).Inc()
		if _, _, err := p.load(s, g); err != nil {
			p.log.Warn("reorganization probe failed; purged from the lowest height known replaced", "chain", f.Chain, "below", below, "err", err)
			p.giveUp(f.Chain)
		}
	})
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

// purgeReplaced purges, hard, what r replaced, on this node and (fleet
// mode) through the fleet's purge log: every answer holding a height from
// r.Fork up that is older than the answer that showed r. Hard, whatever
// the class: an answer of the replaced branch is never served again, not
// even as a stand-in for a failure. It returns the entries purged here.
func (p *Proxy) purgeReplaced(r *truth.Reorg) int {
	sel := purge.Replaced(p.settings.Load().chains, r.Chain, r.Fork, r.At)
	res, err := p.purges.PurgeAt(sel, r.At)
	if err != nil {
		p.log.Warn("reorganization purge not passed on to the fleet", "chain", r.Chain, "fork", r.Fork, "err", err)
	}
	return res.Memory
}
