package proxy

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/buger/jsonparser"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/stream"
	"explorer-edge/proxy/truth"
	"explorer-edge/proxy/upstream"
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
// tier into its own cache before it announces the head from them. While
// Redis does not answer, each node polls alone (within its local share of
// the budget).

// EventsPath is the stream's path, in the edge's own namespace.
const EventsPath = "/edge/v1/events"

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
}

// recentWindow is how long a newest-page question a client asked stays
// among the variants refreshed with each new head.
const recentWindow = 5 * time.Minute

// recentMax bounds the record of newest-page questions per chain.
const recentMax = 64

// events is the hub and its poller.
type events struct {
	p     *Proxy
	hub   *stream.Hub
	relay Relay  // nil: this node polls alone
	token string // this node's lease token
	polls map[string]*chainPoll
	m     *metrics.StreamPolls
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	recent map[string]map[string]int64 // chain -> newest-page key -> last asked (unix ns)
}

// chainPoll is one chain's poller state; owned by its goroutine but for
// wake.
type chainPoll struct {
	chain string
	wake  chan struct{}
	held  bool         // this node holds the lease (fleet mode)
	last  stream.Event // the newest head this node announced
	// gap is the chain's block interval as its heads' times show it
	// (milliseconds); 0 until two heads were seen.
	gap int64
}

// newEvents builds the hub of cfg.Stream and starts the pollers; nil when
// the stream is off.
func newEvents(p *Proxy, cfg config.Config, chains []string, relay Relay) *events {
	if !cfg.Stream.Enabled {
		return nil
	}
	e := &events{p: p, relay: relay, polls: map[string]*chainPoll{}, stop: make(chan struct{}),
		token:  strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36),
		recent: map[string]map[string]int64{}, m: p.metrics.StreamPolls(chains)}
	st := cfg.Stream
	e.hub = stream.New(stream.Options{
		Chains: chains, MaxSubscribers: st.MaxSubscribers, MaxPerIP: st.MaxPerIP, Buffer: st.Buffer,
		History: st.History, Heartbeat: st.Heartbeat, WriteTimeout: st.WriteTimeout, RetryHint: st.Retry,
		ClientIP: func(ctx *fasthttp.RequestCtx) netip.Addr { return p.settings.Load().auth.ClientIP(ctx) },
		OnListen: e.onListen,
		Metrics:  stream.NewMetrics(p.metrics.Registry, chains),
		// server.New sets KeepHijackedConns.
		KeptConns: true,
	})
	for _, c := range chains {
		cp := &chainPoll{chain: c, wake: make(chan struct{}, 1)}
		e.polls[c] = cp
		e.recent[c] = map[string]int64{}
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
					e.relayed(msg)
				}
			}
		}()
	}
	return e
}

// onListen wakes a chain's poller when its first subscriber comes, so
// that the first poll does not wait an interval.
func (e *events) onListen(chain string, listening bool) {
	if cp := e.polls[chain]; cp != nil && listening {
		select {
		case cp.wake <- struct{}{}:
		default:
		}
	}
}

// close stops the pollers (giving up the leases held) and waits for them.
// The hub is the node's to drain and close (node.Drain, node.Close).
func (e *events) close() {
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

// run polls cp's chain every stream.poll_interval while someone listens.
func (e *events) run(cp *chainPoll) {
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
		}
		st := e.p.settings.Load().cfg.Stream
		next := st.PollInterval
		if e.hub.Listening(cp.chain) {
			next = e.poll(cp, st)
		} else {
			e.release(cp)
		}
		t.Reset(next)
	}
}

