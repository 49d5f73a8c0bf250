// Package proxy is explorer-edge's request core: one question's way from
// Handle to the answer, each step a call in one function per path: route
// (proxy/route), admission (proxy/admission), parameters, the cache
// decision, the flight that merges identical misses, the shared tier, the
// upstream fetch (proxy/upstream), the store and the writer; per-hash
// batches; the chain-truth wiring. docs/design.md, "The path of one
// question", walks it step by step.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"explorer-edge/cache"
	"explorer-edge/cache/disk"
	"explorer-edge/cdn"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/admin"
	"explorer-edge/proxy/admission"
	"explorer-edge/proxy/blocks"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/events"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/reply"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/server"
	"explorer-edge/proxy/tracing"
	"explorer-edge/proxy/truth"
	"explorer-edge/proxy/upstream"
)

// settings are the parts of the configuration a reload may change. They are
// swapped whole, so a request sees one consistent set.
type settings struct {
	cfg         config.Config
	chains      []string // upper case
	ttl         [route.Count]cache.TTLs
	routePolicy bool // cache.policy "route": one TTL per route
	auth        *admission.Rules
	memo        *route.Memo     // what raw URIs parsed to under these settings
	cors        *admission.CORS // nil: no CORS headers
	purgeToken  *[32]byte       // digest of admin.purge_token; nil: purge is off
	cdn         *reply.CDN      // behind a CDN: tags and lifetimes (cdn.tag_header); nil: none
}

// Proxy serves the six routes. Create it with New.
type Proxy struct {
	settings atomic.Pointer[settings] // what a reload may change, swapped whole
	cache    *cache.Cache
	tiers    tiers          // the tiers under memory: disk, then shared
	up       *upstream.Pool // the upstream accounts, their budgets and byte gate
	truth    *truth.Chains  // heads, finalized heights, recent hashes, reorganizations (reorg.go)
	blocks   *blocks.Store  // each chain's blocks, block-list pages are assembled from (blocklist.go)
	purges   *purge.Purger  // purges: applied, logged to judge answers stored after them, shared with the fleet
	events   *events.Events // the stream of chain events and its poller (package events); nil when off
	work     work           // flights of misses, batches, background refreshes
	metrics  *metrics.Metrics
	log      *slog.Logger
	// now is the clock of cache decisions; tests move it. nil = time.Now.
	now func() time.Time
	ops ops // what the operator sees: tracing, request ids, sampled logs, top keys, the configuration's record

	// cdn carries purges to the CDN (cdn.provider, cdn.go); nil: none.
	cdn *cdn.Sender
}

// tiers are the caches under memory, asked in this order on a miss.
type tiers struct {
	disk   *disk.Store // the disk tier of final answers (cache.disk_path); nil: none
	shared Tier        // the shared tier, asked through Proxy.shared (tier.go); nil on a single node
	// diskOff says why the disk tier is off with cache.disk_path set
	// (Options.DiskOff): Ready says it.
	diskOff string
}

// work is what the core has under way: the flights that merge identical
// misses, the pooled queries, and the background refreshes. refreshing
// holds the keys with a refresh under way, so a stale key costs one
// goroutine however many requests see it stale; Close waits for bg.
type work struct {
	flight     singleflight.Group
	batch      *batcher // per-hash misses, batched (batch.go)
	queries    sync.Pool
	mu         sync.Mutex // guards refreshing and closed
	refreshing map[string]struct{}
	closed     bool
	bg         sync.WaitGroup
}

// ops is what the operator sees of the core beside metrics and logs.
type ops struct {
	tr      *tracing.Tracing  // nil: tracing off (trace.go)
	ids     server.RequestIDs // X-Request-Id of requests that came without one
	repeats logsample.Repeats // sampling of the lines clients can repeat
	// accessSample is the access log's sampling threshold (see access);
	// 0 = no access log, one load and compare on the hit path.
	accessSample atomic.Uint64
	top          admin.Top        // the most-asked keys, sampled
	conf         admin.ConfigInfo // the configuration's hash and reloads, for GET /config
	draining     atomic.Bool      // /readyz says not ready
}

// Options are the collaborators of a Proxy beside its configuration.
type Options struct {
	Cache   *cache.Cache     // required
	Metrics *metrics.Metrics // required
	Logger  *slog.Logger     // nil = discard
	Now     func() time.Time // nil = time.Now
	// Disk is the disk tier of final answers under the memory cache
	// (cache/disk, cache.disk_path): asked after memory and before the
	// shared tier, written from keep, purged with memory. The caller
	// opens it and closes it after the proxy. nil = none.
	Disk *disk.Store
	// DiskOff says why Disk is nil although cache.disk_path is set: its
	// file could not be opened (node.Parts.DiskOff). "" = not off.
	DiskOff string
	Tier    Tier // nil = single node
	// Fleet carries purges between the nodes (fleet.Redis, the Tier's
	// Redis); nil = purges stay on this node.
	Fleet  purge.Fleet
	Budget upstream.Budget // upstream quota; nil = a local token bucket of upstream.rate
	// AccountBudget makes the budgets of upstream.accounts; nil = local
	// token buckets of their rates.
	AccountBudget upstream.AccountBudget
	// Tracer turns tracing on (NewTracerProvider); nil = off.
	Tracer trace.TracerProvider
	// Relay shares the event stream's poll between the nodes (fleet.Redis);
	// nil = this node polls alone.
	Relay events.Relay
}

