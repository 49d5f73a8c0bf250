// Package events feeds the stream of chain events (package stream's Hub)
// from the request core: a poller per chain asks the newest block page
// through the core's miss path while someone listens, and announces a head
// only once the pages clients ask hold it; in a fleet one node polls and
// the others take the pages it names from the shared tier.
package events

import (
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/stream"
	"explorer-edge/proxy/truth"
)

// The stream of chain events (docs/stream.md): GET /edge/v1/events, served
// by a stream.Hub, fed by a poller here.
//
// Cached before announced: a head is published only once the newest block
// page of its chain (the default question, and the other limits clients
// asked lately) is stored in this node's cache holding it, so that a
// browser that fetches the block list when the event arrives gets a hit
// with the height it was told. The poll goes through the miss path
// (load, fill, store): the budget, the accounts, chain truth and the
// shared tier apply to it as to a client's miss; what is announced is
// what was stored.
//
// One poll per interval for the fleet: each chain is polled only while
// someone on this node listens (Hub.Listening), and in fleet mode only by
// the node that holds the chain's lease in Redis; it publishes on a
// channel, and every other node takes the pages it names from the shared
// tier into its own cache before it announces the head from them. The
// poller keeps its own pace: a subscriber that comes never makes it poll
// sooner than its schedule (a client that connects and resets in a loop
// would otherwise choose when the upstream is asked).
//
// What clients may make the upstream do is bounded by design: a variant
// (another limit of the newest page) is refreshed with each head only once
// variantClients distinct clients (addresses grouped as the per-IP limits
// group them, or verified clients in auth.mode signed) asked it within
// recentWindow, at most stream.variants per chain, and those refreshes
// yield to client misses (upstream.Request.Background) within
// variantShare of the budget. The variants are the fleet's: each node adds
// those its clients ask to a record in Redis (share), which the polling
// node reads (variants). While Redis does not answer, each node polls
// alone (within its local share of the budget).

// Path is the stream's path, in the edge's own namespace.
const Path = "/edge/v1/events"

// Relay is the fleet's side of the stream (fleet.Redis): the poll lease
// and the channel of announced heads.
type Relay interface {
	// Lease takes or renews a lease for token; ok false: Redis did not
	// answer, the node polls alone.
	Lease(name, token string, ttl time.Duration) (held, ok bool)
	ReleaseLease(name, token string)
	PublishEvent(msg []byte) bool
	// WatchEvents calls fn with every message published, until the
	// relay closes.
	WatchEvents(fn func(msg []byte))
	// ShareVariants adds newest-page keys of chain asked of this node at
	// at to the fleet's record, keeping what was asked within keep, at
	// most max keys.
	ShareVariants(chain string, keys []string, at time.Time, keep time.Duration, max int) bool
	// Variants are up to n keys of chain the fleet's record holds asked
	// since since, the most recent first; ok false: Redis did not answer.
	Variants(chain string, since time.Time, n int) (keys []string, ok bool)
}

// Core is what the poller asks of the request core (proxy.Proxy).
type Core interface {
	// Poll asks key, a newest block page of chain, through the miss path
	// from the upstream, and returns the entry stored (nil: none).
	// background: a variant's refresh, which yields the budget to client
	// misses.
	Poll(chain, key string, background bool) *cache.Entry
	// Cached is what memory holds under key (nil: nothing).
	Cached(key string) *cache.Entry
	// ItemsKey is the key of chain's page of its newest 100 blocks when
	// block-list questions are answered from the blocks held
	// (cache.block_pages), "" when they are not: the poller then polls
	// that page once a block and answers its questions from it.
	ItemsKey(chain string) string
	// FromItems answers key, a newest-page question of chain, from the
	// blocks held, stores the answer and returns it; nil when they do not
	// cover it. It asks nothing of the upstream.
	FromItems(chain, key string) *cache.Entry
	// Warm copies key from the shared tier into memory, as a miss that
	// found it there would.
	Warm(chain, key string)
	// Final is chain's finalized height.
	Final(chain string) int64
	// HashAt is the hash of chain's block at height as chain truth knows
	// it, "" when it does not.
	HashAt(chain string, height int64) string
	// Stream is stream.* of the configuration in force.
	Stream() config.Stream
	// Budget is the upstream's rate (calls a second, every account).
	Budget() float64
	// ClientIP is the address the per-IP caps count a request under.
	ClientIP(ctx *fasthttp.RequestCtx) netip.Addr
	// Asker is who asked ctx's question, as the variants count clients:
	// the verified client in auth.mode signed, else the client's address
	// grouped as the per-IP limits group it. It does not allocate.
	Asker(ctx *fasthttp.RequestCtx) uint64
	Now() time.Time
}

