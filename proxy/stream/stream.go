// Package stream pushes chain events (new heads, reorganizations) to
// browsers as server-sent events (text/event-stream, WHATWG HTML,
// "Server-sent events"). A Hub holds the subscribers and a short history
// per chain; Publish hands each event to every subscriber of its chain
// without ever waiting for one; Handler serves one EventSource.
//
// Each stream is one goroutine writing to its own connection, taken from
// fasthttp with Hijack rather than SetBodyStreamWriter, whose writer
// fills a pipe that a second goroutine (the server's worker) copies to
// the socket under the one deadline the server set when the handler
// returned: there a write can have no deadline of its own, a stream is cut
// at the server's WriteTimeout, holds a worker of its Concurrency and
// holds Shutdown, and an idle stream costs 28 KB against 6-17 KB here
// (TestIdleMemory, KeptConns). A subscriber that cannot keep up (its
// Buffer full) or whose write passes WriteTimeout is dropped; its browser
// reconnects with Last-Event-ID and resumes from the history.
//
// Ids say where each chain of the hub stood when the event was sent, from
// the chain itself: for each chain served, in configured order, the height
// and a tag of the hash of its newest head (or of the new branch's block at
// a reorganization's fork), and how many events followed at that block
// (wire.go). Every node of a fleet serving the same chains gives the same
// event the same id, so a browser whose node went away (a deploy, a kill)
// resumes on another without a reset: the events after its position when
// that node's history holds it, else the newest head when the block the
// browser last saw is still the chain's (Options.HashAt), else a reset.
package stream

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options configure a Hub. A zero field takes the default its comment
// gives.
type Options struct {
	// Chains are the chains served, by the names events carry
	// (Event.Chain) and the chains parameter names (matched without
	// regard to case).
	Chains []string
	// MaxSubscribers bounds the streams open on this node; beyond it a
	// request is refused with 503 and Retry-After. 0: 2048.
	MaxSubscribers int
	// MaxPerIP bounds the streams of one client address (ClientIP);
	// beyond it 429. 0: 32.
	MaxPerIP int
	// Buffer is how many events wait for one subscriber's writer; a
	// subscriber whose buffer is full when an event comes is dropped
	// (reason "slow"). 0: 16.
	Buffer int
	// History is how many events per chain are kept for a resume. 0: 256.
	History int
	// Heartbeat is the interval of the comment lines that keep idle
	// streams open through proxies and show dead ones. 0: 15s.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a subscriber; one that passes it
	// is dropped (reason "timeout"). 0: 10s.
	WriteTimeout time.Duration
	// RetryHint is the reconnection time sent as "retry:" when the node
	// drains, spread per stream over [RetryHint, 2*RetryHint) so that the
	// browsers of a drained node do not all come back in the same
	// instant; also the Retry-After of a refusal. 0: 3s.
	RetryHint time.Duration
	// ClientIP is the key MaxPerIP counts a stream under: the client's
	// address, an IPv6 one grouped by its prefix (ipgroup.Key), as every
	// per-address limit counts it. nil: the connection's peer, IPv6 by
	// /64; behind a proxy, give the admission's (ClientKey).
	ClientIP func(ctx *fasthttp.RequestCtx) netip.Addr
	// OnListen is told when a chain gets its first subscriber (true) and
	// loses its last (false), so that a poller runs only while someone
	// listens. Calls are serialized, never twice the same value in a row
	// for a chain, and made outside the hub's lock (it may call the Hub).
	// nil: none.
	OnListen func(chain string, listening bool)
	// HashAt is the hash of chain's block at height as this node knows
	// it ("" when it does not), asked when a stream resumes from an id
	// whose block this hub's history does not hold (another node's, or
	// older than History): the same block still on the chain resumes with
	// the newest head, anything else with a reset. nil: a reset.
	HashAt func(chain string, height int64) string
	// Metrics records the explorer_edge_stream_* families. nil: none.
	Metrics *Metrics
	// KeptConns says that the server keeps hijacked connections
	// (fasthttp.Server.KeepHijackedConns): a stream then holds its
	// connection alone, not the request's read buffer and context, which
	// fasthttp otherwise keeps until the stream ends (the edge's 8 KB
	// read buffer, server.max_header_bytes: 17 KB against 6 KB per idle
	// stream, TestIdleMemory). Set it together with the server's flag,
	// never alone: a server that does not keep its hijacked connections
	// closes each stream as it starts.
	KeptConns bool
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxSubscribers, 2048)
	def(&o.MaxPerIP, 32)
	def(&o.Buffer, 16)
	def(&o.History, 256)
	defDur(&o.Heartbeat, 15*time.Second)
	defDur(&o.WriteTimeout, 10*time.Second)
	defDur(&o.RetryHint, 3*time.Second)
}