// New builds a proxy from a validated configuration.
func New(cfg config.Config, o Options) (*Proxy, error) {
	p := &Proxy{cache: o.Cache, tiers: tiers{disk: o.Disk, diskOff: o.DiskOff}, metrics: o.Metrics, log: o.Logger, now: o.Now, ops: ops{tr: tracing.New(o.Tracer)},
		work: work{refreshing: map[string]struct{}{}}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	s, err := newSettings(cfg, o.Metrics)
	if err != nil {
		return nil, err
	}
	p.purges = purge.New(p.cache, purge.Options{Metrics: p.metrics, Logger: p.log, Clock: p.clock, Sample: p.sampleWarn, Disk: o.Disk,
		Chains: s.chains, InFlight: func() time.Duration { return p.settings.Load().inflight() }, Retain: p.retain})
	if o.Tier != nil {
		p.tiers.shared = o.Tier
	}
	p.truth = truth.New(s.chains)
	p.blocks = blocks.New(s.chains)
	if o.Disk != nil {
		// This node's finalized heights, kept by the disk tier across a
		// restart (docs/disk.md): settled answers are classed final
		// before the first block list shows a done block, and every
		// commit keeps them as they rise.
		for chain, h := range o.Disk.Finals() {
			p.truth.Restore(chain, h)
		}
		o.Disk.Track(s.chains, p.truth.Final)
	}
	p.metrics.HeadAges(s.chains, func(chain string) (float64, bool) {
		h, _, asked := p.truth.Head(chain)
		if h == 0 {
			return 0, false
		}
		return p.clock().Sub(time.Unix(0, asked)).Seconds(), true
	})
	p.settings.Store(s)
	p.finalityDepths(s)
	p.ops.accessSample.Store(logsample.Threshold(cfg.Log.AccessSample))
	p.ops.top.Init(cfg.Admin.TopSample)
	p.configApplied(&cfg, true)
	p.ops.ids.Init()
	p.up, err = upstream.NewPool(cfg.Upstream, upstream.Options{Metrics: p.metrics, Log: p.log,
		Budget: o.Budget, AccountBudget: o.AccountBudget, Tracing: p.ops.tr, Sample: p.sampleWarn,
		// An eighth of the cache's bytes in answers being fetched at once,
		// and never less than one answer of the largest size.
		InflightBytes: max(cfg.Cache.MaxBytes/8, int64(cfg.Upstream.MaxResponseBytes))})
	if err != nil {
		return nil, err
	}
	p.work.batch = newBatcher(p, cfg.Cache.BatchWindow)
	p.work.queries.New = func() any {
		return &query{Params: route.Params{Key: make([]byte, 0, 256)}, scratch: make([]byte, 0, 128)}
	}
	if o.Fleet != nil {
		p.purges.OnFleetReorg(p.learnReorg) // reorg.go: one report a reorganization, fleet-wide
		p.purges.Join(o.Fleet)
	}
	if err := p.startCDN(cfg, o.Fleet); err != nil {
		return nil, err
	}
	p.events = events.New(eventsCore{p}, cfg.Stream, s.chains, p.metrics, o.Relay)
	return p, nil
}

func newSettings(cfg config.Config, m *metrics.Metrics) (*settings, error) {
	if err := route.CheckConfig(&cfg); err != nil {
		return nil, err
	}
	s := &settings{cfg: cfg, routePolicy: cfg.Cache.Policy == "route", memo: route.NewMemo(), cors: admission.NewCORS(cfg.CORS)}
	for _, c := range cfg.Chains {
		s.chains = append(s.chains, strings.ToUpper(strings.TrimSpace(c)))
	}
	for i := range route.Table {
		s.ttl[i] = route.TTLs(&route.Table[i], cfg.Cache.TTL)
	}
	s.cdn = reply.NewCDN(cfg.CDN, s.chains)
	var err error
	if s.purgeToken, err = purgeTokenOf(cfg.Admin); err != nil {
		return nil, err
	}
	s.auth, err = admission.New(cfg.Auth, m)
	if err == nil {
		route.SetPositionListMaxLimit(cfg.Upstream.PositionListMaxLimit) // the process's (route.SetPositionListMaxLimit)
	}
	return s, err
}

// Reload applies a new validated configuration: credentials, clients, TTLs,
// rates, retries and timeouts of upstream calls, server.max_url_bytes and
// the access log's sampling. It refuses, whole, a configuration that changes
// what is built once at start (listeners, chains, cache size, fleet, the
// upstream connection pool and breaker, the server's limits): those need a
// restart, and applying the rest would leave the operator believing them
// applied too.
func (p *Proxy) Reload(cfg config.Config) error {
	old := p.settings.Load()
	// Every key is applied below or refused by name (config.ReloadRules).
	if _, err := config.ReloadChanges(&old.cfg, &cfg); err != nil {
		return err
	}
	s, err := newSettings(cfg, p.metrics)
	if err != nil {
		return err
	}
	s.auth.Inherit(old.auth)
	p.up.Reconfigure(cfg.Upstream)
	p.work.batch.window.Store(int64(cfg.Cache.BatchWindow))
	p.settings.Store(s)
	p.finalityDepths(s)
	p.ops.accessSample.Store(logsample.Threshold(cfg.Log.AccessSample))
	p.ops.top.SetEvery(cfg.Admin.TopSample)
	p.configApplied(&cfg, false)
	return nil
}

// SetDraining makes /readyz say not ready while the server drains.
func (p *Proxy) SetDraining(v bool) { p.ops.draining.Store(v) }

// Ready reports whether the edge can answer: not draining, and able to
// fetch or holding something to serve. An open breaker or an upstream
// lock-out (429 Retry-After) with nothing cached is not ready; with entries
// cached the node still serves them (a lock-out is the account's, so every
// node of a fleet has it: none would be left to a load balancer), and the
// reason says so. So does a failed upstream self-check (upstream/selfcheck.go): not
// ready only when it refused the base_url or the credentials and nothing
// is cached.
func (p *Proxy) Ready() (bool, string) {
	if p.ops.draining.Load() {
		return false, "draining"
	}
	empty := p.cache.Entries() == 0
	if p.up.BreakerOpen() && empty {
		return false, "upstream breaker open and nothing cached"
	}
	if until, ok := p.up.LockedUntil(time.Now()); ok {
		why := "upstream throttled until " + until.UTC().Format(time.RFC3339)
		if empty {
			return false, why + " and nothing cached"
		}
		return true, "ok; " + why + ", serving cached answers"
	}
	if notReady, why := p.up.SelfCheckReason(empty); notReady {
		return false, why + "; nothing cached"
	} else if why != "" {
		return true, "ok; " + why
	}
	if failing := p.up.Failing(); failing != "" {
		return true, "ok; failing upstream accounts (asked only when no other can be): " + failing
	}
	if off := p.tiers.diskOff; off != "" {
		return true, "ok; disk tier off, serving without it: " + off
	}
	if fin := p.finalityDetail(); fin != "" {
		return true, "ok; " + fin
	}
	return true, "ok"
}

func (p *Proxy) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// judgedAt is the time a request's cache entry is judged at: when fasthttp
// read the request (start), or the test clock.
func (p *Proxy) judgedAt(start time.Time) time.Time {
	if p.now != nil {
		return p.now()
	}
	return start
}

// Handle is the fasthttp handler of the public listener. A request reads top
// to bottom: route, admission, parameters, cache, flight, fetch. A URI asked
// before under the same settings skips routing and parsing (route.Memo), and is
// answered at once when its entry is fresh.
func (p *Proxy) Handle(ctx *fasthttp.RequestCtx) {
	defer p.recoverRequest(ctx, "public")
	if p.ops.tr != nil {
		p.handleTraced(ctx)
		return
	}
	if c := p.handle(ctx); c != nil && c.Policy != nil {
		admission.RateLimitHeaders(ctx, c)
	}
}

// handle answers ctx and returns the signed client it came from, if any.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) *admission.Client {
	start := ctx.Time() // fasthttp reads the clock just before calling us
	if start.IsZero() {
		start = time.Now() // a RequestCtx not from a server (benchmarks)
	}
	p.ops.ids.Set(ctx)
	s := p.settings.Load() // the one load of this request's settings
	if e := server.FramingError(&ctx.Request.Header); e != nil {
		p.refuseFraming(ctx, s, start, e)
		return nil
	}
	uri := ctx.Request.Header.RequestURI()
	m := s.memo.Lookup(uri)
	var r *route.Route
	if m != nil {
		r = m.Route
	} else if p.events != nil && string(ctx.Path()) == events.Path {
		p.serveEvents(ctx, s, start)
		return nil
	} else if r = route.ByPath(ctx.Path()); r == nil {
		p.fail(ctx, s, route.Unknown, start, envelope.ErrNotFound)
		return nil
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		// A CORS preflight never reaches the upstream; it passes the
		// per-IP limit like any request.
		if s.cors != nil && ctx.IsOptions() {
			if err := s.auth.AdmitIP(ctx, start); err != nil {
				p.fail(ctx, s, r.ID, start, err)
				return nil
			}
			if s.cors.Preflight(ctx) {
				p.metrics.Request(int(r.ID), 0, time.Since(start).Seconds())
				return nil
			}
		}
		p.fail(ctx, s, r.ID, start, envelope.ErrMethod)
		return nil
	}
	if len(uri) > s.cfg.Server.MaxURLBytes {
		p.fail(ctx, s, r.ID, start, envelope.ErrURL)
		return nil
	}
	// Auth comes before the cache: a cached answer is never given to a
	// caller that could not have fetched it.
	c, err := s.auth.Admit(ctx, start)
	s.auth.SetVerified(ctx, c)
	if err != nil {
		p.fail(ctx, s, r.ID, start, err)
		return c
	}
	q := p.work.queries.Get().(*query)
	defer p.work.queries.Put(q)
	q.tenant = s.auth.TenantOf(c)
	q.trace = p.requestTrace(ctx)
	if m != nil && p.serveFresh(ctx, s, q, m, start) {
		return c
	}
	if err := q.Parse(r, ctx.QueryArgs(), s.chains); err != nil {
		p.fail(ctx, s, r.ID, start, err)
		return c
	}
	if m == nil {
		s.memo.Store(uri, q.Key, r)
	}
	p.serve(ctx, s, q, start)
	return c
}

