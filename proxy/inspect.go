package proxy

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/proxy/admin"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
)

// Looking inside a running edge (package admin serves it, on the admin
// port and behind the purge token; docs/operations.md, The admin port):
//
//	GET /cache?url=<a public request URI>   what the edge holds for that question
//	GET /cache/top?n=20                       the most-asked keys of the last minutes (admin/top.go)
//	GET /config                               the configuration in force, secrets redacted
//
// None of them asks the upstream or the shared tier, or changes what the
// cache holds.

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
	if r.PerHash {
		out.Parts = make([]admin.Part, q.NHashes)
		for i := range q.NHashes {
			h := string(q.Hash(i))
			k := route.HashKey(out.Chain, h)
			out.Parts[i] = admin.Part{Hash: h, Key: k, KeyState: p.inspectKey(k, now)}
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
