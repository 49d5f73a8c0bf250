package proxy

import (
	"time"

	"explorer-edge/cache"
	"explorer-edge/proxy/logsample"
)

// Fleet-wide purges (fleet/purge.go carries them through Redis): a purge
// sent to any node is published in the fleet's purge log; every node
// applies the records of the others to its memory and keeps them all in
// its own purge log, which judges every entry it reads from Redis. So an
// entry another node stored in Redis before a purge selecting it is a miss
// (hard) or stale (soft) on every node, without rewriting Redis.

// purgeFleet is a shared tier that carries purges (fleet.Redis).
type purgeFleet interface {
	// PublishPurge appends a purge to the fleet's log and deletes (hard)
	// or counts (soft) the Redis entries of keys.
	PublishPurge(at int64, request []byte, keys []string, soft bool, retain time.Duration) (seq int64, found int, err error)
	// WatchPurges follows the log: apply for the other nodes' purges,
	// lost when records were missed, floor with the fleet's floor at every
	// read (old answers are purged), refused for what Redis held that no
	// node publishes.
	WatchPurges(apply func(at int64, request []byte, live bool), lost func(), floor func(at int64), refused func(reason, why string))
}

// purgeSkew is how far ahead of this node's clock a time read from the
// fleet's purge log (a record's, the floor) may be: the nodes' clocks
// differ by milliseconds under NTP, and auth.max_skew gives clients 30 s.
// A time further ahead is no node's: taken, a floor ten years ahead would
// make every entry older than it (all of them) a miss for ten years, and a
// record would never age out. Such a time is refused, counted in
// shared_rejected_total{reason="purge_floor"} or {reason="purge_record"}.
// One within it costs at most 30 s of misses.
const purgeSkew = 30 * time.Second

// joinFleet puts the purge log between the proxy and a shared tier that
// carries purges, and starts following the fleet's purges.
func (p *Proxy) joinFleet() {
	inner := p.tier
	if c, ok := inner.(checkedTier); ok {
		inner = c.Tier
	}
	f, ok := inner.(purgeFleet)
	if !ok {
		return
	}
	p.fleet = f
	p.tier = purgedTier{Tier: p.tier, p: p}
	f.WatchPurges(p.fleetPurge, p.purgesLost, p.fleetFloor, p.purgeRefused)
}

// fleetFloor takes the fleet's floor (0: none), unless it is from the
// future: then the one taken before stays.
func (p *Proxy) fleetFloor(at int64) {
	now := p.clock()
	if at > now.Add(purgeSkew).UnixNano() {
		if p.purges.refuseFloor(at) {
			p.purgeRefused("purge_floor", "from the future: "+time.Unix(0, at).Sub(now).String()+" ahead")
		}
		return
	}
	p.purges.sharedFloor(at)
}

// purgeRefused counts what the fleet's purge log held that no node
// publishes, and logs it, sampled: whoever can write to Redis can fill
// the log with it.
func (p *Proxy) purgeRefused(reason, why string) {
	p.metrics.SharedRejected.WithLabelValues(reason).Inc()
	const msg = "purge state in Redis refused"
	if ok, suppressed := p.sampleWarn(logsample.Key{Msg: msg, Code: reason}); ok {
		p.log.Warn(msg, "reason", reason, "why", why, "suppressed", suppressed)
	}
}

// fleetPurge applies a purge another node published at at (unix ns).
// Only entries whose answers are older than the purge are selected: what
// this node fetched since is newer than the purge. Records published
// before this node started (live false) are remembered, not applied.
func (p *Proxy) fleetPurge(at int64, request []byte, live bool) {
	now := p.clock()
	if at > now.Add(purgeSkew).UnixNano() {
		p.purgeRefused("purge_record", "from the future: "+time.Unix(0, at).Sub(now).String()+" ahead")
		return
	}
	s := p.settings.Load()
	sel, perr := p.parsePurge(request, s)
	if perr != nil {
		p.purgeRefused("purge_record", "unreadable: "+perr.Msg)
		return
	}
	sel.before = at
	p.purges.add(purgeRecord{at: at, sel: sel}, now.Add(-p.keepPurges()).UnixNano())
	if !live {
		return
	}
	n := p.purgeMemory(sel, now)
	p.metrics.Purges.WithLabelValues(sel.kind.String(), sel.mode()).Inc()
	p.log.Info("purge from the fleet", "selector", sel.kind.String(), "value", sel.describe(), "mode", sel.mode(),
		"memory", n, "lag", now.Sub(time.Unix(0, at)).String())
}

