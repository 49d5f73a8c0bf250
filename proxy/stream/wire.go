package stream

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"time"
)

// The wire format (WHATWG HTML, "Server-sent events", event stream
// interpretation): an event is "id:", "event:" and one "data:" line of
// JSON, ended by a blank line; a line starting with ":" is a comment.
//
//	id: 19000000-1x2k9f.4100-9zq1m
//	event: head
//	data: {"chain":"ETH","height":19000000,"hash":"0xab…","time":1700000000000,"final":18999936}
//
//	id: 18999998-3jd81a.4100-9zq1m
//	event: reorg
//	data: {"chain":"ETH","fork":18999998,"depth":3,"hash":"0xcd…"}
//
//	id: 18999998-3jd81a-1.4100-9zq1m
//	event: stale
//	data: {"chain":"ETH","stale":true,"height":18999998,"since":1700000004000}
//
//	event: reset
//	data: {"chains":["ETH"]}
//
//	: hb
//
//	retry: 4172
//
// An id is one position per chain served, in configured order, joined by
// ".": "0" for a chain with no event yet, else "<height>-<tag>" and
// "-<n>" when n > 0, where height and tag (FNV-1a of the hash, base 36) name
// the chain's newest head, or the new branch's block at a reorganization's
// fork, and n counts the events since at that block (a higher finalized
// height, stale and its end). It comes from the chain, not from the node.

// position is where one chain stands after an event.
type position struct {
	height int64
	tag    uint32
	n      uint32
}

// after is p moved by ev, an event of its chain.
func (p position) after(ev Event) position {
	var q position
	switch ev.Kind {
	case Head:
		q = position{height: ev.Height, tag: tagOf(ev.Hash)}
	case Reorg:
		q = position{height: ev.Fork, tag: tagOf(ev.Hash)}
	default:
		q = p
	}
	if q.height == p.height && q.tag == p.tag {
		q.n = p.n + 1
	}
	return q
}

// tagOf is the 32-bit FNV-1a hash of a block hash: enough to tell two
// blocks at one height apart in an id, in 7 characters at most.
func tagOf(hash string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(hash); i++ {
		h ^= uint32(hash[i])
		h *= 16777619
	}
	return h
}

func appendPos(dst []byte, p position) []byte {
	if p == (position{}) {
		return append(dst, '0')
	}
	dst = strconv.AppendInt(dst, p.height, 10)
	dst = append(dst, '-')
	dst = strconv.AppendUint(dst, uint64(p.tag), 36)
	if p.n > 0 {
		dst = append(dst, '-')
		dst = strconv.AppendUint(dst, uint64(p.n), 10)
	}
	return dst
}

// appendIDLocked writes the id of the hub's state now: every chain's
// position. h.mu is held.
func (h *Hub) appendIDLocked(dst []byte) []byte {
	for i, c := range h.order {
		if i > 0 {
			dst = append(dst, '.')
		}
		dst = appendPos(dst, c.pos)
	}
	return dst
}

// maxPosLen bounds one chain's part of an id: 19 digits, "-", 7, "-", 10.
const maxPosLen = 40

