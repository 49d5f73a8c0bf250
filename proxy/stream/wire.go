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
//	id: 3kx9q2m.41
//	event: head
//	data: {"chain":"ETH","height":19000000,"hash":"0xab…","time":1700000000000,"final":18999936}
//
//	id: 3kx9q2m.42
//	event: reorg
//	data: {"chain":"ETH","fork":18999998,"depth":3,"hash":"0xcd…"}
//
//	event: reset
//	data: {"chains":["ETH"]}
//
//	: hb
//
//	retry: 4172

// maxIDLen bounds the Last-Event-ID read; a longer one is not this hub's.
const maxIDLen = 64

// appendEvent writes ev, numbered seq, as one event block.
func appendEvent(dst []byte, epoch string, seq uint64, ev Event) []byte {
	dst = append(dst, "id: "...)
	dst = appendID(dst, epoch, seq)
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
	}
	return append(dst, "}\n\n"...)
}

func appendID(dst []byte, epoch string, seq uint64) []byte {
	dst = append(dst, epoch...)
	dst = append(dst, '.')
	return strconv.AppendUint(dst, seq, 10)
}

// appendReset writes the reset event of chains: the stream cannot say
// what the client missed of them, and it should load their state afresh.
// It carries an id (the newest, seq) only when nothing follows it in the
// replay; else the events that follow carry theirs, and a stream cut
// between the two resumes from the client's old id and is reset again.
func appendReset(dst []byte, epoch string, seq uint64, withID bool, chains []*chain) []byte {
	if withID {
		dst = append(dst, "id: "...)
		dst = appendID(dst, epoch, seq)
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

// parseID reads an id of this hub up to its newest event: ok is false for
// anything else (another node's or process's epoch, an id from the
// future, garbage). h.mu is held.
func (h *Hub) parseID(id []byte) (seq uint64, ok bool) {
	if len(id) > maxIDLen {
		return 0, false
	}
	dot := bytes.LastIndexByte(id, '.')
	if dot < 0 || string(id[:dot]) != h.epoch {
		return 0, false
	}
	digits := id[dot+1:]
	if len(digits) == 0 || len(digits) > 20 {
		return 0, false
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return 0, false
		}
		d := uint64(b - '0')
		if seq > (^uint64(0)-d)/10 {
			return 0, false
		}
		seq = seq*10 + d
	}
	return seq, seq <= h.seq
}

// replayLocked is what a new stream of cs is sent before the live
// events, given the id it last saw (last; empty for none):
//   - no id: the newest head of each chain, so that a page has the head
//     at once and an id to resume from;
//   - an id of this hub: every event since, of each chain whose history
//     reaches back to it;
//   - for the chains whose history does not (events since were let go),
//     or every chain when the id is not this hub's: a reset event naming
//     them, then their newest heads.
//
// Events are in id order, so that a stream cut anywhere in the replay
// resumes without loss or repeat. h.mu is held.
func (h *Hub) replayLocked(cs []*chain, last []byte) []byte {
	var frames []*frame
	var reset []*chain
	seq, ok := h.parseID(last)
	for _, c := range cs {
		switch {
		case len(last) == 0:
			if c.head != nil {
				frames = append(frames, c.head)
			}
		case !ok || c.evicted > seq:
			reset = append(reset, c)
			if c.head != nil {
				frames = append(frames, c.head)
			}
		default:
			for _, f := range c.ring {
				if f.seq > seq {
					frames = append(frames, f)
				}
			}
		}
	}
	if len(frames) == 0 && len(reset) == 0 {
		return nil
	}
	slices.SortFunc(frames, func(a, b *frame) int { return cmp.Compare(a.seq, b.seq) })
	n := 0
	for _, f := range frames {
		n += len(f.b)
	}
	out := make([]byte, 0, n+64+16*len(reset))
	if len(reset) > 0 {
		out = appendReset(out, h.epoch, h.seq, len(frames) == 0, reset)
	}
	for _, f := range frames {
		out = append(out, f.b...)
	}
	return out
}
