package proxy

import (
	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/stream"
	"explorer-edge/proxy/upstream"
	"hash/maphash"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
)

// The request core's side of the stream of chain events (package events
// polls and announces; package stream serves the subscribers): what the
// poller asks of the core (events.Core), and the stream's path.

// eventsCore is the Proxy as package events sees it.
type eventsCore struct{ p *Proxy }

// Poll asks key, chain's newest page, through the miss path from the
// upstream (upstream.Request.Poll skips the fresh recheck and the tiers),
// paid by nobody's share, and returns the entry stored. background (a
// variant's refresh) takes the budget only when no client miss waits and
// the bucket is well above empty (upstream.Pool.take).
func (c eventsCore) Poll(chain, key string, background bool) *cache.Entry {
	p := c.p
	s := p.settings.Load()
	var q route.Params
	q.ParseKey(&route.Table[route.BlockList], key)
	f := &upstream.Request{Route: q.Route, Key: key, Chain: chain, Height: -1, HeadList: true,
		Poll: true, Background: background, Tenant: s.auth.TenantOf(nil)}
	a, _, err := p.load(s, f)
	if err != nil || a == nil || a.entry == nil || !a.stored {
		if err != nil {
			p.log.Debug("event stream poll failed", "chain", chain, "key", key, "err", err)
		}
		return nil
	}
	return a.entry
}

func (c eventsCore) Cached(key string) *cache.Entry { return c.p.cache.GetString(key) }

// ItemsKey is chain's page of its newest 100 blocks while block-list
// questions are answered from the blocks held (cache.block_pages).
func (c eventsCore) ItemsKey(chain string) string {
	if !c.p.settings.Load().cfg.Cache.BlockPages {
		return ""
	}
	return itemsKey(chain, 1)
}

func (c eventsCore) FromItems(chain, key string) *cache.Entry {
	return c.p.BlockListFromItems(chain, key)
}

// Warm copies key from the shared tier into memory, as a miss that found
// it there would: checked, and judged by chain truth (believe). A page
// showing a head this node has not confirmed from the upstream is not
// taken: the chain's newest page is asked of the upstream instead (at most
// once per chain per second, truth.TryConfirm), and memory then holds the
// upstream's answer under the default question, which is what the poller
// announces from. Another node's word in Redis never becomes a head here
// by itself.
func (c eventsCore) Warm(chain, key string) {
	p := c.p
	if p.tiers.shared == nil {
		return
	}
	s := p.settings.Load()
	f := &upstream.Request{Route: &route.Table[route.BlockList], Key: key, Chain: chain, Height: -1, HeadList: true,
		Tenant: s.auth.TenantOf(nil)}
	ent := p.shared(s).Get(key, p.clock())
	if ent == nil || p.believe(s, tierShared, f, ent, true) != readServe || ent.StateAt(p.clock().UnixNano()) != cache.Fresh {
		return
	}
	p.keep(s, ent, p.clock())
}

func (c eventsCore) Final(chain string) int64 { return c.p.truth.Final(chain) }

func (c eventsCore) HashAt(chain string, height int64) string { return c.p.truth.Hash(chain, height) }

func (c eventsCore) Budget() float64 {
	u := c.p.settings.Load().cfg.Upstream
	r := u.Rate
	for _, a := range u.Accounts {
		r += a.Rate
	}
	return r
}

// askerSeed keys Asker's hash: a client's identity is counted, never kept.
var askerSeed = maphash.MakeSeed()

// Asker is who asked ctx's question, as the stream's variants count
// distinct clients: the verified client in auth.mode signed, else the
// address the per-IP limits count it under.
func (c eventsCore) Asker(ctx *fasthttp.RequestCtx) uint64 {
	s := c.p.settings.Load()
	if cl := s.auth.ClientOf(ctx); cl != nil {
		return maphash.String(askerSeed, cl.Name)
	}
	a := c.ClientIP(ctx).As16()
	return maphash.Bytes(askerSeed, a[:])
}

func (c eventsCore) Stream() config.Stream { return c.p.settings.Load().cfg.Stream }

// ClientIP is the key the stream's per-IP cap counts: the client's
// address grouped as every per-address limit groups it (ClientKey).
func (c eventsCore) ClientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	return c.p.settings.Load().auth.ClientKey(ctx)
}

func (c eventsCore) Now() time.Time { return c.p.clock() }

// serveEvents answers the stream's path: CORS (a preflight too), the
// per-IP rate, then the hub. auth.mode signed does not apply: an
// EventSource cannot send headers, and what the stream carries (the
// newest height and hash of each chain) costs the upstream nothing per
// subscriber; the stream caps bound it (docs/stream.md).
func (p *Proxy) serveEvents(ctx *fasthttp.RequestCtx, s *settings, start time.Time) {
	if len(ctx.Request.Header.RequestURI()) > s.cfg.Server.MaxURLBytes {
		p.writeError(ctx, s, envelope.ErrURL)
		return
	}
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
	p.events.Hub().Handler(ctx)
}

// Events is the event stream's hub; nil when stream.enabled is off.
func (p *Proxy) Events() *stream.Hub { return p.events.Hub() }