// appendEvent writes ev as one event block, with the id id writes.
func appendEvent(dst []byte, id func([]byte) []byte, ev Event) []byte {
	dst = append(dst, "id: "...)
	dst = id(dst)
	switch ev.Kind {
	case Head:
		dst = append(dst, "\nevent: head\ndata: {\"chain\":"...)
		dst = appendString(dst, ev.Chain)
		dst = append(dst, `,"height":`...)
		dst = strconv.AppendInt(dst, ev.Height, 10)
		dst = append(dst, `,"hash":`...)
		dst = appendString(dst, ev.Hash)
		dst = append(dst, `,"time":`...)
		dst = strconv.AppendInt(dst, ev.Time, 10)
		dst = append(dst, `,"final":`...)
		dst = strconv.AppendInt(dst, ev.Final, 10)
	case Reorg:
		dst = append(dst, "\nevent: reorg\ndata: {\"chain\":"...)
		dst = appendString(dst, ev.Chain)
		dst = append(dst, `,"fork":`...)
		dst = strconv.AppendInt(dst, ev.Fork, 10)
		dst = append(dst, `,"depth":`...)
		dst = strconv.AppendInt(dst, ev.Depth, 10)
		dst = append(dst, `,"hash":`...)
		dst = appendString(dst, ev.Hash)
	case Stale:
		dst = append(dst, "\nevent: stale\ndata: {\"chain\":"...)
		dst = appendString(dst, ev.Chain)
		dst = append(dst, `,"stale":`...)
		dst = strconv.AppendBool(dst, ev.Stale)
		dst = append(dst, `,"height":`...)
		dst = strconv.AppendInt(dst, ev.Height, 10)
		dst = append(dst, `,"since":`...)
		dst = strconv.AppendInt(dst, ev.Time, 10)
	}
	return append(dst, "}\n\n"...)
}

// appendReset writes the reset event of chains: the stream cannot say
// what the client missed of them, and it should load their state afresh.
// It carries an id (the hub's state now) only when nothing follows it in
// the replay; else the events that follow carry theirs, and a stream cut
// between the two resumes from the client's old id and is reset again.
// h.mu is held.
func (h *Hub) appendResetLocked(dst []byte, withID bool, chains []*chain) []byte {
	if withID {
		dst = append(dst, "id: "...)
		dst = h.appendIDLocked(dst)
		dst = append(dst, '\n')
	}
	dst = append(dst, "event: reset\ndata: {\"chains\":["...)
	for i, c := range chains {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, c.name)
	}
	return append(dst, "]}\n\n"...)
}

// appendRetry writes the reconnection time of a draining node.
func appendRetry(dst []byte, d time.Duration) []byte {
	dst = append(dst, "retry: "...)
	dst = strconv.AppendInt(dst, d.Milliseconds(), 10)
	return append(dst, "\n\n"...)
}

// appendString writes s as a JSON string. Hashes come from the upstream:
// a quote or a line break in one must not end the data line early (an
// event of the client's own making); bytes that are not UTF-8 pass
// through, and the browser decodes them as U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
		case b < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
		default:
			dst = append(dst, b)
		}
	}
	return append(dst, '"')
}

// parseID reads an id: one position per chain of the hub, in order. ok is
// false for anything else (another configuration's, garbage). It does not
// say whether the positions are this node's: replayLocked asks.
func (h *Hub) parseID(id []byte) (ps []position, ok bool) {
	if len(id) == 0 || len(id) > maxPosLen*len(h.order) {
		return nil, false
	}
	ps = make([]position, 0, len(h.order))
	for part := range bytes.SplitSeq(id, []byte{'.'}) {
		p, ok := parsePos(part)
		if !ok || len(ps) == len(h.order) {
			return nil, false
		}
		ps = append(ps, p)
	}
	return ps, len(ps) == len(h.order)
}

// parsePos reads one chain's part of an id, exactly as appendPos writes it.
func parsePos(b []byte) (p position, ok bool) {
	if string(b) == "0" {
		return p, true
	}
	fields := bytes.Split(b, []byte{'-'})
	if len(fields) < 2 || len(fields) > 3 {
		return p, false
	}
	h, ok1 := digits(fields[0], 10, 1<<63-1)
	tag, ok2 := digits(fields[1], 36, 1<<32-1)
	n := uint64(0)
	ok3 := true
	if len(fields) == 3 {
		n, ok3 = digits(fields[2], 10, 1<<32-1)
		ok3 = ok3 && n > 0
	}
	p = position{height: int64(h), tag: uint32(tag), n: uint32(n)}
	// Written one way only: "0" alone, no leading zeros, no empty tail.
	if !ok1 || !ok2 || !ok3 || h == 0 || string(appendPos(nil, p)) != string(b) {
		return position{}, false
	}
	return p, true
}