// Kind is an event's type, its "event:" field.
type Kind uint8

const (
	Head  Kind = iota + 1 // a new head
	Reorg                 // a reorganization, found to its fork
	Stale                 // the upstream has failed longer than a block interval, or answers again
)

// Event is what Publish announces.
type Event struct {
	Kind   Kind
	Chain  string // one of Options.Chains, exactly
	Height int64  // Head: the new head's height; Stale: the newest head known
	Hash   string // Head: the head's hash; Reorg: the new branch's block at Fork
	Time   int64  // Head: the block's time, Unix milliseconds; Stale: the last answer's
	// Stale: true when the chain's newest page has not been had for
	// longer than a block interval (heads are delayed, not absent);
	// false when it is had again.
	Stale bool
	Final int64 // Head: the finalized height; 0 when none is known
	Fork  int64 // Reorg: the lowest height replaced (truth.Reorg.Fork)
	Depth int64 // Reorg: blocks replaced (truth.Reorg.Depth)
}

// frame is one event's bytes on the wire, encoded once and shared by every
// subscriber; never changed after Publish.
type frame struct {
	seq  uint64 // the hub's order of publication (ids are positions)
	kind Kind
	pos  position // its chain's position after it
	b    []byte
	at   time.Time // Publish's
	// pending counts the subscribers it was handed to that have not
	// written it yet; the last one observes the delivery time. Frames
	// that are not Publish's (heartbeats, replays) are not counted.
	pending atomic.Int32
	counted bool
}

// chain is one chain's subscribers and history; guarded by Hub.mu but
// for listeners, which is also read without it.
type chain struct {
	name      string
	subs      []*sub
	ring      []*frame // the last History events, oldest at next when full
	next      int
	evicted   *frame   // the newest event the ring let go; nil: none
	head      *frame   // the newest head event, kept whatever the ring holds
	last      Event    // the newest head event as published
	pos       position // where the chain stands: the position of its newest event
	stale     *frame   // the newest stale event while it says stale, else nil
	listeners atomic.Int32
	reported  bool // the last OnListen value; guarded by Hub.listenMu
	gauge     gauge
}

func (c *chain) remember(f *frame) {
	if len(c.ring) < cap(c.ring) {
		c.ring = append(c.ring, f)
	} else {
		c.evicted = c.ring[c.next]
		c.ring[c.next] = f
		c.next = (c.next + 1) % len(c.ring)
	}
	if f.kind == Head {
		c.head = f
	}
}

// sub is one stream. ch is closed by Publish when it drops the
// subscriber; gone says it has left the hub's sets.
type sub struct {
	ch     chan *frame
	chains []*chain
	pos    []int // the index of this sub in chains[i].subs
	ip     netip.Addr
	gone   bool // guarded by Hub.mu
}

const (
	open = iota
	draining
	closed
)

// Hub is the subscribers of one node. Create it with New; Close it.
type Hub struct {
	opt    Options
	chains map[string]*chain // fixed at New
	order  []*chain
	hb     *frame
	m      *Metrics

	mu    sync.Mutex
	seq   uint64
	state int
	total int
	perIP map[netip.Addr]int
	drain chan struct{} // closed by Drain (and Close)
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup

	listenMu sync.Mutex
}

