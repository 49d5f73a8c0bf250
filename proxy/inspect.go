package proxy

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/admin"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
)

// Looking inside a running edge (package admin serves it, on the admin
// port and behind the purge token; docs/operations.md, The admin port):
//
//	GET /cache?url=<a public request URI>   what the edge holds for that question
//	GET /cache/top?n=20                       the most-asked keys of the last minutes (admin/top.go)
//	GET /config                               the configuration in force, secrets redacted
//
// None of them asks the upstream or changes what the cache holds. GET
// /cache reads the key from the disk tier and the shared tier as a miss
// would (one read each), and says whether a miss would take what they
// hold, without taking it: chain truth is asked, not fed (truth.Judge).

// inspect is what this node holds for a public request URI (GET /cache):
// parsed as the public path parses it (a question it refuses is refused
// here with the same envelope, naming the parameter), then the key's
// entry and, for a per-hash route, each hash's.
func (p *Proxy) inspect(raw []byte) (*admin.Inspected, *envelope.Error) {
	s := p.settings.Load()
	var u fasthttp.URI
	if err := u.Parse(nil, raw); err != nil {
		return nil, envelope.Invalid("url", "not a request URI")
	}
	if len(u.RequestURI()) > s.cfg.Server.MaxURLBytes {
		return nil, envelope.ErrURL
	}
	r := route.ByPath(u.Path())
	if r == nil {
		return nil, envelope.Invalid("url", "path is none of the six routes ("+strings.Join(route.Names(), ", ")+")")
	}
	var q route.Params
	if e := q.Parse(r, u.QueryArgs(), s.chains); e != nil {
		return nil, e
	}
	now := p.clock()
	out := &admin.Inspected{URL: string(raw), Key: string(q.Key), Route: r.Name, Chain: string(q.Chain),
		At: now.UTC().Format(time.RFC3339Nano)}
	out.KeyState = p.inspectKey(out.Key, now)
	f := &upstream.Request{Route: r, Key: out.Key, Chain: out.Chain, Height: q.Height, HeadList: route.IsHeadList(r.ID, q.PinHeight(), q.Page)}
	out.Tiers = p.inspectTiers(s, f, now)
	if r.PerHash {
		out.Parts = make([]admin.Part, q.NHashes)
		for i := range q.NHashes {
			h := string(q.Hash(i))
			k := route.HashKey(out.Chain, h)
			g := &upstream.Request{Route: &route.Table[route.TransactionMulti], Key: k, Chain: out.Chain, Height: -1}
			out.Parts[i] = admin.Part{Hash: h, Key: k, KeyState: p.inspectKey(k, now), Tiers: p.inspectTiers(s, g, now)}
			p.work.batch.mu.Lock()
			_, out.Parts[i].Fetching = p.work.batch.flying[k]
			p.work.batch.mu.Unlock()
		}
	}
	return out, nil
}

// inspectKey is what this node's cache holds under key at now.
func (p *Proxy) inspectKey(key string, now time.Time) admin.KeyState {
	e := p.cache.GetString(key)
	p.work.mu.Lock()
	_, refreshing := p.work.refreshing[key]
	p.work.mu.Unlock()
	return admin.KeyStateOf(e, now, refreshing, p.settings.Load().chains)
}

// inspectTiers is what the disk tier and the shared tier hold under f's
// key, and whether a miss would take it: the checks of every read
// (checkRead), the purges this node knows, and chain truth (asked only).
func (p *Proxy) inspectTiers(s *settings, f *upstream.Request, now time.Time) admin.Tiers {
	var out admin.Tiers
	if p.tiers.disk != nil {
		out.Disk = p.inspectTier(s, f, p.tiers.disk.Get(f.Key, now), now)
	}
	if p.tiers.shared != nil {
		out.Shared = p.inspectTier(s, f, p.tiers.shared.Get(f.Key, now), now)
	}
	return out
}

func (p *Proxy) inspectTier(s *settings, f *upstream.Request, e *cache.Entry, now time.Time) *admin.TierState {
	if e == nil {
		return &admin.TierState{State: e.StateAt(now.UnixNano()).String()}
	}
	why := p.checkRead(s, f.Key, e)
	if why == "" && p.purges.Judge(e) == nil {
		why = "purged"
	}
	if why == "" {
		switch v := p.readEntry(f, e, false); {
		case v.Behind > 0:
			why = "a newest page behind the head seen"
		case v.Unconfirmed:
			why = "blocks this node has not confirmed from the upstream"
		}
	}
	k := admin.KeyStateOf(e, now, false, s.chains)
	return &admin.TierState{State: k.State, Entry: k.Entry, Passes: why == "", Refused: why}
}

// configApplied records cfg as the configuration in force from now: its
// hash (config_hash_info, GET /config) and the time
// (config_last_reload_success_timestamp_seconds).
func (p *Proxy) configApplied(cfg *config.Config, start bool) {
	hash, now := cfg.RedactedHash(), p.clock()
	p.ops.conf.Applied(hash, now, start)
	p.metrics.SetConfigHash(hash)
	p.metrics.ConfigReloadSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// NoteReload records the outcome of a reload (SIGHUP, watch_config) for
// GET /config: nil when it was applied (by Reload), else why it was
// refused, whatever refused it (the file, validation, a key that needs a
// restart). The command calls it after each reload.
func (p *Proxy) NoteReload(err error) { p.ops.conf.Noted(err, p.clock()) }