// recentWindow is how long a newest-page question a client asked stays
// among the variants refreshed with each new head.
const recentWindow = 5 * time.Minute

// recentMax bounds the record of newest-page questions per chain.
const recentMax = 64

// variantClients is how many distinct clients must have asked a
// newest-page question within recentWindow before it is refreshed with
// each head: one client, however many requests it sends, chooses nothing
// the upstream is asked.
const variantClients = 3

// variantShare is the most of the upstream's rate (Core.Budget) the
// variants' refreshes take, split evenly between the chains; they also
// yield to client misses (a background take: never while a miss waits or
// the bucket is low).
const variantShare = 0.4

// shareEvery is how often at most a node shares one key with the fleet's
// record of variants (Relay.ShareVariants).
const shareEvery = 5 * time.Second

// Events is the hub and its poller. Create it with New.
type Events struct {
	core   Core
	chains []string // upper case, in configured order
	hub    *stream.Hub
	relay  Relay  // nil: this node polls alone
	token  string // this node's lease token
	polls  map[string]*chainPoll
	m      *metrics.StreamPolls
	stop   chan struct{}
	wg     sync.WaitGroup

	// asked is the newest-page questions clients asked lately, by key:
	// read without a lock on every hit of a block list (Seen), replaced
	// whole under mu when a key comes or goes.
	asked  atomic.Pointer[map[string]*askers]
	mu     sync.Mutex
	shared map[string]map[string]int64 // chain -> newest-page key -> last shared with the fleet (unix ns)
}

// askers are the last distinct clients that asked one newest-page
// question, and when: updated without a lock (a lost update under a race
// costs a client's count, not a wrong refresh).
type askers struct {
	chain, key string
	who        [variantClients]atomic.Uint64
	at         [variantClients]atomic.Int64 // unix ns; 0: empty
}

// note counts who asking at now: the time of its slot, or the oldest slot
// given to it.
func (a *askers) note(who uint64, now int64) {
	oldest := 0
	for i := range a.who {
		if a.at[i].Load() != 0 && a.who[i].Load() == who {
			if now-a.at[i].Load() >= int64(time.Second) {
				a.at[i].Store(now)
			}
			return
		}
		if a.at[i].Load() < a.at[oldest].Load() {
			oldest = i
		}
	}
	a.who[oldest].Store(who)
	a.at[oldest].Store(now)
}

// qualified reports whether variantClients distinct clients asked within
// recentWindow before now.
func (a *askers) qualified(now int64) bool {
	for i := range a.at {
		if at := a.at[i].Load(); at == 0 || now-at > int64(recentWindow) {
			return false
		}
	}
	return true
}

// last is when it was last asked (unix ns).
func (a *askers) last() int64 {
	var l int64
	for i := range a.at {
		l = max(l, a.at[i].Load())
	}
	return l
}

// chainPoll is one chain's poller state; owned by its goroutine but for
// wake.
type chainPoll struct {
	chain string
	wake  chan struct{}
	inbox chan relayMsg // the polling node's messages, handed over by the relay's goroutine
	held  bool          // this node holds the lease (fleet mode)
	last  stream.Event  // the newest head this node announced
	// gap is the chain's block interval as its heads' times show it
	// (milliseconds); 0 until two heads were seen.
	gap int64
	// due is when the next poll may be made (the schedule); nothing that
	// wakes the poller makes it poll before.
	due time.Time
	// relay is the polling node's newest head not announced yet: a
	// variant this node's clients ask is a page behind it here, until it
	// is refreshed or expires (checked at each tick).
	relay *relayMsg
	// variants bounds the variants' refreshes (variantShare).
	variants *rate.Limiter
	// heard says a subscriber came since the last poll (onListen).
	heard atomic.Bool
	// okAt is when the chain's newest page was last had from the upstream
	// (the core's clock); stale says a stale event was sent since.
	okAt  time.Time
	stale bool
}