// New makes the hub of opt.Chains and starts its heartbeat.
func New(opt Options) *Hub {
	opt.defaults()
	h := &Hub{
		opt:    opt,
		chains: make(map[string]*chain, len(opt.Chains)),
		hb:     &frame{b: []byte(": hb\n\n")},
		m:      opt.Metrics,
		perIP:  map[netip.Addr]int{},
		drain:  make(chan struct{}),
		done:   make(chan struct{}),
	}
	for _, name := range opt.Chains {
		c := &chain{name: name, ring: make([]*frame, 0, opt.History), gauge: h.m.subscribers(name)}
		h.chains[name] = c
		h.order = append(h.order, c)
	}
	h.wg.Add(1)
	go h.heartbeat()
	return h
}

// Listening reports whether chain has a subscriber.
func (h *Hub) Listening(chain string) bool {
	c := h.chains[chain]
	return c != nil && c.listeners.Load() > 0
}

// Publish announces ev to every subscriber of its chain and keeps it for
// resumes. It never waits for a subscriber: one whose buffer is full is
// dropped. An event of a chain not served, or of no known Kind, is
// ignored, as is every event after Close.
//
// A head goes forward only, like truth's: a head below the newest
// published, or the same block again with no higher finalized height, is
// ignored, so that the poller, the request path and the fleet's relay may
// all announce what they see, in any order, and browsers get each head
// once.
func (h *Hub) Publish(ev Event) {
	c := h.chains[ev.Chain]
	if c == nil || (ev.Kind != Head && ev.Kind != Reorg && ev.Kind != Stale) {
		return
	}
	f := &frame{kind: ev.Kind, at: time.Now(), counted: true}
	f.pending.Store(1) // Publish's own, until every hand-over is counted
	var emptied []*chain
	sent := 0
	h.mu.Lock()
	if h.state == closed || (ev.Kind == Head && c.head != nil && !ahead(ev, c.last)) ||
		(ev.Kind == Stale && (c.stale != nil) == ev.Stale) {
		h.mu.Unlock()
		return
	}
	if ev.Kind == Head {
		c.last = ev
	}
	c.pos = c.pos.after(ev)
	f.pos = c.pos
	h.seq++
	f.seq = h.seq
	f.b = appendEvent(make([]byte, 0, 192+16*len(h.order)), h.appendIDLocked, ev)
	c.remember(f)
	if ev.Kind == Stale {
		c.stale = nil
		if ev.Stale {
			c.stale = f
		}
	}
	for i := 0; i < len(c.subs); {
		s := c.subs[i]
		f.pending.Add(1)
		select {
		case s.ch <- f:
			sent++
			i++
		default:
			// Full: drop it rather than wait. Its browser comes back with
			// Last-Event-ID and resumes from the history. removeLocked
			// moves the last sub to i, so i is not advanced.
			f.pending.Add(-1)
			emptied = h.removeLocked(s, emptied)
			close(s.ch)
			h.m.dropped(reasonSlow)
		}
	}
	h.mu.Unlock()
	h.m.event(ev.Kind)
	if f.pending.Add(-1) == 0 && sent > 0 {
		h.m.delivered(f.at)
	}
	h.notify(emptied)
}

// ahead reports whether head ev says more than last: a higher block,
// another block at the same height (a reorganization at the tip), or a
// higher finalized height.
func ahead(ev, last Event) bool {
	return ev.Height > last.Height || (ev.Height == last.Height && (ev.Hash != last.Hash || ev.Final > last.Final))
}

// release is a subscriber done with f: written, or never to be.
func (h *Hub) release(f *frame) {
	if f.counted && f.pending.Add(-1) == 0 {
		h.m.delivered(f.at)
	}
}

// Drain ends every stream with a retry: hint and refuses new ones (503);
// events are still kept for resumes. It does not wait.
func (h *Hub) Drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == open {
		h.state = draining
		close(h.drain)
	}
}

// Close ends every stream at once, without a hint, stops the heartbeat,
// and returns when every stream's goroutine has ended: at once, but for a
// write to a client that does not read, which ends at its WriteTimeout.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.state != closed {
		h.state = closed
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *Hub) heartbeat() {
	defer h.wg.Done()
	t := time.NewTicker(h.opt.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.beat()
		case <-h.done:
			return
		}
	}
}