// serveFresh answers a remembered URI when its entry is fresh. Anything else
// (stale, missing) takes the whole path.
func (p *Proxy) serveFresh(ctx *fasthttp.RequestCtx, s *settings, q *query, m *route.Remembered, start time.Time) bool {
	now := p.judgedAt(start)
	e := p.cache.GetString(m.Key)
	state := e.StateAt(now.UnixNano())
	if state != cache.Fresh {
		return false
	}
	if q.trace != nil {
		p.traceCache(q.trace, []byte(m.Key), state, start)
	}
	p.ops.top.Sample(m.Key, m.Route.ID, now.UnixNano())
	if m.Route.ID == route.BlockList {
		p.events.Seen(ctx, m.Key) // the stream's variants count who asks
	}
	p.writeEntry(ctx, s, q, e, now, reply.Hit)
	p.answered(ctx, s, m.Route.ID, metrics.ResultHit, entryCode(e), start)
	return true
}

// serve answers a valid request from cache or upstream.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx, s *settings, q *query, start time.Time) {
	now := p.judgedAt(start)
	p.ops.top.SampleBytes(q.Key, q.Route.ID, now.UnixNano())
	e := p.cache.Get(q.Key)
	state := e.StateAt(now.UnixNano())
	if q.trace != nil {
		p.traceCache(q.trace, q.Key, state, start)
	}
	if q.Route.ID == route.BlockList && state != cache.Missing {
		p.events.SeenBytes(ctx, q.Key)
	}
	switch state {
	case cache.Fresh:
		p.writeEntry(ctx, s, q, e, now, reply.Hit)
		p.answered(ctx, s, q.Route.ID, metrics.ResultHit, entryCode(e), start)
		return
	case cache.Stale:
		p.writeEntry(ctx, s, q, e, now, reply.StaleRevalidate)
		p.answered(ctx, s, q.Route.ID, metrics.ResultStale, "0", start)
		p.refresh(s, q)
		return
	}
	if q.Route.PerHash {
		p.serveBatch(ctx, s, q, e, start, now)
		return
	}
	if route.IsHeadList(q.Route.ID, q.PinHeight(), q.Page) {
		p.events.Asked(ctx, string(q.Chain), string(q.Key))
	}
	a, leader, err := p.load(s, q.request(e != nil, false))
	p.answer(ctx, s, q, e, a, leader, err, start)
}

