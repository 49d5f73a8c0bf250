package proxy

import (
	"strconv"
	"strings"
	"time"

	"explorer-edge/cache"
	"explorer-edge/proxy/blocks"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
)

// Block lists made of blocks (docs/design.md, Block lists made of blocks;
// docs/frontends.md): every block list the edge has from the upstream
// feeds the chain's items (package blocks), and a block-list question
// without a height is answered from them when they cover it. Otherwise
// the largest page (limit=100, page 1: the newest 100 blocks) is asked,
// once for every variant, and the question answered from what it showed
// (cache.block_pages; off, the question is asked as it is, and only
// pinned pages are assembled). A pinned list
// (head=H) is answered from items only: it is never sent upstream.

// itemsPage is the largest block-list page: one call shows 100 blocks.
const itemsPage = 100

// itemsKey is the canonical key of page of chain's newest blocks,
// itemsPage a page.
func itemsKey(chain string, page int64) string {
	return route.Table[route.BlockList].Path + "?chainShortName=" + chain + "&page=" + strconv.FormatInt(page, 10) +
		"&limit=" + strconv.Itoa(itemsPage)
}

// itemsDepth bounds the newest-first pages fetched as pages of 100: a
// question reaching further down (page*limit above it) is asked as it is.
const itemsDepth = 1000

// fromBlocks answers f, a block-list question, from the blocks held when
// it can, asking the upstream pages of 100 for what they lack. done
// false: the ordinary path (the tiers, then the upstream) answers f.
func (p *Proxy) fromBlocks(s *settings, f *upstream.Request) (a *loaded, done bool, err error) {
	var q route.Params
	q.ParseKey(f.Route, f.Key)
	if q.Height >= 0 || q.Limit <= 0 {
		return nil, false, nil // asked at a height: the upstream's own reading (docs/explorer-readings.md)
	}
	if q.Head >= 0 {
		a, err = p.pinned(s, f, &q)
		return a, true, err
	}
	if !s.cfg.Cache.BlockPages {
		return nil, false, nil // asked as it is; its blocks join the items (observe)
	}
	pg, out := p.blocks.Assemble(p.blockAsk(s, f.Chain, &q))
	switch out {
	case blocks.Assembled:
		return p.storeBlocks(s, f, &q, pg, 0), true, nil
	case blocks.BeyondList:
		return nil, false, nil // the upstream refuses it, with its own words
	}
	if q.Page*q.Limit > itemsDepth || (q.Limit == itemsPage && q.Page*q.Limit <= itemsDepth) {
		return nil, false, nil // deep down the list, or a page of 100 itself
	}
	var took time.Duration
	_, at := p.blocks.Head(f.Chain)
	if at == 0 || p.clock().UnixNano()-at >= int64(p.ttlFor(s, f.Route, cache.Head)) {
		if q.Page*q.Limit > itemsPage {
			// Below the newest 100 with no current head: one call as
			// asked costs less than the head page and the page below.
			return nil, false, nil
		}
		l, items, err := p.loadItems(s, f, 1)
		if err != nil || (!items && l != nil && l.entry == nil) {
			// A failure, or the upstream's envelope of another code:
			// the question's own answer would be the same. Never the
			// page of 100's stale copy: fill gives the question's own.
			return notStale(l), true, err
		}
		if !items {
			return nil, false, nil
		}
		took = l.upstream
	}
	pg, out, t, err := p.cover(s, f, &q)
	if err != nil {
		return nil, true, err
	}
	if out == blocks.Assembled {
		return p.storeBlocks(s, f, &q, pg, took+t), true, nil
	}
	return nil, false, nil
}

// notStale is a copy of l without the stale copy its flight carried: a
// copy of the page of 100 it asked, never the answer to another question.
// Always a copy: l is the page's flight's, shared by every question that
// waited on it, and fill sets the question's own stale copy on what this
// returns (a data race on l, seen under -race in
// TestFleetSharesOneUpstreamBudget).
func notStale(l *loaded) *loaded {
	if l == nil {
		return nil
	}
	c := *l
	c.stale = nil
	return &c
}

