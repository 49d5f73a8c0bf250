package proxy

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/truth"
	"explorer-edge/proxy/upstream"
)

// Tier is the shared second cache tier of fleet mode (docs/fleet.md).
// The proxy declares it here, beside its only user; fleet.Redis implements
// it (and gives the shared upstream budget, Options.Budget). Every method
// goes on without Redis when it is slow or down: Get misses, Set drops,
// Lock lets the caller fetch.
type Tier interface {
	// Get returns a usable entry for key, or nil.
	Get(key string, now time.Time) *cache.Entry
	// GetMany is Get for several keys in one round trip: entries[i] is
	// for keys[i]. Per-hash routes look up all their missing hashes at once.
	GetMany(keys []string, now time.Time) (entries []*cache.Entry)
	// Set stores e with its remaining fresh and stale windows.
	Set(e *cache.Entry, now time.Time)
	// Lock takes the fleet-wide fetch lock of key. When another node holds
	// it, Lock waits (bounded) for that node's answer and returns it as
	// filled. unlock is never nil.
	Lock(key string, now func() time.Time) (unlock func(), filled *cache.Entry)
}

// sharedTier is the shared tier as the request core sees it: every entry
// it returns is checked (admitRead) and judged by the purges this node
// knows (purge.Purger.Judge), and an entry a purge selected while its
// answer was on its way is not written to it. Chain truth judges it
// after (believe), where the question is known.
type sharedTier struct {
	Tier
	p *Proxy
	s *settings // the request's: what an entry is checked against
}

// shared is the shared tier under a request's settings s.
func (p *Proxy) shared(s *settings) sharedTier { return sharedTier{Tier: p.tiers.shared, p: p, s: s} }

func (t sharedTier) Get(key string, now time.Time) *cache.Entry {
	return t.p.purges.Judge(t.p.admitRead(t.s, tierShared, key, t.Tier.Get(key, now)))
}

func (t sharedTier) GetMany(keys []string, now time.Time) []*cache.Entry {
	entries := t.Tier.GetMany(keys, now)
	for i, e := range entries {
		entries[i] = t.p.purges.Judge(t.p.admitRead(t.s, tierShared, keys[i], e))
	}
	return entries
}

func (t sharedTier) Set(e *cache.Entry, now time.Time) {
	if !t.p.purges.Purged(e) {
		t.Tier.Set(e, now)
	}
}

// Lock passes on another node's answer only while it is still fresh after
// judging; else the caller fetches (without the lock: one more upstream
// call, never a purged answer).
func (t sharedTier) Lock(key string, now func() time.Time) (func(), *cache.Entry) {
	unlock, e := t.Tier.Lock(key, now)
	if e = t.p.purges.Judge(t.p.admitRead(t.s, tierShared, key, e)); e.StateAt(now().UnixNano()) != cache.Fresh {
		e = nil
	}
	return unlock, e
}

// The tiers under memory, as a read names them (logs, the admin port).
const (
	tierDisk   = "disk"
	tierShared = "shared"
)

// admitRead returns e, read from tier under key, made safe to serve, or
// nil. Both tiers under memory pass the same checks (checkRead): whoever
// can write to Redis, or to the disk's file, must not own the node. A
// refusal is a miss, counted (reads_refused_total{reason="entry"}, and
// shared_rejected_total{reason="entry"} for Redis) and logged at debug.
func (p *Proxy) admitRead(s *settings, tier, key string, e *cache.Entry) *cache.Entry {
	if e == nil {
		return nil
	}
	if why := p.checkRead(s, key, e); why != "" {
		if tier == tierShared {
			p.metrics.SharedRejected.WithLabelValues("entry").Inc()
		}
		p.metrics.ReadsRefused.WithLabelValues(tier, "entry").Inc()
		p.log.Debug("entry read back refused; a miss", "tier", tier, "key", key, "why", why)
		return nil
	}
	if tier == tierShared {
		e.Source = cache.SourceShared
	}
	return e
}

