// Package events feeds the stream of chain events (package stream's Hub)
// from the request core: a poller per chain asks the newest block page
// through the core's miss path while someone listens, and announces a head
// only once the pages clients ask hold it; in a fleet one node polls and
// the others take the pages it names from the shared tier.
package events

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
	"explorer-edge/proxy/admin"
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
// variants are the fleet's: each node adds those its clients ask to a
// record in Redis (share), which the polling node reads (variants). While
// Redis does not answer, each node polls alone (within its local share of
// the budget).

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
	Poll(chain, key string) *cache.Entry
	// Cached is what memory holds under key (nil: nothing).
	Cached(key string) *cache.Entry
	// Warm copies key from the shared tier into memory, as a miss that
	// found it there would.
	Warm(chain, key string)
	// Final is chain's finalized height.
	Final(chain string) int64
	// TopKeys are the most asked keys of the last minutes, with their
	// routes' names.
	TopKeys(now int64) []admin.TopKey
	// Stream is stream.* of the configuration in force.
	Stream() config.Stream
	// ClientIP is the address the per-IP caps count a request under.
	ClientIP(ctx *fasthttp.RequestCtx) netip.Addr
	Now() time.Time
}

// recentWindow is how long a newest-page question a client asked stays
// among the variants refreshed with each new head.
const recentWindow = 5 * time.Minute

// recentMax bounds the record of newest-page questions per chain.
const recentMax = 64

// shareEvery is how often at most a node shares one key with the fleet's
// record of variants (Relay.ShareVariants), and reads its top keys for it.
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

	mu     sync.Mutex
	recent map[string]map[string]int64 // chain -> newest-page key -> last asked (unix ns)
	shared map[string]map[string]int64 // chain -> newest-page key -> last shared with the fleet (unix ns)
	topAt  map[string]int64            // chain -> when its top keys were last shared (unix ns)
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

// New builds the hub of st (stream.*) for chains (upper case, in
// configured order) and starts the pollers; nil when the stream is off.
func New(core Core, st config.Stream, chains []string, m *metrics.Metrics, relay Relay) *Events {
	if !st.Enabled {
		return nil
	}
	e := &Events{core: core, chains: chains, relay: relay, polls: map[string]*chainPoll{}, stop: make(chan struct{}),
		token:  strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36),
		recent: map[string]map[string]int64{}, shared: map[string]map[string]int64{}, topAt: map[string]int64{},
		m: m.StreamPolls(chains)}
	e.hub = stream.New(stream.Options{
		Chains: chains, MaxSubscribers: st.MaxSubscribers, MaxPerIP: st.MaxPerIP, Buffer: st.Buffer,
		History: st.History, Heartbeat: st.Heartbeat, WriteTimeout: st.WriteTimeout, RetryHint: st.Retry,
		ClientIP: core.ClientIP,
		OnListen: e.onListen,
		Metrics:  stream.NewMetrics(m.Registry, chains),
		// server.New sets KeepHijackedConns.
		KeptConns: true,
	})
	for _, c := range chains {
		cp := &chainPoll{chain: c, wake: make(chan struct{}, 1)}
		e.polls[c] = cp
		e.recent[c] = map[string]int64{}
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
					e.relayed(msg)
				}
			}
		}()
	}
	return e
}