// cover asks the pages of 100 of chain's newest blocks that hold q's
// heights, as the newest head page places them, until the items cover q
// (a few rounds: the chain may move between two pages), and assembles q.
func (p *Proxy) cover(s *settings, f *upstream.Request, q *route.Params) (pg blocks.Page, out blocks.Outcome, took time.Duration, err error) {
	for round := 0; round < 3; round++ {
		pg, out = p.blocks.Assemble(p.blockAsk(s, f.Chain, q))
		if out != blocks.NotHeld {
			return pg, out, took, nil
		}
		top, _ := p.blocks.Head(f.Chain)
		head := q.Head
		if head < 0 {
			head = top
		}
		low, high, _ := blocks.Range(head, q.Page, q.Limit)
		asked := false
		for k := max((top-high)/itemsPage+1, 1); k <= (top-low)/itemsPage+1; k++ {
			if k == 1 {
				continue // the head page: had by the caller
			}
			if _, out := p.blocks.Assemble(p.blockAsk(s, f.Chain, q)); out == blocks.Assembled {
				break
			}
			l, _, err := p.loadItems(s, f, k)
			if err != nil {
				return pg, out, took, err
			}
			if l != nil {
				took += l.upstream
			}
			asked = true
		}
		if !asked {
			break
		}
	}
	pg, out = p.blocks.Assemble(p.blockAsk(s, f.Chain, q))
	return pg, out, took, nil
}

// blockAsk is q as a question for the items.
func (p *Proxy) blockAsk(s *settings, chain string, q *route.Params) blocks.Ask {
	return blocks.Ask{Chain: chain, Page: q.Page, Limit: q.Limit, Pin: q.Head, Now: p.clock().UnixNano(),
		Fresh: int64(p.ttlFor(s, q.Route, cache.Head)), Final: p.truth.Final(chain)}
}

// loadItems has page of chain's newest blocks, 100 a page, through the
// flight of its own key (the tiers, then the upstream, stored like any
// answer), so that the items hold them: every variant waiting on it is
// answered from one call. items false: it gave no blocks (l holds what
// it gave: an envelope with another code, a page behind the head).
func (p *Proxy) loadItems(s *settings, f *upstream.Request, page int64) (l *loaded, items bool, err error) {
	g := &upstream.Request{Route: f.Route, Key: itemsKey(f.Chain, page), Chain: f.Chain, Height: -1,
		Background: f.Background, Tenant: f.Tenant, Trace: f.Trace, HeadList: page == 1}
	l, _, err = p.load(s, g)
	if err != nil || l == nil || l.entry == nil || l.behind || l.entry.Status != 0 {
		return l, false, err
	}
	if l.shared || l.disk || l.cached || l.revalidate {
		// Read back from a tier (checked and believed there): observe
		// did not see it.
		e := l.entry
		e.WithIdentity(func(body []byte) error {
			p.blocks.Add(f.Chain, body, e.Stored, page == 1)
			return nil
		})
	}
	return l, true, nil
}

// pinned answers a page of a pinned list (head=H), one the tiers did not
// hold (a settled one is kept on disk): from the items, or after asking
// the pages of 100 that hold its heights; refused naming head when its blocks are
// gone from the upstream's window and from the items, or when H is above
// the newest block.
func (p *Proxy) pinned(s *settings, f *upstream.Request, q *route.Params) (*loaded, error) {
	ask := p.blockAsk(s, f.Chain, q)
	pg, out := p.blocks.Assemble(ask)
	if out == blocks.Assembled {
		return p.storeBlocks(s, f, q, pg, 0), nil
	}
	if out == blocks.BeyondList {
		return nil, beyondPin(q)
	}
	var took time.Duration
	top, at := p.blocks.Head(f.Chain)
	if at == 0 || ask.Now-at >= ask.Fresh || out == blocks.AboveHead {
		l, _, err := p.loadItems(s, f, 1)
		if err != nil {
			return notStale(l), err
		}
		if l != nil {
			took = l.upstream
		}
		top, _ = p.blocks.Head(f.Chain)
	}
	if q.Head > top {
		return nil, envelope.Invalid("head", "head "+strconv.FormatInt(q.Head, 10)+" is above the newest block "+strconv.FormatInt(top, 10))
	}
	low, _, _ := blocks.Range(q.Head, q.Page, q.Limit)
	if low <= top-blocks.Window {
		if pg, out := p.blocks.Assemble(p.blockAsk(s, f.Chain, q)); out == blocks.Assembled {
			return p.storeBlocks(s, f, q, pg, took), nil
		}
		return nil, envelope.Invalid("head", "the list pinned at head "+strconv.FormatInt(q.Head, 10)+
			" reaches below the upstream's newest "+strconv.Itoa(blocks.Window)+" blocks and the edge no longer holds those blocks: start again from the newest page")
	}
	pg, out, t, err := p.cover(s, f, q)
	switch {
	case err != nil:
		return nil, err
	case out == blocks.Assembled:
		return p.storeBlocks(s, f, q, pg, took+t), nil
	case out == blocks.BeyondList:
		return nil, beyondPin(q)
	}
	// The pages were had and still do not hold it: the chain moved or
	// reorganized under every round.
	return nil, envelope.ErrBadGateway
}