// beat hands the heartbeat comment to every subscriber with nothing
// waiting (one that has events pending gets them instead; a sub of two
// chains is seen twice but given one).
func (h *Hub) beat() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.order {
		for _, s := range c.subs {
			if len(s.ch) == 0 {
				select {
				case s.ch <- h.hb:
				default:
				}
			}
		}
	}
}

// subscribe adds a stream of chains for ip, with what it must be sent
// first for the id last (replay), or refuses it.
func (h *Hub) subscribe(cs []*chain, ip netip.Addr, last []byte) (*sub, []byte, *refusal) {
	h.mu.Lock()
	switch {
	case h.state != open:
		h.mu.Unlock()
		return nil, nil, refusedDraining
	case h.total >= h.opt.MaxSubscribers:
		h.mu.Unlock()
		return nil, nil, refusedFull
	case h.perIP[ip] >= h.opt.MaxPerIP:
		h.mu.Unlock()
		return nil, nil, refusedPerIP
	}
	s := &sub{ch: make(chan *frame, h.opt.Buffer), chains: cs, pos: make([]int, len(cs)), ip: ip}
	var started []*chain
	for i, c := range cs {
		s.pos[i] = len(c.subs)
		c.subs = append(c.subs, s)
		if c.listeners.Add(1) == 1 {
			started = append(started, c)
		}
		c.gauge.inc()
	}
	h.total++
	h.perIP[ip]++
	replay := h.replayLocked(cs, last)
	h.mu.Unlock()
	h.notify(started)
	return s, replay, nil
}

// begin counts a stream's goroutine for Close to wait for, unless the hub
// is closed. It is counted when it starts, not when subscribe adds it: a
// stream the server never starts (its connection failed between the
// handler and the hijack) must not hold Close; Publish drops it once its
// buffer fills.
func (h *Hub) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == closed {
		return false
	}
	h.wg.Add(1) // under mu, before closed: Close's Wait has not begun
	return true
}

// leave takes s out of the hub, unless Publish did; it reports whether it
// did. Frames still in s.ch are released.
func (h *Hub) leave(s *sub) bool {
	h.mu.Lock()
	var emptied []*chain
	left := !s.gone
	if left {
		emptied = h.removeLocked(s, nil)
	}
	h.mu.Unlock()
	// Nothing is sent to s any more (or ch is closed): take what is left.
	for {
		select {
		case f, ok := <-s.ch:
			if !ok {
				h.notify(emptied)
				return left
			}
			h.release(f)
		default:
			h.notify(emptied)
			return left
		}
	}
}

// removeLocked takes s out of its chains' sets and the counts, and
// appends to emptied the chains it leaves without subscribers.
func (h *Hub) removeLocked(s *sub, emptied []*chain) []*chain {
	s.gone = true
	for i, c := range s.chains {
		j, last := s.pos[i], len(c.subs)-1
		moved := c.subs[last]
		c.subs[j] = moved
		c.subs[last] = nil
		c.subs = c.subs[:last]
		if moved != s {
			for k, mc := range moved.chains {
				if mc == c {
					moved.pos[k] = j
				}
			}
		}
		if c.listeners.Add(-1) == 0 {
			emptied = append(emptied, c)
		}
		c.gauge.dec()
	}
	h.total--
	if h.perIP[s.ip]--; h.perIP[s.ip] <= 0 {
		delete(h.perIP, s.ip)
	}
	return emptied
}

// notify tells OnListen of the chains whose listening may have changed,
// with what holds now: two changes that raced are told in the order
// that leaves the last one standing.
func (h *Hub) notify(cs []*chain) {
	if h.opt.OnListen == nil || len(cs) == 0 {
		return
	}
	h.listenMu.Lock()
	defer h.listenMu.Unlock()
	for _, c := range cs {
		if now := c.listeners.Load() > 0; now != c.reported {
			c.reported = now
			h.opt.OnListen(c.name, now)
		}
	}
}