// purgesLost drops the whole memory cache: the fleet purged things this
// node can no longer learn.
func (p *Proxy) purgesLost() {
	n := p.cache.Purge(func(*cache.Entry) bool { return true }, false, p.clock())
	p.log.Warn("missed purges of the fleet; dropped the memory cache", "entries", n)
}

// keepPurges is how long the purge log keeps a record: long enough to
// judge any answer on its way (inflight) and, in fleet mode, any entry
// Redis may still hold (retain).
func (p *Proxy) keepPurges() time.Duration {
	if p.fleet != nil {
		return max(p.retain(), p.inflight())
	}
	return p.inflight()
}

// retain is the longest an entry may live, in Redis or in a node's
// memory: the longest fresh time of any route and class (the route
// table's own TTLs, 24 h for final answers, with cache.ttl's overrides),
// plus the longer of its stale windows, plus a second. A purge record is
// kept that long: a Redis copy it selects cannot outlive it, so a node
// started later still judges that copy purged (it was kept for the
// overrides alone, 601 s with the shipped config, while a final entry
// lives 24 h 10 min).
func (p *Proxy) retain() time.Duration {
	s := p.settings.Load()
	var fresh time.Duration
	for _, t := range s.ttl {
		fresh = max(fresh, t.Head, t.Final, t.Volatile, t.Negative)
	}
	w := s.cfg.Cache.StaleWhileRevalidate
	return fresh + max(w.Head, w.Final, w.Volatile, w.Negative, s.cfg.Cache.StaleIfError) + time.Second
}

// sharedKeys are the Redis entries a selector names by key: a url's, and
// a hash's own entry. Others are found by tags as nodes read them.
func (s *selector) sharedKeys() []string {
	switch s.kind {
	case purgeURL:
		return s.keys
	case purgeHash:
		return []string{hashKey(s.req.Chain, s.req.Hash)}
	}
	return nil
}

// judge is what an entry read from the shared tier is worth after the
// purges this node knows: nil (purged), a stale one (soft-purged), or e.
// e is this caller's own, decoded from Redis: it may be changed.
func (p *Proxy) judge(e *cache.Entry) *cache.Entry {
	if e == nil || !p.purges.after(e.Stored) {
		return e // no purge since its answer: no tags needed
	}
	p.cache.Tag(e)
	drop, from := p.purges.verdict(e, 0)
	switch {
	case drop:
		return nil
	case from != 0 && from < e.Fresh:
		e.Fresh = from
	}
	return e
}

// purgedTier judges every entry read from the shared tier, and does not
// write one a purge selected while its answer was on its way.
type purgedTier struct {
	Tier
	p *Proxy
}

func (t purgedTier) Get(key string, now time.Time) *cache.Entry {
	return t.p.judge(t.Tier.Get(key, now))
}

func (t purgedTier) GetMany(keys []string, now time.Time) []*cache.Entry {
	es := t.Tier.GetMany(keys, now)
	for i := range es {
		es[i] = t.p.judge(es[i])
	}
	return es
}

func (t purgedTier) Set(e *cache.Entry, now time.Time) {
	if t.p.purges.after(e.Stored) {
		t.p.cache.Tag(e)
		if drop, _ := t.p.purges.verdict(e, 0); drop {
			return
		}
	}
	t.Tier.Set(e, now)
}

// Lock passes on another node's answer only while it is still fresh after
// judging; else the caller fetches (without the lock: one more upstream
// call, never a purged answer).
func (t purgedTier) Lock(key string, now func() time.Time) (func(), *cache.Entry) {
	unlock, e := t.Tier.Lock(key, now)
	if e != nil {
		if e = t.p.judge(e); e.StateAt(now().UnixNano()) != cache.Fresh {
			e = nil
		}
	}
	return unlock, e
}