// New builds the hub of st (stream.*) for chains (upper case, in
// configured order) and starts the pollers; nil when the stream is off.
func New(core Core, st config.Stream, chains []string, m *metrics.Metrics, relay Relay) *Events {
	if !st.Enabled {
		return nil
	}
	e := &Events{core: core, chains: chains, relay: relay, polls: map[string]*chainPoll{}, stop: make(chan struct{}),
		token:  strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36),
		shared: map[string]map[string]int64{},
		m:      m.StreamPolls(chains)}
	e.asked.Store(&map[string]*askers{})
	e.hub = stream.New(stream.Options{
		Chains: chains, MaxSubscribers: st.MaxSubscribers, MaxPerIP: st.MaxPerIP, Buffer: st.Buffer,
		History: st.History, Heartbeat: st.Heartbeat, WriteTimeout: st.WriteTimeout, RetryHint: st.Retry,
		ClientIP: core.ClientIP,
		OnListen: e.onListen,
		HashAt:   core.HashAt,
		Metrics:  stream.NewMetrics(m.Registry, chains),
		// server.New sets KeepHijackedConns.
		KeptConns: true,
	})
	for _, c := range chains {
		cp := &chainPoll{chain: c, wake: make(chan struct{}, 1), inbox: make(chan relayMsg, 1),
			variants: rate.NewLimiter(0, 1)}
		e.polls[c] = cp
		e.shared[c] = map[string]int64{}
	}
	for _, cp := range e.polls {
		e.wg.Add(1)
		go e.run(cp)
	}
	if relay != nil {
		// The relay's callback must not block (rueidis calls it from its
		// reading goroutine, which relayed's Redis reads would wait for).
		inbox := make(chan []byte, 64)
		relay.WatchEvents(func(msg []byte) {
			select {
			case inbox <- msg:
			default: // behind: the next head comes soon enough
			}
		})
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for {
				select {
				case <-e.stop:
					return
				case msg := <-inbox:
					e.fromRelay(msg)
				}
			}
		}()
	}
	return e
}

// onListen wakes a chain's poller when its first subscriber comes, so
// that a poll due while no one listened is made now rather than an
// interval later; one not due yet waits for its time.
func (e *Events) onListen(chain string, listening bool) {
	if cp := e.polls[chain]; cp != nil && listening {
		cp.heard.Store(true)
		select {
		case cp.wake <- struct{}{}:
		default:
		}
	}
}

// Close stops the pollers (giving up the leases held) and waits for them.
// The hub is the node's to drain and close (node.Drain, node.Close).
func (e *Events) Close() {
	if e == nil {
		return
	}
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
}

// run polls cp's chain while someone listens, at its own pace: every
// stream.poll_interval, in step with the chain's blocks once it knows
// their interval (poll), never before cp.due whatever wakes it.
func (e *Events) run(cp *chainPoll) {
	defer e.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			e.release(cp)
			return
		case <-t.C:
		case <-cp.wake:
		case m := <-cp.inbox:
			cp.relay = &m
		}
		st := e.core.Stream()
		e.share(cp.chain)
		// Someone listens, or listened since the last poll: a stream that
		// came and went within the interval has its poll at its time,
		// neither sooner nor skipped.
		if !e.hub.Listening(cp.chain) && !cp.heard.Load() {
			e.release(cp)
			cp.relay = nil
			t.Reset(st.PollInterval)
			continue
		}
		if cp.relay != nil && e.relayed(cp, *cp.relay, st) {
			cp.relay = nil
		}
		now := time.Now()
		if now.Before(cp.due) {
			t.Reset(e.recheck(cp, cp.due.Sub(now), st))
			continue
		}
		cp.heard.Store(false)
		next := e.poll(cp, st)
		cp.due = time.Now().Add(next) // from the poll's end, as poll measures it
		t.Reset(e.recheck(cp, next, st))
	}
}