// answer writes the outcome of a load: the fetched entry, a passed-through
// upstream envelope, a stale copy standing in for a failure, or the error.
func (p *Proxy) answer(ctx *fasthttp.RequestCtx, s *settings, q *query, old *cache.Entry, a *loaded, leader bool, err error, start time.Time) {
	id := q.Route.ID
	now := p.clock()
	if a != nil {
		p.noteUpstream(ctx, s, a.upstream)
	}
	if old == nil && a != nil {
		old = a.stale
	}
	if err != nil {
		p.staleOrFail(ctx, s, q, old, err, start, now)
		return
	}
	result := metrics.ResultMiss
	st := reply.Miss
	switch {
	case a.revalidate:
		// Served stale like a node's own copy; the flight that found it
		// refreshes it, once, now that it is over.
		result, st = metrics.ResultStale, reply.StaleRevalidate
		if leader {
			p.refresh(s, q)
		}
	case !leader:
		result, st = metrics.ResultCollapsed, reply.Collapsed
	case a.shared:
		result, st = metrics.ResultHit, reply.SharedHit
	case a.disk:
		result, st = metrics.ResultHit, reply.DiskHit
	case a.cached:
		result, st = metrics.ResultHit, reply.Hit
	}
	if a.behind && old != nil {
		// The head never goes back: the copy at hand, older in age but
		// newer in blocks, stands in.
		p.writeEntry(ctx, s, q, old, now, reply.StaleBehind)
		p.answered(ctx, s, id, metrics.ResultStaleError, "0", start)
		return
	}
	if a.entry != nil {
		if !a.stored && st == reply.Miss {
			st = reply.MissNotStored
		}
		p.writeEntry(ctx, s, q, a.entry, now, st)
		p.answered(ctx, s, id, result, entryCode(a.entry), start)
		return
	}
	// An upstream envelope with a code other than "0" that does not refuse
	// the question (envelope.RefusedQuestion; those came as a.entry) is never
	// cached. One that says the upstream is failing is met like any other failure: a
	// copy within stale_if_error stands in for it. Otherwise it is passed
	// through as it came.
	if envelope.UpstreamFailing(a.status, a.code) && old.UsableOnError(now.UnixNano()) {
		p.writeEntry(ctx, s, q, old, now, reply.StaleEnvelope)
		p.answered(ctx, s, id, metrics.ResultStaleError, "0", start)
		return
	}
	ctx.SetStatusCode(a.status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	ctx.Response.Header.SetCanonical(hdrCacheStatus, csMissUncacheable)
	ctx.Response.SetBodyRaw(a.body)
	p.corsHeaders(ctx, s)
	p.metrics.CacheResult(int(id), result)
	p.metrics.Request(int(id), p.metrics.CodeIndex(a.code), time.Since(start).Seconds())
	p.access(ctx, s, id, result, a.code, start)
}

// staleOrFail answers a failure: with old when it may stand in for it at
// now (within stale_if_error, and the failure is the upstream's, not its
// answer to the question), else with the error. It is the one place this
// is decided, for whole-key and per-hash routes.
func (p *Proxy) staleOrFail(ctx *fasthttp.RequestCtx, s *settings, q *query, old *cache.Entry, err error, start, now time.Time) {
	var e *envelope.Error
	answered := errors.As(err, &e) && e.Answered
	if !answered && old.UsableOnError(now.UnixNano()) {
		p.writeEntry(ctx, s, q, old, now, reply.StaleError(err))
		p.answered(ctx, s, q.Route.ID, metrics.ResultStaleError, "0", start)
		return
	}
	p.fail(ctx, s, q.Route.ID, start, err)
}

// answered records a request answered with an envelope of code ("0":
// a success) as the cache result result (metrics.ResultNone: refused before the
// cache): its metrics, its client's account and its access line.
func (p *Proxy) answered(ctx *fasthttp.RequestCtx, s *settings, id route.ID, result metrics.Result, code string, start time.Time) {
	if result != metrics.ResultNone {
		p.metrics.CacheResult(int(id), result)
	}
	p.metrics.Request(int(id), p.metrics.CodeIndex(code), time.Since(start).Seconds())
	p.access(ctx, s, id, result, code, start)
}

// entryCode is the envelope code of a stored answer: "0", or a cached
// refusal's own.
func entryCode(e *cache.Entry) string {
	if e.Status == 0 {
		return "0"
	}
	code, _ := envelope.Code(e.Body)
	return code
}

// loaded is the outcome of one upstream fetch, shared by every request the
// flight merged.
type loaded struct {
	entry  *cache.Entry // a success (code "0")
	stored bool         // entry was cached
	shared bool         // entry came from the shared tier, not the upstream
	disk   bool         // entry came from the disk tier
	cached bool         // entry was already fresh in the cache (the recheck in fill)
	status int          // pass-through: upstream status, code and body
	code   string
	body   []byte
	// stale is a copy from the shared tier, in one of its stale windows,
	// for a node that had none of its own: it stands in for a failure as
	// the node's own stale copy would.
	stale *cache.Entry
	// revalidate: entry is a copy from the shared tier within
	// stale_while_revalidate, served at once; it wants a refresh.
	revalidate bool
	// behind: entry is a head page behind the head seen, not stored; a
	// copy of the request's own is served instead when there is one.
	behind bool
	// upstream is the time of the upstream call the flight made (retries
	// included); 0 when it made none. For the access log.
	upstream time.Duration
}

// load fetches f's key through the flight: concurrent identical misses
// share one upstream call. leader tells whether this caller's fetch ran.
func (p *Proxy) load(s *settings, f *upstream.Request) (a *loaded, leader bool, err error) {
	ch := p.work.flight.DoChan(f.Key, func() (v any, err error) {
		defer p.recoverFlight(&err)
		leader = true
		var fs trace.Span
		f.Trace, fs = p.ops.tr.Span(f.Trace, "flight", attribute.String("cache.key", f.Key))
		a, err := p.fill(s, f)
		tracing.End(fs, err)
		return a, err
	})
	// DoChan runs the fetch in its own goroutine: a caller that goes away
	// does not cancel the leader's fetch, which still fills the cache.
	res := <-ch
	if !leader {
		tracing.Joined(f.Trace)
	}
	if res.Err != nil {
		a, _ := res.Val.(*loaded) // may carry a stale copy from the shared tier
		return a, leader, res.Err
	}
	return res.Val.(*loaded), leader, nil
}

// fill runs once per flight: memory again, then the tiers below it (the
// disk tier, the shared tier), then the upstream.
func (p *Proxy) fill(s *settings, f *upstream.Request) (*loaded, error) {
	// Check again inside the flight: a flight that ended just before this
	// one began has already stored the answer (groupcache's load does the same).
	// A poll (Request.Poll, events.go) asks the upstream: it is asked to
	// find what is newer than the copies held.
	if e := p.cache.GetString(f.Key); !f.Poll && e.StateAt(p.clock().UnixNano()) == cache.Fresh {
		return &loaded{entry: e, stored: true, cached: true}, nil
	}

	// A copy a lower tier holds answers (lower), or stands in if the
	// fetch fails for a request that has no copy of its own (standIn).
	var stale lowerCopy
	if p.tiers.disk != nil && !f.Poll {
		c := p.fromDisk(s, f)
		if a := p.lower(s, f, c); a != nil {
			return a, nil
		}
		f, stale = standIn(f, c, stale)
	}
	if p.tiers.shared != nil && !f.Poll {
		a, c, unlock := p.fromShared(s, f)
		defer unlock()
		if a != nil {
			return a, nil
		}
		f, stale = standIn(f, c, stale)
	}
	// A block list may be made of the blocks held, or of the pages of
	// 100 that hold them; a pinned one only so (blocklist.go).
	if f.Route.ID == route.BlockList && !f.Poll {
		if a, done, err := p.fromBlocks(s, f); done {
			if err == nil {
				if a != nil && a.entry == nil {
					// The upstream's envelope of another code for the page
					// of 100: the question's own copy stands in, as for
					// its own call (never the page of 100's: notStale).
					a.stale = stale.e
				}
				return a, nil
			}
			if !stale.unconfirmed && stale.e.UsableOnError(p.clock().UnixNano()) {
				stale.keep(p, s, p.clock())
			}
			if a == nil {
				a = &loaded{}
			}
			a.stale = stale.e
			return a, err
		}
	}
	// Room for the answer, within budget_wait, or refused like the budget
	// refuses (bytegate.go).
	w, err := p.up.Reserve(f)
	// The answer is as old as the question: the upstream may have answered
	// with what it knew when the call left.
	asked := p.clock()
	var up upstream.Answer
	var took time.Duration
	if err == nil {
		g := *f
		g.Observe = func(body []byte) int64 { return p.observe(f, body, asked.UnixNano()) }
		t0 := time.Now()
		up, err = p.up.Fetch(&g)
		took = time.Since(t0)
	}
	if err == nil {
		a := p.store(s, f, asked, up)
		p.up.Release(w, len(up.Body))
		if a.entry == nil {
			a.stale = stale.e
		}
		a.upstream = took
		return a, nil
	}
	p.up.Release(w, 0)
	if !stale.unconfirmed && stale.e.UsableOnError(p.clock().UnixNano()) {
		// The next request finds it here. Not a copy the upstream has not
		// confirmed: held in memory it would be served as a hit.
		stale.keep(p, s, p.clock())
	}
	return &loaded{stale: stale.e, upstream: took}, err
}

// lowerCopy is a copy of the answer read from a tier below memory: the
// disk tier, or the shared tier.
type lowerCopy struct {
	e    *cache.Entry // nil: none
	disk bool         // read from the disk tier: kept in memory, not written back
	// unconfirmed: e shows blocks this node has not confirmed from the
	// upstream (believe): it never answers while the upstream can be
	// asked, and only stands in for a failure.
	unconfirmed bool
}

// keep keeps c in memory as an entry of its tier.
func (c lowerCopy) keep(p *Proxy, s *settings, now time.Time) {
	if c.disk {
		p.promote(s, c.e, now)
		return
	}
	p.keep(s, c.e, now)
}

// lower is what fill makes of c: fresh, it answers and is kept in memory;
// within stale_while_revalidate it answers at once and is refreshed behind
// (not by a background fetch, which is that refresh). nil: it does not
// answer (standIn).
func (p *Proxy) lower(s *settings, f *upstream.Request, c lowerCopy) *loaded {
	if c.unconfirmed {
		return nil
	}
	switch c.e.StateAt(p.clock().UnixNano()) {
	case cache.Fresh:
		c.keep(p, s, p.clock())
		return &loaded{entry: c.e, stored: true, shared: !c.disk, disk: c.disk}
	case cache.Stale:
		if !f.Background {
			c.keep(p, s, p.clock())
			return &loaded{entry: c.e, stored: true, shared: !c.disk, disk: c.disk, revalidate: true}
		}
	}
	return nil
}

// standIn makes c, a lower tier's copy that did not answer, the copy that
// stands in if f's fetch fails (a node started during an upstream outage
// has nothing of its own), when f has no copy yet: f is then a copy
// saying it has one (the flight's request stays as the handler made it).
func standIn(f *upstream.Request, c, stale lowerCopy) (*upstream.Request, lowerCopy) {
	if f.HaveStale || c.e == nil {
		return f, stale
	}
	g := *f
	g.HaveStale = true
	return &g, c
}

// fromDisk is the disk tier's copy of f's key: a final answer this node
// kept, before a restart too. It passes the checks the shared tier's
// copies pass (admitRead: the key, the envelope, the sizes, the times,
// the ETag), then chain truth judges it (believe: never beyond what this
// node confirmed from the upstream), then the purges this node knows. In
// fleet mode the disk is not read until the fleet's purge log has been
// (another node may have purged an entry while this one was down).
func (p *Proxy) fromDisk(s *settings, f *upstream.Request) lowerCopy {
	if !p.purges.Known() {
		return lowerCopy{disk: true} // a fleet's purges not read yet (purge.Purger.Known)
	}
	_, ds := p.ops.tr.Span(f.Trace, "disk.get")
	e := p.admitRead(s, tierDisk, f.Key, p.tiers.disk.Get(f.Key, p.clock()))
	tracing.End(ds, nil)
	if e == nil {
		return lowerCopy{disk: true}
	}
	v := p.believe(s, tierDisk, f, e, !f.HeadList)
	if v == readNone {
		return lowerCopy{disk: true}
	}
	return lowerCopy{e: p.purges.Judge(e), disk: true, unconfirmed: v == readStandIn}
}

// fromShared asks the shared tier for f's key: its copy answers (lower),
// else the fleet-wide fetch lock is taken, which unlock releases once the
// fetch is over, and another node's answer while it waited answers. Each
// copy is checked (sharedTier) and judged by chain truth (believe): a
// head page behind the head seen, or one showing blocks this node has not
// confirmed from the upstream, is not served.
func (p *Proxy) fromShared(s *settings, f *upstream.Request) (a *loaded, c lowerCopy, unlock func()) {
	_, ts := p.ops.tr.Span(f.Trace, "shared.get")
	e := p.shared(s).Get(f.Key, p.clock())
	tracing.End(ts, nil)
	v := readNone
	if e != nil {
		v = p.believe(s, tierShared, f, e, !f.HeadList)
	}
	if v == readNone {
		e = nil
	}
	c = lowerCopy{e: e, unconfirmed: v == readStandIn}
	if a := p.lower(s, f, c); a != nil {
		return a, c, func() {}
	}
	_, ts = p.ops.tr.Span(f.Trace, "shared.lock")
	unlock, e = p.shared(s).Lock(f.Key, p.clock)
	tracing.End(ts, nil)
	if e != nil && p.believe(s, tierShared, f, e, false) == readServe { // another node fetched it while we waited
		p.keep(s, e, p.clock())
		return &loaded{entry: e, stored: true, shared: true}, c, unlock
	}
	return nil, c, unlock
}

// store turns an upstream answer, its envelope already checked by the
// call, into an entry and caches it if its code is "0", or for the negative
// time if it refuses the question. asked is when the question left: the
// answer is as old as that.
func (p *Proxy) store(s *settings, f *upstream.Request, asked time.Time, up upstream.Answer) *loaded {
	r, key, body := f.Route, f.Key, up.Body
	if up.Code != "0" || up.Status != fasthttp.StatusOK {
		switch envelope.ClassOf(up.Status, up.Code) {
		case envelope.ClassRefusal, envelope.ClassNoData:
			return p.storeRefusal(s, r, key, up.Status, body)
		case envelope.ClassFailure:
			// No account and no stale copy could stand in: the edge's
			// own failure, never the upstream's envelope as an answer
			// (50013 "busy" comes with 200).
			e := envelope.Failure(up.Status, up.Code)
			return &loaded{status: e.Status, code: e.Code, body: envelope.Append(nil, e.Code, e.Msg)}
		}
		return &loaded{status: up.Status, code: up.Code, body: body}
	}
	class := r.Classify(route.Question{Height: f.Height, Hashes: f.Hashes, Final: p.truth.Final(f.Chain),
		Asked: asked, Settle: s.cfg.Cache.CrossChainSettle}, body)
	e := cache.NewEntry(key, body, class, asked, p.ttlFor(s, r, class), route.ClassWindow(s.cfg.Cache.StaleWhileRevalidate, class), s.cfg.Cache.StaleIfError)
	e.Source = cache.SourceUpstream
	e.Tags = purge.Of(e, body, s.chains)
	if up.Behind > 0 {
		// A head page behind the head seen (every account asked lags):
		// never stored, and served only when nothing newer is at hand.
		return &loaded{entry: e, behind: true}
	}
	now := p.clock()
	p.keep(s, e, now)
	if p.tiers.shared != nil {
		p.shared(s).Set(e, now)
	}
	return &loaded{entry: e, stored: true}
}

// storeRefusal caches an upstream envelope that refuses the question
// (envelope.RefusedQuestion) or answers "no data" (envelope.NoData: 50040
// "no data for this block height" and the like, like an empty answer) for
// the route's negative time (its shortest TTL when it
// has none), with its status: asked again, it is a hit, not one more call
// of the quota. It has no stale windows, never stands in for a failure, and
// stays on this node: the shared tier holds successes only.
func (p *Proxy) storeRefusal(s *settings, r *route.Route, key string, status int, body []byte) *loaded {
	now := p.clock()
	// Held as is (a refusal is a short envelope): served reads its code.
	e := cache.NewItem(key, body, cache.Negative, now, s.ttl[r.ID].For(cache.Negative), 0, 0)
	e.Status, e.Source = status, cache.SourceUpstream
	e.Tags = purge.Of(e, body, s.chains)
	p.keep(s, e, now)
	return &loaded{entry: e, stored: true}
}

// keep stores e, tagged, in this node's memory as the purges let it in
// (purge.Purger.Admit): an answer a purge selected while it was on its way
// is dropped, or stored stale. Every entry enters the cache here (promote
// too), and a final one the disk tier as well, queued in one step with its
// verdict; not an answer assembled from per-hash items, which are written
// themselves and assembled again from there.
func (p *Proxy) keep(s *settings, e *cache.Entry, now time.Time) {
	p.keepIn(s, e, now, e.Source != cache.SourceAssembled)
}

// promote is keep for an entry read from the disk tier: into memory, not
// written back.
func (p *Proxy) promote(s *settings, e *cache.Entry, now time.Time) {
	p.keepIn(s, e, now, false)
}

func (p *Proxy) keepIn(s *settings, e *cache.Entry, now time.Time, toDisk bool) {
	p.purges.Admit(e, now.Add(-s.inflight()).UnixNano(), toDisk, func(e *cache.Entry) { p.cache.Set(e, now) })
}

// ttlFor is the fresh time of an answer of class c on route r.
func (p *Proxy) ttlFor(s *settings, r *route.Route, c cache.Class) time.Duration {
	if s.routePolicy {
		return s.ttl[r.ID].Shortest()
	}
	return s.ttl[r.ID].For(c)
}

// refresh fetches a stale key in the background, once however many requests
// see it stale: a key already being refreshed starts nothing (a goroutine
// per stale hit, each waiting for the one refresh, piled up behind a slow
// upstream), and fill's recheck stops a refresh that comes after another
// one finished. A failed refresh leaves the entry be.
func (p *Proxy) refresh(s *settings, q *query) {
	f := q.request(true, true)
	p.background([]string{f.Key}, func([]string) {
		if _, _, err := p.load(s, f); err != nil {
			p.log.Debug("background refresh failed", "route", f.Route.Name, "err", err)
		}
	})
}

// background runs fn in a goroutine on those of keys not already being
// refreshed, and marks them until fn returns; it runs nothing when every
// key is under way or the proxy is closed.
func (p *Proxy) background(keys []string, fn func(keys []string)) {
	p.work.mu.Lock()
	if p.work.closed {
		p.work.mu.Unlock()
		return
	}
	todo := keys[:0]
	for _, k := range keys {
		if _, busy := p.work.refreshing[k]; !busy {
			p.work.refreshing[k] = struct{}{}
			todo = append(todo, k)
		}
	}
	if len(todo) == 0 {
		p.work.mu.Unlock()
		return
	}
	p.work.bg.Add(1)
	p.work.mu.Unlock()
	go func() {
		defer p.work.bg.Done()
		defer p.recoverBackground()
		defer func() {
			p.work.mu.Lock()
			for _, k := range todo {
				delete(p.work.refreshing, k)
			}
			p.work.mu.Unlock()
		}()
		fn(todo)
	}()
}

// Close stops background refreshes from starting and waits, until ctx ends,
// for those under way. Close it before the cache: a refresh still running
// would store into a closed cache.
func (p *Proxy) Close(ctx context.Context) error {
	p.events.Close() // its polls are misses too
	p.closeCDN()
	p.work.mu.Lock()
	p.work.closed = true
	p.work.mu.Unlock()
	done := make(chan struct{})
	go func() { p.work.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SelfCheck asks every upstream account the cheapest question of the
// first chain (upstream/selfcheck.go) and keeps the results for Ready.
func (p *Proxy) SelfCheck(ctx context.Context) error {
	return p.up.SelfCheck(ctx, p.settings.Load().chains[0])
}

// RetrySelfCheck asks the accounts that failed SelfCheck again every
// `every` until each answers or ctx ends.
func (p *Proxy) RetrySelfCheck(ctx context.Context, every time.Duration) {
	p.up.RetrySelfCheck(ctx, p.settings.Load().chains[0], every)
}

// Listener guards ln with the connection caps of cfg (server.Guard); the
// cap per address counts the groups of auth.ip_v6_prefix, and peers in
// auth.trusted_proxies are exempt from it (admission's PeerKey).
func (p *Proxy) Listener(ln net.Listener, cfg server.ListenerConfig) net.Listener {
	return server.Guard(ln, cfg, p.metrics, p.log, func(ip netip.Addr) (netip.Addr, bool) {
		return p.settings.Load().auth.PeerKey(ip)
	})
}

// NewServer is the public fasthttp server of cfg serving Handle
// (server.New).
func (p *Proxy) NewServer(cfg config.Server) *fasthttp.Server {
	return server.New(cfg, p.Handle, p.unreadable(server.HeadersTooLarge(cfg.MaxHeaderBytes)), p.connLogger())
}

// NewAdminServer is the admin port's fasthttp server serving AdminHandler
// (server.NewAdmin).
func (p *Proxy) NewAdminServer(cfg config.Config) *fasthttp.Server {
	return server.NewAdmin(cfg, p.AdminHandler(), func(ctx *fasthttp.RequestCtx, err error) {
		admin.Error(ctx, server.UnreadableError(err, server.ErrAdminHeadersTooLarge))
	}, p.connLogger())
}

// connLogger takes fasthttp's lines into the edge's log, sampled.
func (p *Proxy) connLogger() server.ConnLogger {
	return server.ConnLogger{Log: p.log, Sample: p.sampleWarn}
}