// checkRead says what is wrong with e, read back under key from a tier
// under memory ("" if nothing), and clamps its times, recomputes its ETag
// and tags it. An entry is taken only when it is what the edge would have
// stored had the upstream answered: the key inside it is the key asked,
// its body is an envelope with code "0" (or a per-hash item of JSON
// records) within upstream.max_response_bytes, and its times are no more
// generous than this node's configuration gives its class: stored no
// later than now, fresh for at most its class's TTL, stale windows at
// most the configured ones. Its ETag is computed again from its body (a
// header value must not come from storage), and its purge tags from its
// key and body (a purge must select it whatever the record said). A
// compressed answer is kept so; it is inflated once, into a reused
// buffer, to be checked (the decoders bounded what it declares,
// fleet/entry.go and cache/disk).
func (p *Proxy) checkRead(s *settings, key string, e *cache.Entry) string {
	if e.Key != key {
		return "the entry of another key"
	}
	if e.Size > s.cfg.Upstream.MaxResponseBytes || e.Size < 0 || e.Status != 0 {
		return "size or status"
	}
	var r *route.Route
	if strings.HasPrefix(e.Key, "hash|") {
		if e.Gzip != nil { // items are held as is (cache.NewItem): batches read them
			return "compressed records"
		}
		r = &route.Table[route.TransactionMulti]
	} else {
		path, _, _ := strings.Cut(e.Key, "?")
		if r = route.ByPath([]byte(path)); r == nil {
			return "no route"
		}
	}
	p.clampTimes(s, r, e)
	why := ""
	err := e.WithIdentity(func(body []byte) error {
		switch {
		case len(body) != e.Size:
			why = "body of another size than its record says"
		case strings.HasPrefix(e.Key, "hash|"):
			if len(body) > 0 && !json.Valid(envelope.Wrap(body)) {
				why = "records are not JSON"
			}
		default:
			if code, err := envelope.Code(body); err != nil || code != "0" {
				why = "not an answer of code 0"
			}
		}
		if why == "" {
			e.ComputeETag(body)
			e.Tags = purge.Of(e, body, s.chains)
		}
		return nil
	})
	if err != nil {
		return "gzip: " + err.Error()
	}
	return why
}

// clampTimes holds e's times, read from a tier below memory, to this
// node's configuration for its class on route r: stored no later than
// now, fresh for at most its class's TTL, stale windows at most the
// configured ones.
func (p *Proxy) clampTimes(s *settings, r *route.Route, e *cache.Entry) {
	now := p.clock().UnixNano()
	e.Stored = min(e.Stored, now)
	e.Fresh = min(e.Fresh, e.Stored+int64(p.ttlFor(s, r, e.Class)))
	e.StaleWhileRevalidate = min(e.StaleWhileRevalidate, int64(route.ClassWindow(s.cfg.Cache.StaleWhileRevalidate, e.Class)))
	e.StaleIfError = min(e.StaleIfError, int64(s.cfg.Cache.StaleIfError))
}

// confirmEvery is how often at most a chain is asked its newest page to
// confirm what a tier holds (truth.TryConfirm).
const confirmEvery = int64(time.Second)