func (e *events) release(cp *chainPoll) {
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
func (e *events) poll(cp *chainPoll, st config.Stream) time.Duration {
	next := st.PollInterval
	prev := cp.last
	head, ok := e.pollOnce(cp, st)
	if !ok || head.Time <= 0 {
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
func (e *events) pollOnce(cp *chainPoll, st config.Stream) (stream.Event, bool) {
	if e.relay != nil {
		held, ok := e.relay.Lease(cp.chain, e.token, st.Lease)
		cp.held = held && ok
		if ok && !held {
			e.m.Leader(cp.chain, false)
			return stream.Event{}, false // another node polls: its heads come through relayed
		}
	}
	e.m.Leader(cp.chain, true)
	s := e.p.settings.Load()
	def := headKey(s, cp.chain, 0)
	head, ok := e.fetch(s, def, false)
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
	e.m.Poll(cp.chain, pollNew)
	keys := []string{def}
	for _, k := range e.variants(s, cp.chain, def, st.Variants) {
		// Best effort: a variant that fails is a miss for its client, not
		// a head held back from everyone.
		if v, ok := e.fetch(s, k, e.holds(k, head.Height)); ok && v.Height >= head.Height {
			keys = append(keys, k)
		}
	}
	cp.last = head
	e.hub.Publish(head)
	if cp.held {
		msg, _ := json.Marshal(relayMsg{From: e.token, Chain: cp.chain, Height: head.Height, Hash: head.Hash, Keys: keys})
		e.relay.PublishEvent(msg)
	}
	return head, true
}

// ahead reports whether head is news after last: a higher block, or
// another block at the same height.
func ahead(head, last stream.Event) bool {
	return head.Height > last.Height || (head.Height == last.Height && head.Hash != last.Hash)
}

// holds reports whether the cache holds key fresh with a page whose
// newest block is at least height: nothing to fetch.
func (e *events) holds(key string, height int64) bool {
	ent := e.p.cache.GetString(key)
	if ent.StateAt(e.p.clock().UnixNano()) != cache.Fresh {
		return false
	}
	h, ok := newestOf(ent)
	return ok && h.Height >= height
}

// fetch loads key, a newest-page question, through the miss path (a poll:
// from the upstream, unless skip says the cache already holds what is
// needed) and returns the newest block of the page stored.
func (e *events) fetch(s *settings, key string, skip bool) (stream.Event, bool) {
	var q route.Params
	q.ParseKey(&route.Table[route.BlockList], key)
	f := &upstream.Request{Route: q.Route, Key: key, Chain: string(q.Chain), Height: -1, HeadList: true,
		Poll: !skip, Tenant: s.auth.TenantOf(nil)}
	if skip {
		ent := e.p.cache.GetString(key)
		return e.headOf(f.Chain, ent)
	}
	a, _, err := e.p.load(s, f)
	if err != nil || a == nil || a.entry == nil || !a.stored {
		if err != nil {
			e.p.log.Debug("event stream poll failed", "chain", f.Chain, "key", key, "err", err)
		}
		return stream.Event{}, false
	}
	return e.headOf(f.Chain, a.entry)
}

// headOf is the head event of a stored newest page.
func (e *events) headOf(chain string, ent *cache.Entry) (stream.Event, bool) {
	ev, ok := newestOf(ent)
	ev.Chain, ev.Kind, ev.Final = chain, stream.Head, e.p.truth.Final(chain)
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
func headKey(s *settings, chain string, limit int) string {
	var args fasthttp.Args
	args.Set("chainShortName", chain)
	if limit > 0 {
		args.SetUint("limit", limit)
	}
	var q route.Params
	if q.Parse(&route.Table[route.BlockList], &args, s.chains) != nil {
		return ""
	}
	return string(q.Key)
}

// asked records a client's newest-page question, so that the variants
// clients ask are refreshed with each new head. It is called on misses
// (a variant asked at all is missed once per TTL); the top-keys sampler
// adds the ones kept fresh.
func (e *events) asked(q *query) {
	if e == nil || q.Route.ID != route.BlockList || !isHeadList(q.Route.ID, q.Height, q.Page) {
		return
	}
	now := e.p.clock().UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	rec := e.recent[string(q.Chain)]
	if rec == nil {
		return
	}
	if _, ok := rec[string(q.Key)]; !ok && len(rec) >= recentMax {
		e.pruneLocked(rec, now)
		if len(rec) >= recentMax {
			return
		}
	}
	rec[string(q.Key)] = now
}

func (e *events) pruneLocked(rec map[string]int64, now int64) {
	for k, at := range rec {
		if now-at > int64(recentWindow) {
			delete(rec, k)
		}
	}
}

// variants are up to n newest-page keys of chain other than def that
// clients asked in the last recentWindow: the most asked first (the
// top-keys sampler), then the most recent.
func (e *events) variants(s *settings, chain, def string, n int) []string {
	if n <= 0 {
		return nil
	}
	now := e.p.clock().UnixNano()
	var out []string
	add := func(k string) {
		if k != def && len(out) < n && !slices.Contains(out, k) && e.isHeadKey(s, chain, k) {
			out = append(out, k)
		}
	}
	for _, tk := range e.p.ops.top.Report(32, now).Keys {
		if tk.Route == route.Table[route.BlockList].Name {
			add(tk.Key)
		}
	}
	e.mu.Lock()
	rec := e.recent[chain]
	e.pruneLocked(rec, now)
	type asked struct {
		key string
		at  int64
	}
	byTime := make([]asked, 0, len(rec))
	for k, at := range rec {
		byTime = append(byTime, asked{k, at})
	}
	e.mu.Unlock()
	for len(out) < n && len(byTime) > 0 {
		j := 0
		for i := range byTime {
			if byTime[i].at > byTime[j].at {
				j = i
			}
		}
		add(byTime[j].key)
		byTime[j] = byTime[len(byTime)-1]
		byTime = byTime[:len(byTime)-1]
	}
	return out
}

// isHeadKey reports whether key is a canonical newest-page question of
// chain: what a relayed message or the top-keys table names is checked
// before it is fetched or announced.
func (e *events) isHeadKey(s *settings, chain, key string) bool {
	var q route.Params
	q.ParseKey(&route.Table[route.BlockList], key)
	return string(q.Key) == key && string(q.Chain) == chain && isHeadList(route.BlockList, q.Height, q.Page)
}

// relayMsg is what the polling node publishes with a new head: the pages
// it stored with it, for the other nodes to take from the shared tier.
// Height and hash only say what to wait for: a node announces what it
// then holds, never what the message says.
type relayMsg struct {
	From   string   `json:"from"` // the sender's lease token: a node skips its own
	Chain  string   `json:"chain"`
	Height int64    `json:"height"`
	Hash   string   `json:"hash"`
	Keys   []string `json:"keys"`
}

// relayed takes another node's new head: the pages it names are copied
// from the shared tier into this node's cache (checked as every shared
// entry is), then the head the default page holds is announced.
func (e *events) relayed(b []byte) {
	var m relayMsg
	if json.Unmarshal(b, &m) != nil || m.From == e.token || len(m.Keys) == 0 || len(m.Keys) > 1+config.MaxStreamVariants {
		return
	}
	cp := e.polls[m.Chain]
	if cp == nil || !e.hub.Listening(m.Chain) {
		return
	}
	s := e.p.settings.Load()
	def := headKey(s, m.Chain, 0)
	if m.Keys[0] != def {
		return
	}
	for _, k := range m.Keys {
		if e.isHeadKey(s, m.Chain, k) && !e.holds(k, m.Height) {
			e.warm(s, m.Chain, k)
		}
	}
	if head, ok := e.headOf(m.Chain, e.p.cache.GetString(def)); ok && head.Height >= m.Height && e.holds(def, head.Height) {
		e.m.Relayed(m.Chain)
		e.hub.Publish(head)
	}
}

// warm copies key from the shared tier into the cache, feeding chain
// truth with it, as a miss that found it there would.
func (e *events) warm(s *settings, chain, key string) {
	if e.p.tiers.shared == nil {
		return
	}
	f := &upstream.Request{Route: &route.Table[route.BlockList], Key: key, Chain: chain, Height: -1, HeadList: true}
	ent := e.p.shared(s).Get(key, e.p.clock())
	if ent == nil || e.p.observeEntry(f, ent) > 0 || ent.StateAt(e.p.clock().UnixNano()) != cache.Fresh {
		return
	}
	e.p.keep(s, ent, e.p.clock())
}

// reorg announces a reorganization this node's chain truth found (each
// node announces its own: followers' truth is fed by the pages they take
// from the shared tier).
func (e *events) reorg(r *truth.Reorg) {
	if e == nil {
		return
	}
	e.hub.Publish(stream.Event{Kind: stream.Reorg, Chain: r.Chain, Fork: r.Fork, Depth: r.Depth, Hash: r.NewHash})
}

// serveEvents answers the stream's path: CORS (a preflight too), the
// per-IP rate, then the hub. auth.mode signed does not apply: an
// EventSource cannot send headers, and what the stream carries (the
// newest height and hash of each chain) costs the upstream nothing per
// subscriber; the stream caps bound it (docs/stream.md).
func (p *Proxy) serveEvents(ctx *fasthttp.RequestCtx, s *settings, start time.Time) {
	if s.cors != nil && ctx.IsOptions() {
		if err := s.auth.AdmitIP(ctx, start); err != nil {
			p.writeError(ctx, s, err)
			return
		}
		if s.cors.Preflight(ctx) {
			return
		}
	}
	if err := s.auth.AdmitIP(ctx, start); err != nil {
		p.writeError(ctx, s, err)
		return
	}
	p.corsHeaders(ctx, s)
	p.events.hub.Handler(ctx)
}

// Events is the event stream's hub; nil when stream.enabled is off.
func (p *Proxy) Events() *stream.Hub {
	if p.events == nil {
		return nil
	}
	return p.events.hub
}
