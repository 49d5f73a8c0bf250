// Package blocks keeps the blocks of each chain the edge has seen, one
// item per height (the block's object as the upstream gave it, its hash
// and state), and assembles block-list pages from them: any page and any
// limit of the newest-first list at the head the edge last had from the
// upstream, and pinned pages (a list whose head a client fixed, head=H)
// while their blocks are held. docs/frontends.md says what a client sees,
// docs/design.md (Block lists made of blocks) why.
//
// Items come from every block list the edge fetched (proxy/reorg.go
// observe) or read back from a tier and believed; a reorganization drops
// them from its fork up (Drop) before the new branch's are added. The
// package holds no opinion of finality: the caller passes the finalized
// height (chain truth) when it assembles.
package blocks

import (
	"strconv"
	"sync"

	"github.com/buger/jsonparser"
)

// Keep is how many heights of each chain are held: a ring by height, the
// newest win. At about 600 bytes a block it is some 2.5 MB a chain; a
// pinned page whose blocks have left it (a pin more than Keep blocks old
// that no tier kept) is refused naming head.
const Keep = 4096

// Window is the upstream's reachable part of the block list (the newest
// 10000 blocks, route.Table's Window): it sets totalPage as the upstream
// computes it.
const Window = 10000

// item is one block as the upstream showed it.
type item struct {
	height int64 // -1: the slot is empty
	hash   string
	raw    []byte // the block's JSON object, as given
	seen   int64  // unix ns the answer showing it was asked
	done   bool   // state "done"
	bare   bool   // no state at all: final only at or below the finalized height
}

// field is one member of the envelope's data object, in the upstream's
// order: its name and raw value (quoted when a string).
type field struct {
	name string
	raw  []byte
}

// chain is one chain's items and what its newest page said.
type chain struct {
	mu    sync.Mutex
	ring  []item
	top   int64 // the newest block of the newest head page had
	topAt int64 // unix ns that page was asked; 0: none since the last reorganization
	// The upstream's envelope around a block list: its top-level members
	// before and after data, and data[0]'s members in order (tmpl), taken
	// from the last block list seen.
	pre, post []byte
	tmpl      []field
}

// Store holds the items of the configured chains.
type Store struct {
	by map[string]*chain
}

// New makes a store for chains (upper case, as route.Params.Chain).
func New(chains []string) *Store {
	s := &Store{by: make(map[string]*chain, len(chains))}
	for _, c := range chains {
		ch := &chain{ring: make([]item, Keep), top: -1}
		for i := range ch.ring {
			ch.ring[i].height = -1
		}
		s.by[c] = ch
	}
	return s
}

// Add takes the blocks of body, a block-list answer of chain asked at
// asked (unix ns). head: the answer is the chain's newest page (no height,
// page 1), so its newest block is the head as of asked. An item already
// held at a height is replaced by one seen later.
func (s *Store) Add(chainName string, body []byte, asked int64, head bool) {
	c := s.by[chainName]
	if c == nil {
		return
	}
	data, _, end, err := jsonparser.Get(body, "data", "[0]")
	if err != nil {
		return
	}
	var rows []item
	top := int64(-1)
	jsonparser.ArrayEach(data, func(row []byte, t jsonparser.ValueType, _ int, _ error) {
		if t != jsonparser.Object {
			return
		}
		hs, _ := jsonparser.GetString(row, "height")
		h, err := strconv.ParseInt(hs, 10, 64)
		if err != nil || h < 0 {
			return
		}
		hash, _ := jsonparser.GetString(row, "hash")
		if hash == "" {
			return
		}
		state, _ := jsonparser.GetString(row, "state")
		rows = append(rows, item{height: h, hash: hash, raw: append([]byte(nil), row...), seen: asked, done: state == "done", bare: state == ""})
		top = max(top, h)
	}, "blockList")
	pre, post, tmpl, ok := envelopeOf(body, end-len(data), end)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.pre, c.post, c.tmpl = pre, post, tmpl
	}
	for _, r := range rows {
		slot := &c.ring[r.height%Keep]
		if slot.height > r.height || (slot.height == r.height && slot.seen > r.seen) {
			continue // a newer height holds the slot, or a later sight of this one
		}
		*slot = r
	}
	if head && top >= 0 && (top > c.top || (top == c.top && asked > c.topAt)) {
		c.top, c.topAt = top, asked
	}
}

// envelopeOf cuts body around data[0], body[from:to]: the envelope's
// bytes before and after it, and its members in order (one of them
// blockList).
func envelopeOf(body []byte, from, to int) (pre, post []byte, tmpl []field, ok bool) {
	if from < 0 || to > len(body) || from >= to || body[from] != '{' {
		return nil, nil, nil, false
	}
	pre = append([]byte(nil), body[:from]...)
	post = append([]byte(nil), body[to:]...)
	list := false
	err := jsonparser.ObjectEach(body[from:to], func(k, v []byte, t jsonparser.ValueType, _ int) error {
		raw := v
		if t == jsonparser.String {
			raw = make([]byte, 0, len(v)+2)
			raw = append(append(append(raw, '"'), v...), '"')
		} else {
			raw = append([]byte(nil), v...)
		}
		tmpl = append(tmpl, field{name: string(k), raw: raw})
		list = list || string(k) == "blockList"
		return nil
	})
	return pre, post, tmpl, err == nil && list
}

