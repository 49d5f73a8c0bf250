package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
)

// storeRefusal caches an upstream envelope that refuses the question
// (envelope.RefusedQuestion) for the route's negative time (its shortest TTL when it
// has none), with its status: asked again, it is a hit, not one more call
// of the quota. It has no stale windows, never stands in for a failure, and
// stays on this node: the shared tier holds successes only.
func (p *Proxy) storeRefusal(s *settings, r *route.Route, key string, status int, body []byte) *answer {
	now := p.clock()
	// Held as is (a refusal is a short envelope): served reads its code.
	e := cache.NewItem(key, body, cache.Negative, now, s.ttl[r.ID].For(cache.Negative), 0, 0)
	e.Status, e.Source = status, cache.SourceUpstream
	e.Tags = purge.Of(e, body, s.chains)
	p.keep(e, now)
	return &answer{entry: e, stored: true}
}

// served records a request answered with entry e: done for a success, and
// for a cached refusal the same under the refusal's own code.
func (p *Proxy) served(ctx *fasthttp.RequestCtx, id route.ID, e *cache.Entry, result int, start time.Time) {
	if e.Status == 0 {
		p.done(ctx, id, result, start)
		return
	}
	code, _ := envelope.Code(e.Body)
	p.metrics.CacheResult(int(id), result)
	p.metrics.Request(int(id), p.metrics.CodeIndex(code), time.Since(start).Seconds())
	p.access(ctx, id, result, code, start)
}