// onListen wakes a chain's poller when its first subscriber comes, so
// that the first poll does not wait an interval.
func (e *Events) onListen(chain string, listening bool) {
	if cp := e.polls[chain]; cp != nil && listening {
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

// run polls cp's chain every stream.poll_interval while someone listens.
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
		}
		st := e.core.Stream()
		next := st.PollInterval
		e.share(cp.chain)
		if e.hub.Listening(cp.chain) {
			next = e.poll(cp, st)
		} else {
			e.release(cp)
		}
		t.Reset(next)
	}
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
func (e *Events) pollOnce(cp *chainPoll, st config.Stream) (stream.Event, bool) {
	if e.relay != nil {
		held, ok := e.relay.Lease(cp.chain, e.token, st.Lease)
		cp.held = held && ok
		if ok && !held {
			e.m.Leader(cp.chain, false)
			return stream.Event{}, false // another node polls: its heads come through relayed
		}
	}
	e.m.Leader(cp.chain, true)
	def := e.headKey(cp.chain, 0)
	head, ok := e.fetch(cp.chain, def, false)
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
	for _, k := range e.variants(cp.chain, def, st.Variants) {
		// Best effort: a variant that fails is a miss for its client, not
		// a head held back from everyone.
		if v, ok := e.fetch(cp.chain, k, e.holds(k, head.Height)); ok && v.Height >= head.Height {
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
	ent := e.core.Poll(chain, key)
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

// Asked records a client's newest-page question (key, of chain), so that
// the variants clients ask are refreshed with each new head. It is called
// on misses (a variant asked at all is missed once per TTL); the top-keys
// sampler adds the ones kept fresh.
func (e *Events) Asked(chain, key string) {
	if e == nil {
		return
	}
	now := e.core.Now().UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	rec := e.recent[chain]
	if rec == nil {
		return
	}
	if _, ok := rec[key]; !ok && len(rec) >= recentMax {
		e.pruneLocked(rec, now)
		if len(rec) >= recentMax {
			return
		}
	}
	rec[key] = now
}

func (e *Events) pruneLocked(rec map[string]int64, now int64) {
	for k, at := range rec {
		if now-at > int64(recentWindow) {
			delete(rec, k)
		}
	}
}

// share adds the newest-page questions of chain asked of this node since
// they were last shared (and, every shareEvery, the ones its top-keys
// sampler shows kept fresh) to the fleet's record, so that the polling
// node refreshes them too. A key is shared at most once per shareEvery; a
// no-op without the relay.
func (e *Events) share(chain string) {
	if e.relay == nil {
		return
	}
	now := e.core.Now()
	ns := now.UnixNano()
	var keys []string
	add := func(k string) {
		if at, ok := e.shared[chain][k]; (!ok || ns-at >= int64(shareEvery)) && !slices.Contains(keys, k) && len(keys) < recentMax {
			keys = append(keys, k)
		}
	}
	e.mu.Lock()
	rec, done := e.recent[chain], e.shared[chain]
	if rec == nil {
		e.mu.Unlock()
		return
	}
	for k, at := range done {
		if ns-at > int64(recentWindow) {
			delete(done, k)
		}
	}
	for k, at := range rec {
		if s, ok := done[k]; !ok || at > s {
			add(k)
		}
	}
	top := ns-e.topAt[chain] >= int64(shareEvery)
	if top {
		e.topAt[chain] = ns
	}
	e.mu.Unlock()
	if top {
		for _, tk := range e.core.TopKeys(ns) {
			if tk.Route == route.Table[route.BlockList].Name && e.isHeadKey(chain, tk.Key) {
				add(tk.Key)
			}
		}
	}
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
// clients asked in the last recentWindow: the most asked first (the
// top-keys sampler), then the most recent; in a fleet the most recent of
// the fleet's record (Relay.Variants: asked of any node), then those of
// this node's own not shared yet. Whatever names a key, it is fetched only
// if it is a canonical newest-page question of chain (isHeadKey).
func (e *Events) variants(chain, def string, n int) []string {
	if n <= 0 {
		return nil
	}
	now := e.core.Now().UnixNano()
	var out []string
	add := func(k string) {
		if k != def && len(out) < n && !slices.Contains(out, k) && e.isHeadKey(chain, k) {
			out = append(out, k)
		}
	}
	for _, tk := range e.core.TopKeys(now) {
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
	if e.relay != nil && len(out) < n {
		// def and this node's own top keys may be among them: a few more.
		keys, _ := e.relay.Variants(chain, time.Unix(0, now).Add(-recentWindow), 2*n+1)
		for _, k := range keys {
			if len(k) <= maxKeyLen {
				add(k)
			}
		}
	}
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
	Height int64    `json:"height"`
	Hash   string   `json:"hash"`
	Keys   []string `json:"keys"`
}

// relayed takes another node's new head: the pages it names are copied
// from the shared tier into this node's cache (checked as every shared
// entry is), then the head the default page holds is announced.
func (e *Events) relayed(b []byte) {
	var m relayMsg
	if json.Unmarshal(b, &m) != nil || m.From == e.token || len(m.Keys) == 0 || len(m.Keys) > 1+config.MaxStreamVariants {
		return
	}
	cp := e.polls[m.Chain]
	if cp == nil || !e.hub.Listening(m.Chain) {
		return
	}
	def := e.headKey(m.Chain, 0)
	if m.Keys[0] != def {
		return
	}
	for _, k := range m.Keys {
		if e.isHeadKey(m.Chain, k) && !e.holds(k, m.Height) {
			e.core.Warm(m.Chain, k)
		}
	}
	if head, ok := e.headOf(m.Chain, e.core.Cached(def)); ok && head.Height >= m.Height && e.holds(def, head.Height) {
		e.m.Relayed(m.Chain)
		e.hub.Publish(head)
	}
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