// believe judges e, an entry of f's key read back from a tier and
// checked (admitRead), by chain truth (truth.Read), and reports whether
// it may be served. A head page behind the newest head seen is not. One
// that shows blocks this node has not confirmed from the upstream (more
// than truth.Slack above the highest block it had from there, or a hash
// other than the upstream's) is confirmed first when confirm says so: the
// chain's newest page is asked of the upstream, once per chain at a time
// and per confirmEvery (its answer is observed, stored and shared like a
// poll's), then e is judged again; still unconfirmed, it is a miss and f
// is fetched, and the upstream's answer wins. A miss of a newest page
// asks no confirmation (confirm false): its own fetch is one. An entry
// classed final whose question the node would not class final today (a
// transaction list above the finalized height) takes the class the node
// would give it, and its times are held to that class.
//
// An unconfirmed copy may still stand in for a failure (readStandIn), as
// a stale copy does: when the upstream cannot be asked, a node started
// during an outage has nothing else, and a stand-in is never observed,
// announced or stored as the head.
func (p *Proxy) believe(s *settings, tier string, f *upstream.Request, e *cache.Entry, confirm bool) readVerdict {
	v := p.readEntry(f, e, true)
	if v.Unconfirmed && confirm && p.confirm(s, f.Chain, f.Tenant) {
		v = p.readEntry(f, e, true)
	}
	switch {
	case v.Behind > 0:
		return readNone
	case v.Unconfirmed:
		p.metrics.ReadsRefused.WithLabelValues(tier, "unconfirmed").Inc()
		p.log.Debug("entry read back shows blocks the upstream has not confirmed; a miss", "tier", tier, "key", f.Key)
		return readStandIn
	}
	if e.Class == cache.Final && (f.Route.ID == route.TransactionList || f.Route.ID == route.InternalTransactionMulti) {
		e.WithIdentity(func(body []byte) error {
			if c := f.Route.Classify(route.Question{Height: f.Height, Hashes: f.Hashes, Final: p.truth.Final(f.Chain)}, body); c != cache.Final {
				e.Class = c
				p.clampTimes(s, f.Route, e)
			}
			return nil
		})
	}
	return readServe
}

// readVerdict is what believe makes of an entry read back.
type readVerdict uint8

const (
	readNone    readVerdict = iota // not served (a head page behind the head seen)
	readServe                      // served as a hit
	readStandIn                    // unconfirmed: only stands in for a failure
)

// readEntry feeds chain truth the blocks of e, read back from a tier, as
// a read (truth.Read): an answer as old as its Stored time. With apply
// false it only asks what the read would be told (truth.Judge).
func (p *Proxy) readEntry(f *upstream.Request, e *cache.Entry, apply bool) (v truth.Verdict) {
	if f.Route.ID != route.BlockList && f.Route.ID != route.TransactionList {
		return v
	}
	e.WithIdentity(func(body []byte) error {
		blocks := route.Blocks(f.Route.ID, f.Height, body)
		if len(blocks) == 0 && f.Route.ID == route.TransactionList && f.Height >= 0 {
			// No transactions shown: the question's block is still judged
			// (an empty list of a block not made yet is no final answer).
			blocks = []truth.Block{{Height: f.Height}}
		}
		switch {
		case len(blocks) == 0:
		case !apply:
			v = p.truth.Judge(f.Chain, blocks, f.HeadList)
		default:
			v = p.truth.Read(f.Chain, blocks, e.Stored, f.HeadList)
			p.metrics.FinalHeight(f.Chain, p.truth.Final(f.Chain))
		}
		return nil
	})
	return v
}

// confirm asks the upstream chain's newest page (the default question),
// as a poll does, when truth.TryConfirm allows, and reports whether it
// was asked. Concurrent confirmations of a chain share one call.
func (p *Proxy) confirm(s *settings, chain string, t *upstream.Tenant) bool {
	if !p.truth.TryConfirm(chain, p.clock().UnixNano(), confirmEvery) {
		return false
	}
	f := &upstream.Request{Route: &route.Table[route.BlockList], Key: headKey(s, chain), Chain: chain, Height: -1,
		HeadList: true, Poll: true, Tenant: t}
	ch := p.work.flight.DoChan("confirm|"+chain, func() (v any, err error) {
		defer p.recoverFlight(&err)
		return p.fill(s, f)
	})
	if res := <-ch; res.Err != nil {
		p.log.Debug("confirming call failed", "chain", chain, "err", res.Err)
	}
	// Counted once over, as the stream's polls are: the two add up to the
	// calls of the default question.
	p.metrics.Confirms.WithLabelValues(chain).Inc()
	return true
}

// headKey is the key of chain's newest page asked with the defaults (the
// event stream's default question).
func headKey(s *settings, chain string) string {
	var args fasthttp.Args
	args.Set("chainShortName", chain)
	var q route.Params
	q.Parse(&route.Table[route.BlockList], &args, s.chains)
	return string(q.Key)
}
