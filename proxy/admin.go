package proxy

import (
	"crypto/sha256"
	"explorer-edge/config"
	"explorer-edge/proxy/admin"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The request core's side of the admin port (package admin): what a purge
// and a look inside the cache need of the core.

// AdminHandler serves the admin port (package admin).
func (p *Proxy) AdminHandler() fasthttp.RequestHandler {
	return admin.Handler(admin.Options{
		Registry: p.metrics.Registry, Log: p.log, Sample: p.sampleWarn,
		Token:   func() *[32]byte { return p.settings.Load().purgeToken },
		Recover: p.recoverAdmin,
		Ready:   p.Ready, Purge: p.purgeBody, Inspect: p.inspect,
		Top: &p.ops.top, Clock: p.clock, Config: &p.ops.conf,
		Settings: func() map[string]any { return p.settings.Load().cfg.Redacted() },
	})
}

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

// purgeBody applies the body of POST /purge from caller: checked against
// the configured chains, applied here and passed on to the fleet, logged.
func (p *Proxy) purgeBody(body []byte, caller string) (purge.Result, *envelope.Error) {
	sel, perr := purge.Parse(body, p.settings.Load().chains)
	if perr != nil {
		return purge.Result{}, perr
	}
	res, err := p.purges.Purge(sel)
	p.log.Info("purge", "selector", sel.Kind(), "value", sel.Describe(), "mode", sel.Mode(),
		"memory", res.Memory, "disk", res.Disk, "redis", res.Redis, "fleet", res.Fleet, "seq", res.Seq, "caller", caller)
	if err != nil {
		p.log.Warn("purge not passed on to the fleet: the shared tier did not answer", "err", err)
		return res, &envelope.Error{Status: 503, Code: "50001", Msg: "Purged this node only (" + strconv.Itoa(res.Memory) +
			" entries in memory): the shared tier did not answer, so the other nodes were not told; retry"}
	}
	return res, nil
}

// inflight bounds how long an answer can be on its way from the upstream
// to the cache under s: all attempts of a call (upstream.retry_max_time),
// the wait for a token (budget_wait) and one more attempt's timeout, plus
// a second.
func (s *settings) inflight() time.Duration {
	u := s.cfg.Upstream
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