// recheck is how long the poller sleeps: d, or less while a relayed head
// waits for a variant.
func (e *Events) recheck(cp *chainPoll, d time.Duration, st config.Stream) time.Duration {
	if cp.relay != nil {
		return min(d, st.PollInterval/4)
	}
	return d
}

func (e *Events) release(cp *chainPoll) {
	if cp.held && e.relay != nil {
		e.relay.ReleaseLease(cp.chain, e.token)
	}
	cp.held = false
	e.m.Leader(cp.chain, false)
}

// Poll results, indexes of metrics.PollResults.
const (
	pollNew = iota
	pollSame
	pollError
)

// alignMargin is how long after a block's due time the poll that should
// find it is made: the upstream's indexing and the clocks' skew.
const alignMargin = 50 * time.Millisecond

// poll asks the chain's newest page once, unless another node holds the
// lease, and announces a new head when it shows one. It returns when to
// poll next: stream.poll_interval, or sooner when a new head's time and
// the chain's block interval say the next block is due sooner (the polls
// fall into step with the chain: one poll per block finds each head a
// margin after it was made, rather than up to an interval late); never
// sooner than a quarter interval.
func (e *Events) poll(cp *chainPoll, st config.Stream) time.Duration {
	next := st.PollInterval
	prev := cp.last
	head, ok := e.pollOnce(cp, st)
	if !ok || head.Time <= 0 || head.Height <= prev.Height {
		return next
	}
	if prev.Height > 0 && head.Height > prev.Height && head.Time > prev.Time {
		cp.gap = (head.Time - prev.Time) / (head.Height - prev.Height)
	}
	if cp.gap > 0 {
		due := time.UnixMilli(head.Time + cp.gap).Add(alignMargin)
		next = min(max(time.Until(due), st.PollInterval/4), st.PollInterval)
	}
	return next
}

// pollOnce is one poll; it returns the head it announced.
func (e *Events) pollOnce(cp *chainPoll, st config.Stream) (stream.Event, bool) {
	if e.relay != nil {
		held, ok := e.relay.Lease(cp.chain, e.token, st.Lease)
		cp.held = held && ok
		if ok && !held {
			e.m.Leader(cp.chain, false)
			// Its staleness is the polling node's to tell (relayed); taking
			// the lease later starts a fresh count. A stale event this node
			// sent while it polled alone is ended here: the polling node
			// has the page.
			if cp.stale {
				e.hub.Publish(stream.Event{Kind: stream.Stale, Chain: cp.chain, Stale: false, Height: cp.last.Height, Time: e.core.Now().UnixMilli()})
			}
			cp.okAt, cp.stale = time.Time{}, false
			return stream.Event{}, false // another node polls: its heads come through relayed
		}
	}
	e.m.Leader(cp.chain, true)
	def := e.headKey(cp.chain, 0)
	items := e.core.ItemsKey(cp.chain)
	head, ok := e.pollHead(cp.chain, def, items)
	e.staleness(cp, st, ok)
	switch {
	case !ok:
		e.m.Poll(cp.chain, pollError)
		return stream.Event{}, false
	case !ahead(head, cp.last):
		e.m.Poll(cp.chain, pollSame)
		return stream.Event{}, false
	case !e.holds(def, head.Height):
		// Stored, but no longer fresh (an answer slower than its TTL):
		// a client would miss it. Announced from the next poll.
		e.m.Poll(cp.chain, pollSame)
		return stream.Event{}, false
	}
	keys := []string{def}
	cp.variants.SetLimit(rate.Limit(variantShare * e.core.Budget() / float64(len(e.chains))))
	cp.variants.SetBurst(max(1, st.Variants))
	for _, k := range e.variants(cp.chain, def, st.Variants) {
		if e.holds(k, head.Height) {
			keys = append(keys, k)
			continue
		}
		// Made of the page of 100 just polled: no call of its own.
		if v, ok := e.fromItems(cp.chain, k, items); ok && v.Height >= head.Height {
			keys = append(keys, k)
			continue
		}
		// Within the variants' share, and behind client misses: one the
		// budget refuses is its clients' miss (and holds this head back
		// while its copy here is served, below).
		if !cp.variants.Allow() {
			continue
		}
		if v, ok := e.fetchVariant(cp.chain, k); ok && v.Height >= head.Height {
			keys = append(keys, k)
		}
	}
	if e.behind(cp.chain, head.Height, st.Variants) {
		// A variant this node's clients ask would be served a block
		// behind the event: the head waits for it (the next poll finds
		// the page refreshed, or the copy gone).
		e.m.Poll(cp.chain, pollSame)
		return stream.Event{}, false
	}
	e.m.Poll(cp.chain, pollNew)
	cp.last = head
	e.hub.Publish(head)
	if cp.held {
		msg, _ := json.Marshal(relayMsg{From: e.token, Chain: cp.chain, Height: head.Height, Hash: head.Hash, Keys: keys})
		e.relay.PublishEvent(msg)
	}
	return head, true
}