// Drop forgets chain's items from height fork up (a reorganization
// replaced them) and the head page's time when it showed one of them: no
// newest-first page is assembled again until a page of the new branch is
// had.
func (s *Store) Drop(chainName string, fork int64) {
	c := s.by[chainName]
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.ring {
		if c.ring[i].height >= fork {
			c.ring[i] = item{height: -1}
		}
	}
	if c.top >= fork {
		c.topAt = 0
	}
}

// Head is chain's newest block as of its newest head page, and when that
// page was asked (unix ns; 0: none).
func (s *Store) Head(chainName string) (top, at int64) {
	c := s.by[chainName]
	if c == nil {
		return -1, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.top, c.topAt
}

// Ask is one block-list question Assemble answers.
type Ask struct {
	Chain       string
	Page, Limit int64
	// Pin is the head a pinned list was started at (head=H); -1: the
	// newest-first list at the head as of the newest head page.
	Pin int64
	// Now and Fresh: the newest head page counts as the head while it is
	// younger than Fresh (the route's head TTL) at Now (unix ns).
	Now, Fresh int64
	// Final is the chain's finalized height: a block without a state is
	// settled at or below it.
	Final int64
}

// Outcome says what Assemble made of an Ask.
type Outcome int

const (
	Assembled  Outcome = iota // Body holds the answer
	NotHeld                   // some block of the page is not held (or not current): ask the upstream
	BeyondList                // the page starts beyond the list at that head (the upstream refuses it: page)
	AboveHead                 // a pin above the newest block had
)

// Page is an assembled answer.
type Page struct {
	Body []byte
	// Settled: every block shown is done (or, without a state, at or
	// below the finalized height): a pinned page of them never changes.
	Settled bool
	// Head is the head the page was answered at; Stored when its newest
	// head page was asked (the answer is as old as that).
	Head, Stored int64
	// Low and High are the heights the page needs (High < Low: none).
	Low, High int64
}

// Range is the heights page of a list of limit at head holds, newest
// first: high down to low (low > high when the page is empty or beyond
// the list). beyond: the page starts past the list's reachable blocks.
func Range(head, page, limit int64) (low, high int64, beyond bool) {
	n := min(head+1, Window)
	if n <= 0 || (page-1)*limit >= n {
		return 0, -1, true
	}
	high = head - (page-1)*limit
	low = max(high-limit+1, head-n+1)
	return low, high, false
}

// Assemble answers a from the items held, in the order and envelope the
// upstream uses (page, limit and totalPage as it computes them). An
// unpinned page needs the newest head page to be current (Fresh); every
// block it shows must be held, and one not settled must have been seen
// since that head page was asked (its state may have moved since).
func (s *Store) Assemble(a Ask) (Page, Outcome) {
	c := s.by[a.Chain]
	if c == nil {
		return Page{}, NotHeld
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	current := c.topAt > 0 && a.Now-c.topAt < a.Fresh
	head := a.Pin
	if a.Pin < 0 {
		if !current {
			return Page{}, NotHeld
		}
		head = c.top
	} else if a.Pin > c.top {
		return Page{}, AboveHead
	}
	low, high, beyond := Range(head, a.Page, a.Limit)
	if beyond {
		return Page{Head: head, Low: low, High: high}, BeyondList
	}
	pg := Page{Head: head, Stored: c.topAt, Settled: true, Low: low, High: high}
	if len(c.tmpl) == 0 {
		return pg, NotHeld
	}
	for h := high; h >= low; h-- {
		it := &c.ring[h%Keep]
		if it.height != h {
			return pg, NotHeld
		}
		settled := it.done || (it.bare && h <= a.Final)
		if !settled && (!current || it.seen < c.topAt) {
			return pg, NotHeld
		}
		pg.Settled = pg.Settled && settled
	}
	if a.Pin >= 0 && pg.Settled {
		// Nothing shown moves; the page is as old as its newest block's
		// sight, not the head page's.
		pg.Stored = 0
		for h := high; h >= low; h-- {
			pg.Stored = max(pg.Stored, c.ring[h%Keep].seen)
		}
	}
	total := (min(head+1, Window) + a.Limit - 1) / a.Limit
	b := make([]byte, 0, len(c.pre)+len(c.post)+256+int(high-low+1)*700)
	b = append(b, c.pre...)
	b = append(b, '{')
	for i, f := range c.tmpl {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, f.name)
		b = append(b, ':')
		switch f.name {
		case "page":
			b = appendQuotedInt(b, a.Page)
		case "limit":
			b = appendQuotedInt(b, a.Limit)
		case "totalPage":
			b = appendQuotedInt(b, total)
		case "blockList":
			b = append(b, '[')
			for h := high; h >= low; h-- {
				if h != high {
					b = append(b, ',')
				}
				b = append(b, c.ring[h%Keep].raw...)
			}
			b = append(b, ']')
		default:
			b = append(b, f.raw...)
		}
	}
	b = append(b, '}')
	b = append(b, c.post...)
	pg.Body = b
	return pg, Assembled
}

func appendQuotedInt(b []byte, v int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, v, 10)
	return append(b, '"')
}
