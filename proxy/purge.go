package proxy

import (
	"crypto/sha256"
	"encoding/json"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// purgeTokenOf is the digest of the purge token in force; nil: purge is
// off. Digests of equal length are compared, so the time of a comparison
// tells nothing about the token's length.
func purgeTokenOf(cfg config.Admin) (*[32]byte, error) {
	tok, err := cfg.Token()
	if err != nil || tok == "" {
		return nil, err
	}
	sum := sha256.Sum256([]byte(tok))
	return &sum, nil
}

var (
	errPurgeOff      = &envelope.Error{Status: 404, Code: "404", Msg: "Not found: purge is off (admin.purge_token is not set)"}
	errPurgeNoToken  = &envelope.Error{Status: 401, Code: "50103", Msg: "Authorization header with a Bearer token is required"}
	errPurgeBadToken = &envelope.Error{Status: 401, Code: "50111", Msg: "Invalid purge token"}
	errPurgeMethod   = &envelope.Error{Status: 405, Code: "50115", Msg: "Method not allowed: use POST"}
)

// servePurge is POST /purge.
func (p *Proxy) servePurge(ctx *fasthttp.RequestCtx) {
	s := p.settings.Load()
	if !p.adminAuthorized(ctx, s, errPurgeOff, "purge") {
		return
	}
	if !ctx.IsPost() {
		adminError(ctx, errPurgeMethod)
		return
	}
	sel, perr := purge.Parse(ctx.PostBody(), s.chains)
	if perr != nil {
		adminError(ctx, perr)
		return
	}
	res, err := p.purges.Purge(sel)
	p.log.Info("purge", "selector", sel.Kind(), "value", sel.Describe(), "mode", sel.Mode(),
		"memory", res.Memory, "redis", res.Redis, "fleet", res.Fleet, "seq", res.Seq, "caller", ctx.RemoteAddr().String())
	if err != nil {
		p.log.Warn("purge not passed on to the fleet: the shared tier did not answer", "err", err)
		adminError(ctx, &envelope.Error{Status: 503, Code: "50001", Msg: "Purged this node only (" + strconv.Itoa(res.Memory) +
			" entries in memory): the shared tier did not answer, so the other nodes were not told; retry"})
		return
	}
	out, _ := json.Marshal(struct {
		Code string         `json:"code"`
		Msg  string         `json:"msg"`
		Data []purge.Result `json:"data"`
	}{"0", "", []purge.Result{res}})
	ctx.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	ctx.SetBody(out)
}

// adminError writes an envelope on the admin port.
func adminError(ctx *fasthttp.RequestCtx, e *envelope.Error) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	switch e.Status {
	case fasthttp.StatusUnauthorized: // RFC 6750 section 3
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="explorer-edge purge"`)
	case fasthttp.StatusMethodNotAllowed:
		ctx.Response.Header.Set("Allow", "POST")
	}
	ctx.SetBody(envelope.Append(nil, e.Code, e.Msg))
}

// inflight bounds how long an answer can be on its way from the upstream
// to the cache: all attempts of a call (upstream.retry_max_time), the wait
// for a token (budget_wait) and one more attempt's timeout, plus a second.
func (p *Proxy) inflight() time.Duration {
	u := p.settings.Load().cfg.Upstream
	return u.RetryMaxTime + u.BudgetWait + u.Timeout + time.Second
}

// retain is the longest an entry may live, in Redis or in a node's
// memory: the longest fresh time of any route and class (the route
// table's own TTLs, 24 h for final answers, with cache.ttl's overrides),
// plus the longer of its stale windows, plus a second. A purge record is
// kept that long: a Redis copy it selects cannot outlive it, so a node
// started later still judges that copy purged.
func (p *Proxy) retain() time.Duration {
	s := p.settings.Load()
	var fresh time.Duration
	for _, t := range s.ttl {
		fresh = max(fresh, t.Head, t.Final, t.Volatile, t.Negative)
	}
	w := s.cfg.Cache.StaleWhileRevalidate
	return fresh + max(w.Head, w.Final, w.Volatile, w.Negative, s.cfg.Cache.StaleIfError) + time.Second
}