// staleness follows whether the chain's newest page is had from the
// upstream (ok: this poll had it): a poll failing for longer than a
// block interval (stream.poll_interval until the interval is known) sends
// a stale event, and the first that succeeds after it another saying it
// is over, so that a page can tell a delay from a chain with no new
// block. The polling node relays both.
func (e *Events) staleness(cp *chainPoll, st config.Stream, ok bool) {
	now := e.core.Now()
	if cp.okAt.IsZero() {
		cp.okAt = now
	}
	switch {
	case ok:
		cp.okAt = now
		if !cp.stale {
			return
		}
		cp.stale = false
	case cp.stale || now.Sub(cp.okAt) <= max(time.Duration(cp.gap)*time.Millisecond, st.PollInterval):
		return
	default:
		cp.stale = true
	}
	ev := stream.Event{Kind: stream.Stale, Chain: cp.chain, Stale: cp.stale, Height: cp.last.Height, Time: cp.okAt.UnixMilli()}
	e.hub.Publish(ev)
	if cp.held {
		msg, _ := json.Marshal(relayMsg{From: e.token, Chain: cp.chain, Kind: "stale", Stale: ev.Stale, Height: ev.Height, Since: ev.Time})
		e.relay.PublishEvent(msg)
	}
}

// behind reports whether a variant this node's clients ask (the first n
// of chain by their last ask, asked by variantClients distinct clients)
// is held here, fresh or served stale, with a page below height: a
// browser told of height would be given that page.
func (e *Events) behind(chain string, height int64, n int) bool {
	now := e.core.Now().UnixNano()
	for _, a := range e.own(chain, n) {
		ent := e.core.Cached(a)
		if st := ent.StateAt(now); st != cache.Fresh && st != cache.Stale {
			continue
		}
		if h, ok := newestOf(ent); ok && h.Height < height {
			return true
		}
	}
	return false
}

// ahead reports whether head is news after last: a higher block, or
// another block at the same height.
func ahead(head, last stream.Event) bool {
	return head.Height > last.Height || (head.Height == last.Height && head.Hash != last.Hash)
}

// holds reports whether the cache holds key fresh with a page whose
// newest block is at least height: nothing to fetch.
func (e *Events) holds(key string, height int64) bool {
	ent := e.core.Cached(key)
	if ent.StateAt(e.core.Now().UnixNano()) != cache.Fresh {
		return false
	}
	h, ok := newestOf(ent)
	return ok && h.Height >= height
}

// fetch loads key, a newest-page question of chain, through the miss path
// (a poll: from the upstream, unless skip says the cache already holds
// what is needed) and returns the newest block of the page stored.
func (e *Events) fetch(chain, key string, skip bool) (stream.Event, bool) {
	if skip {
		return e.headOf(chain, e.core.Cached(key))
	}
	ent := e.core.Poll(chain, key, false)
	if ent == nil {
		return stream.Event{}, false
	}
	return e.headOf(chain, ent)
}

