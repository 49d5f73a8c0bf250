package proxy

import (
	"encoding/json"
	"strings"
	"time"

	"explorer-edge/cache"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
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
// it returns is checked (admitShared) and judged by the purges this node
// knows (purge.Purger.Judge), and an entry a purge selected while its
// answer was on its way is not written to it.
//
// admitShared takes what the shared tier returns as the upstream's
// answers are taken: whoever can write to Redis must not own the fleet.
// An entry is taken only when its body is what the edge would have stored
// (an envelope with code "0", or a per-hash item of JSON records, within
// upstream.max_response_bytes), and its times are no more generous than
// this node's configuration gives its class: stored no later than now,
// fresh for at most its class's TTL, stale windows at most the configured
// ones. Its ETag is computed again from its body (a header value must not
// come from Redis). Anything else is a miss, counted in
// shared_rejected_total{reason="entry"}.
type sharedTier struct {
	Tier
	p *Proxy
	s *settings // the request's: what an entry is checked against
}

// shared is the shared tier under a request's settings s.
func (p *Proxy) shared(s *settings) sharedTier { return sharedTier{Tier: p.tiers.shared, p: p, s: s} }

func (t sharedTier) Get(key string, now time.Time) *cache.Entry {
	return t.p.purges.Judge(t.p.admitShared(t.s, t.Tier.Get(key, now)))
}

func (t sharedTier) GetMany(keys []string, now time.Time) []*cache.Entry {
	entries := t.Tier.GetMany(keys, now)
	for i, e := range entries {
		entries[i] = t.p.purges.Judge(t.p.admitShared(t.s, e))
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
	if e = t.p.purges.Judge(t.p.admitShared(t.s, e)); e.StateAt(now().UnixNano()) != cache.Fresh {
		e = nil
	}
	return unlock, e
}

// admitShared returns e made safe to serve, or nil.
func (p *Proxy) admitShared(s *settings, e *cache.Entry) *cache.Entry {
	if e == nil {
		return nil
	}
	if why := p.checkShared(s, e); why != "" {
		p.metrics.SharedRejected.WithLabelValues("entry").Inc()
		p.log.Debug("shared entry refused; a miss", "key", e.Key, "why", why)
		return nil
	}
	e.Source = cache.SourceShared
	return e
}

// checkShared says what is wrong with e ("" if nothing), and clamps its
// times, recomputes its ETag and tags it. The answer came compressed and is
// kept so; it is inflated once, into a reused buffer, to be checked.
func (p *Proxy) checkShared(s *settings, e *cache.Entry) string {
	if e.Size > s.cfg.Upstream.MaxResponseBytes || e.Status != 0 {
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