func beyondPin(q *route.Params) *envelope.Error {
	return envelope.Invalid("page", "page "+strconv.FormatInt(q.Page, 10)+" with limit "+strconv.FormatInt(q.Limit, 10)+
		" is beyond the list pinned at head "+strconv.FormatInt(q.Head, 10))
}

// storeBlocks stores pg, assembled for q, as the entry of f's key: a head
// answer, fresh while the head page it was made from is; a pinned page of
// settled blocks is final (kept a day, on disk). It goes to the shared
// tier too: another node finds it there as if fetched.
func (p *Proxy) storeBlocks(s *settings, f *upstream.Request, q *route.Params, pg blocks.Page, took time.Duration) *loaded {
	now := p.clock()
	class, stored := cache.Head, time.Unix(0, pg.Stored)
	if q.Head >= 0 && pg.Settled {
		class, stored = cache.Final, now
	}
	e := cache.NewEntry(f.Key, pg.Body, class, stored, p.ttlFor(s, f.Route, class), route.ClassWindow(s.cfg.Cache.StaleWhileRevalidate, class), s.cfg.Cache.StaleIfError)
	e.Source = cache.SourceBlocks
	e.Tags = purge.Of(e, pg.Body, s.chains)
	p.keep(s, e, now)
	if p.tiers.shared != nil {
		p.shared(s).Set(e, now)
	}
	return &loaded{entry: e, stored: true, upstream: took}
}

// blockLink is the Link header (RFC 8288) of e when it is a block-list
// answer without a height: its next and previous pages, pinned at the
// head it was answered at (head=H), so a client following them sees each
// block once however the chain moves. Built at e's first answer and kept
// on it: a hit reads it without allocating.
func blockLink(e *cache.Entry) []byte {
	if l, ok := e.Link(); ok {
		return l
	}
	var l []byte
	if e.Status == 0 && strings.HasPrefix(e.Key, route.Table[route.BlockList].Path+"?") {
		l = buildLink(e)
	}
	e.SetLink(l)
	return l
}

func buildLink(e *cache.Entry) []byte {
	var q route.Params
	q.ParseKey(&route.Table[route.BlockList], e.Key)
	if q.Height >= 0 || q.Limit <= 0 || len(q.Chain) == 0 {
		return nil
	}
	head := q.Head
	if head < 0 {
		newest := int64(-1)
		e.WithIdentity(func(body []byte) error {
			if b := route.Blocks(route.BlockList, -1, body); len(b) > 0 {
				newest = b[0].Height
			}
			return nil
		})
		if newest < 0 {
			return nil
		}
		head = newest + (q.Page-1)*q.Limit
	}
	_, _, beyondNext := blocks.Range(head, q.Page+1, q.Limit)
	var l []byte
	link := func(page int64, rel string) {
		if len(l) > 0 {
			l = append(l, ", "...)
		}
		l = append(l, '<')
		l = append(l, route.Table[route.BlockList].Path...)
		l = append(l, "?chainShortName="...)
		l = append(l, q.Chain...)
		l = append(l, "&head="...)
		l = strconv.AppendInt(l, head, 10)
		l = append(l, "&page="...)
		l = strconv.AppendInt(l, page, 10)
		l = append(l, "&limit="...)
		l = strconv.AppendInt(l, q.Limit, 10)
		l = append(l, ">; rel=\""...)
		l = append(l, rel...)
		l = append(l, '"')
	}
	if !beyondNext && q.Page*q.Limit < int64(route.Table[route.BlockList].Window) {
		link(q.Page+1, "next")
	}
	if q.Page > 1 {
		link(q.Page-1, "prev")
	}
	return l
}

// BlockListFromItems answers key, a block-list question of chain without
// a height, from the blocks held when they cover it and the newest page
// is current, stores the answer like a miss would and returns it; nil
// when they do not (nothing is asked of the upstream). The stream's
// poller can refresh a variant of the newest page with it after polling
// that page: every variant the page covers costs no call of its own.
func (p *Proxy) BlockListFromItems(chain, key string) *cache.Entry {
	s := p.settings.Load()
	r := &route.Table[route.BlockList]
	var q route.Params
	q.ParseKey(r, key)
	if q.Height >= 0 || q.Head >= 0 || q.Limit <= 0 || string(q.Chain) != chain {
		return nil
	}
	pg, out := p.blocks.Assemble(p.blockAsk(s, chain, &q))
	if out != blocks.Assembled {
		return nil
	}
	f := &upstream.Request{Route: r, Key: key, Chain: chain, Height: -1}
	return p.storeBlocks(s, f, &q, pg, 0).entry
}