// pollHead polls chain's newest page and returns its newest block. With
// items (Core.ItemsKey) it polls the page of the newest 100 blocks and
// answers def from it, so that def and every variant that page covers
// cost one upstream call a block together; without, or when the page
// does not answer def, def is polled itself.
//
// When the page's blocks are no longer current by the time def is made of
// them (an answer slower than its TTL), the page's own head is returned:
// def does not hold it, and the head is announced from the next poll, as
// when def itself is stored no longer fresh.
func (e *Events) pollHead(chain, def, items string) (stream.Event, bool) {
	if items == "" || items == def {
		return e.fetch(chain, def, false)
	}
	ent := e.core.Poll(chain, items, false)
	if ent == nil {
		return stream.Event{}, false
	}
	if head, ok := e.fromItems(chain, def, items); ok {
		return head, true
	}
	return e.headOf(chain, ent)
}

// fromItems answers key, a newest-page question of chain, from the blocks
// held (Core.FromItems) when items says they answer such questions.
func (e *Events) fromItems(chain, key, items string) (stream.Event, bool) {
	if items == "" {
		return stream.Event{}, false
	}
	if key == items {
		return e.headOf(chain, e.core.Cached(key))
	}
	ent := e.core.FromItems(chain, key)
	if ent == nil {
		return stream.Event{}, false
	}
	return e.headOf(chain, ent)
}

// fetchVariant refreshes key, a variant of chain's newest page, as a
// background call.
func (e *Events) fetchVariant(chain, key string) (stream.Event, bool) {
	ent := e.core.Poll(chain, key, true)
	if ent == nil {
		return stream.Event{}, false
	}
	return e.headOf(chain, ent)
}

// headOf is the head event of a stored newest page.
func (e *Events) headOf(chain string, ent *cache.Entry) (stream.Event, bool) {
	ev, ok := newestOf(ent)
	ev.Chain, ev.Kind, ev.Final = chain, stream.Head, e.core.Final(chain)
	return ev, ok
}

// newestOf reads the newest block of a block-list entry: height, hash and
// time (Unix milliseconds).
func newestOf(ent *cache.Entry) (ev stream.Event, ok bool) {
	if ent == nil || ent.Status != 0 {
		return ev, false
	}
	ent.WithIdentity(func(body []byte) error {
		jsonparser.ArrayEach(body, func(row []byte, _ jsonparser.ValueType, _ int, _ error) {
			hs, _ := jsonparser.GetString(row, "height")
			h, err := strconv.ParseInt(hs, 10, 64)
			if err != nil || h <= ev.Height {
				return
			}
			hash, _ := jsonparser.GetString(row, "hash")
			ts, _ := jsonparser.GetString(row, "blockTime")
			t, _ := strconv.ParseInt(ts, 10, 64)
			ev.Height, ev.Hash, ev.Time, ok = h, hash, t, true
		}, "data", "[0]", "blockList")
		return nil
	})
	return ev, ok
}

// headKey is the canonical key of chain's newest page with limit (0: the
// default limit), "" when it does not parse.
func (e *Events) headKey(chain string, limit int) string {
	var args fasthttp.Args
	args.Set("chainShortName", chain)
	if limit > 0 {
		args.SetUint("limit", limit)
	}
	var q route.Params
	if q.Parse(&route.Table[route.BlockList], &args, e.chains) != nil {
		return ""
	}
	return string(q.Key)
}