// digits reads b as a number in base (10 or 36, lower case) up to max.
func digits(b []byte, base, max uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 36 && c >= 'a' && c <= 'z':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		if v > (max-d)/base {
			return 0, false
		}
		v = v*base + d
	}
	return v, true
}

// replayLocked is what a new stream of cs is sent before the live
// events, given the id it last saw (last; empty for none). For each chain:
//   - no id, or the id had no event of the chain: its newest head (and
//     its stale event, while the chain is stale), so that a page has the
//     head at once and an id to resume from;
//   - the id's position is the chain's now: nothing;
//   - the history holds an event at that position: every event after it;
//   - this node is behind the id (its newest head is lower): nothing, the
//     next heads come;
//   - the block at the id's position is still the chain's, as the
//     history or Options.HashAt says (an id of another node, or older
//     than the history): the newest head, no reset: a head is the newest
//     block, not every block, and what replaced nothing the client saw
//     needs no reorg;
//   - else, and for every chain when the id does not parse: a reset
//     event naming them, then their newest heads.
//
// Events are in the order published, so that a stream cut anywhere in the
// replay resumes without loss or repeat. h.mu is held.
func (h *Hub) replayLocked(cs []*chain, last []byte) []byte {
	var frames []*frame
	var reset []*chain
	newest := func(c *chain) {
		if c.head != nil {
			frames = append(frames, c.head)
		}
		if c.stale != nil && c.stale.seq > frameSeq(c.head) {
			frames = append(frames, c.stale)
		}
	}
	ps, ok := h.parseID(last)
	for _, c := range cs {
		var p position
		if ok {
			p = ps[h.index(c)]
		}
		switch {
		case len(last) == 0 || (ok && p == position{}):
			newest(c)
		case !ok:
			reset = append(reset, c)
			newest(c)
		case p == c.pos:
		case c.since(p) != nil:
			frames = append(frames, c.since(p)...)
		case c.head == nil || c.last.Height < p.height:
		case h.onChain(c, p):
			newest(c)
		default:
			reset = append(reset, c)
			newest(c)
		}
	}
	if len(frames) == 0 && len(reset) == 0 {
		return nil
	}
	slices.SortFunc(frames, func(a, b *frame) int { return cmp.Compare(a.seq, b.seq) })
	frames = slices.Compact(frames)
	n := 0
	for _, f := range frames {
		n += len(f.b)
	}
	out := make([]byte, 0, n+64+16*len(reset)+maxPosLen*len(h.order))
	if len(reset) > 0 {
		out = h.appendResetLocked(out, len(frames) == 0, reset)
	}
	for _, f := range frames {
		out = append(out, f.b...)
	}
	return out
}

func frameSeq(f *frame) uint64 {
	if f == nil {
		return 0
	}
	return f.seq
}

// index is c's place in ids.
func (h *Hub) index(c *chain) int { return slices.Index(h.order, c) }

// since are the events of c's history after the first one at p; nil when
// none is at p. The event the history let go last counts: all after it
// are held.
func (c *chain) since(p position) []*frame {
	var from uint64
	found := false
	if c.evicted != nil && c.evicted.pos == p {
		from, found = c.evicted.seq, true
	}
	for _, f := range c.ring {
		if f.pos == p && (!found || f.seq < from) {
			from, found = f.seq, true
		}
	}
	if !found {
		return nil
	}
	out := []*frame{}
	for _, f := range c.ring {
		if f.seq > from {
			out = append(out, f)
		}
	}
	return out
}

// onChain reports whether the block p names is c's block at its height:
// by c's history's heads first, then HashAt.
func (h *Hub) onChain(c *chain, p position) bool {
	for _, f := range c.ring {
		if f.kind == Head && f.pos.height == p.height {
			return f.pos.tag == p.tag
		}
	}
	if h.opt.HashAt == nil {
		return false
	}
	hash := h.opt.HashAt(c.name, p.height)
	return hash != "" && tagOf(hash) == p.tag
}