// Asked records a client's newest-page question (key, of chain), asked
// on a miss, so that the variants several clients ask are refreshed with
// each new head; Seen counts the clients that ask it afterwards, on hits.
func (e *Events) Asked(ctx *fasthttp.RequestCtx, chain, key string) {
	if e == nil || e.polls[chain] == nil {
		return
	}
	who, now := e.core.Asker(ctx), e.core.Now().UnixNano()
	if a := (*e.asked.Load())[key]; a != nil {
		a.note(who, now)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.asked.Load()
	if a := old[key]; a != nil { // added meanwhile
		a.note(who, now)
		return
	}
	// A new map: the keys asked within recentWindow, and this one if its
	// chain has room.
	next := make(map[string]*askers, len(old)+1)
	n := 0
	for k, a := range old {
		if now-a.last() <= int64(recentWindow) {
			next[k] = a
			if a.chain == chain {
				n++
			}
		}
	}
	if n < recentMax {
		a := &askers{chain: chain, key: key}
		a.note(who, now)
		next[key] = a
	}
	e.asked.Store(&next)
}

// Seen counts a client's hit of key, a block list, when key is a
// newest-page question clients asked lately (Asked). It does not
// allocate: it is on the hit path.
func (e *Events) Seen(ctx *fasthttp.RequestCtx, key string) {
	if e == nil {
		return
	}
	if a := (*e.asked.Load())[key]; a != nil {
		a.note(e.core.Asker(ctx), e.core.Now().UnixNano())
	}
}

// SeenBytes is Seen of a key held as bytes.
func (e *Events) SeenBytes(ctx *fasthttp.RequestCtx, key []byte) {
	if e == nil {
		return
	}
	if a := (*e.asked.Load())[string(key)]; a != nil {
		a.note(e.core.Asker(ctx), e.core.Now().UnixNano())
	}
}

// own are up to n newest-page questions of chain other than its default
// page that variantClients distinct clients of this node asked within
// recentWindow, the most recently asked first.
func (e *Events) own(chain string, n int) []string {
	if n <= 0 {
		return nil
	}
	now := e.core.Now().UnixNano()
	var qs []*askers
	for _, a := range *e.asked.Load() {
		if a.chain == chain && a.qualified(now) {
			qs = append(qs, a)
		}
	}
	// The same order from one call to the next (poll and behind ask
	// twice), whatever the map's: by last ask, then by key.
	slices.SortFunc(qs, func(x, y *askers) int {
		return cmp.Or(cmp.Compare(y.last(), x.last()), cmp.Compare(x.key, y.key))
	})
	def := e.headKey(chain, 0)
	var out []string
	for _, a := range qs {
		if len(out) == n {
			break
		}
		if a.key != def && e.isHeadKey(chain, a.key) {
			out = append(out, a.key)
		}
	}
	return out
}

// share adds the variants of chain this node's clients ask (own) to the
// fleet's record, each at most once per shareEvery, so that the polling
// node refreshes them too; a no-op without the relay.
func (e *Events) share(chain string) {
	if e.relay == nil {
		return
	}
	now := e.core.Now()
	ns := now.UnixNano()
	e.mu.Lock()
	done := e.shared[chain]
	for k, at := range done {
		if ns-at > int64(recentWindow) {
			delete(done, k)
		}
	}
	var keys []string
	for _, k := range e.own(chain, recentMax) {
		if at, ok := done[k]; !ok || ns-at >= int64(shareEvery) {
			keys = append(keys, k)
		}
	}
	e.mu.Unlock()
	if len(keys) == 0 || !e.relay.ShareVariants(chain, keys, now, recentWindow, recentMax) {
		return // Redis down: tried again at the next tick
	}
	e.mu.Lock()
	for _, k := range keys {
		done[k] = ns
	}
	e.mu.Unlock()
}

// variants are up to n newest-page keys of chain other than def that
// variantClients distinct clients asked in the last recentWindow: this
// node's own first, then, in a fleet, the most recent of the fleet's
// record (Relay.Variants: those of every node). Whatever names a key, it
// is fetched only if it is a canonical newest-page question of chain
// (isHeadKey).
func (e *Events) variants(chain, def string, n int) []string {
	if n <= 0 {
		return nil
	}
	out := e.own(chain, n)
	if e.relay != nil && len(out) < n {
		now := e.core.Now()
		keys, _ := e.relay.Variants(chain, now.Add(-recentWindow), 2*n+1)
		for _, k := range keys {
			if k != def && len(out) < n && len(k) <= maxKeyLen && !slices.Contains(out, k) && e.isHeadKey(chain, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// maxKeyLen bounds a key read from the fleet's record before it is parsed.
const maxKeyLen = 512

// isHeadKey reports whether key is a canonical newest-page question of
// chain: what a relayed message or the top-keys table names is checked
// before it is fetched or announced.
func (e *Events) isHeadKey(chain, key string) bool {
	var q route.Params
	q.ParseKey(&route.Table[route.BlockList], key)
	return string(q.Key) == key && string(q.Chain) == chain && route.IsHeadList(route.BlockList, q.Height, q.Page)
}

// relayMsg is what the polling node publishes with a new head: the pages
// it stored with it, for the other nodes to take from the shared tier.
// Height and hash only say what to wait for: a node announces what it
// then holds, never what the message says.
type relayMsg struct {
	From   string   `json:"from"` // the sender's lease token: a node skips its own
	Chain  string   `json:"chain"`
	Kind   string   `json:"kind,omitempty"` // "stale": a stale event (Stale, Since); else a head
	Height int64    `json:"height"`
	Hash   string   `json:"hash,omitempty"`
	Keys   []string `json:"keys,omitempty"`
	Stale  bool     `json:"stale,omitempty"`
	Since  int64    `json:"since,omitempty"`
}

// fromRelay takes a message of the polling node, on the relay's
// goroutine: checked, then handed to its chain's poller (a newer one
// replaces one not taken yet).
func (e *Events) fromRelay(b []byte) {
	var m relayMsg
	if json.Unmarshal(b, &m) != nil || m.From == e.token {
		return
	}
	cp := e.polls[m.Chain]
	if cp == nil || !e.hub.Listening(m.Chain) {
		return
	}
	if m.Kind == "stale" {
		e.hub.Publish(stream.Event{Kind: stream.Stale, Chain: m.Chain, Stale: m.Stale, Height: m.Height, Time: m.Since})
		return
	}
	if m.Kind != "" || len(m.Keys) == 0 || len(m.Keys) > 1+config.MaxStreamVariants || m.Keys[0] != e.headKey(m.Chain, 0) {
		return
	}
	for {
		select {
		case cp.inbox <- m:
			return
		default:
		}
		select {
		case <-cp.inbox: // the older one: this is newer news
		default:
		}
	}
}

// relayed takes another node's new head, on the chain's poller: the pages
// it names are copied from the shared tier into this node's cache
// (checked as every shared entry is), and the head the default page holds
// is announced, once every variant this node's clients ask holds it or
// is not served here (behind). It reports whether m is done with.
func (e *Events) relayed(cp *chainPoll, m relayMsg, st config.Stream) bool {
	if m.Height < cp.last.Height || (m.Height == cp.last.Height && m.Hash == cp.last.Hash) {
		return true
	}
	def := m.Keys[0]
	keys := append(slices.Clip(m.Keys), e.own(m.Chain, st.Variants)...)
	for _, k := range keys {
		if e.isHeadKey(m.Chain, k) && !e.holds(k, m.Height) {
			e.core.Warm(m.Chain, k)
		}
	}
	head, ok := e.headOf(m.Chain, e.core.Cached(def))
	if !ok || head.Height < m.Height || !e.holds(def, head.Height) {
		return false
	}
	if e.behind(m.Chain, head.Height, st.Variants) {
		return false
	}
	e.m.Relayed(m.Chain)
	cp.last = head
	e.hub.Publish(head)
	return true
}

// Reorg announces a reorganization this node's chain truth found (each
// node announces its own: followers' truth is fed by the pages they take
// from the shared tier).
func (e *Events) Reorg(r *truth.Reorg) {
	if e == nil {
		return
	}
	e.hub.Publish(stream.Event{Kind: stream.Reorg, Chain: r.Chain, Fork: r.Fork, Depth: r.Depth, Hash: r.NewHash})
}

// Hub is the stream's hub; nil when the stream is off.
func (e *Events) Hub() *stream.Hub {
	if e == nil {
		return nil
	}
	return e.hub
}
