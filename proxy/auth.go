package proxy

import (
	"bytes"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/signer"
)

// admission decides whether a request may go on: the SVC-ACCESS-* signature
// of a configured client (auth.mode signed) and the client's rate, or a rate
// per client IP (auth.mode off).
type admission struct {
	signed  bool
	maxSkew time.Duration
	clients map[string]*client // by api key
	ipRate  rate.Limit
	ipBurst int
	ips     *ipLimiters
	trusted []*net.IPNet
	m       *metrics.Metrics
}

type client struct {
	name       string
	passphrase []byte
	signer     *signer.Signer
	limiter    *rate.Limiter // nil = no limit
}

func newAdmission(cfg config.Auth, m *metrics.Metrics) (*admission, error) {
	a := &admission{signed: cfg.Mode == "signed", maxSkew: cfg.MaxSkew, clients: map[string]*client{},
		ipRate: rate.Limit(cfg.IPRate), ipBurst: cfg.IPBurst, m: m}
	for _, c := range cfg.Clients {
		cl := &client{name: c.Name, passphrase: []byte(c.Passphrase),
			signer: signer.New(signer.Credentials{APIKey: c.APIKey, SecretKey: c.SecretKey, Passphrase: c.Passphrase})}
		if c.Rate > 0 {
			cl.limiter = rate.NewLimiter(rate.Limit(c.Rate), c.Burst)
		}
		a.clients[c.APIKey] = cl
	}
	if cfg.IPRate > 0 {
		a.ips = newIPLimiters()
	}
	for _, p := range cfg.TrustedProxies {
		if ip := net.ParseIP(p); ip != nil {
			bits := 8 * len(ip.To16())
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			a.trusted = append(a.trusted, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, _ := net.ParseCIDR(p)
		a.trusted = append(a.trusted, n)
	}
	return a, nil
}

// inherit keeps the rate state of clients and IPs across a reload, so a
// reload is not a way around a limit.
func (a *admission) inherit(old *admission) {
	for key, c := range a.clients {
		if o, ok := old.clients[key]; ok && o.limiter != nil && c.limiter != nil {
			o.limiter.SetLimit(c.limiter.Limit())
			o.limiter.SetBurst(c.limiter.Burst())
			c.limiter = o.limiter
		}
	}
	if a.ips != nil && old.ips != nil {
		a.ips = old.ips
	}
}

var (
	errAuthNoKey     = &Error{Status: 401, Code: "50103", Msg: "Request header SVC-ACCESS-KEY cannot be empty"}
	errAuthNoPass    = &Error{Status: 401, Code: "50104", Msg: "Request header SVC-ACCESS-PASSPHRASE cannot be empty"}
	errAuthNoSign    = &Error{Status: 401, Code: "50106", Msg: "Request header SVC-ACCESS-SIGN cannot be empty"}
	errAuthNoTS      = &Error{Status: 401, Code: "50107", Msg: "Request header SVC-ACCESS-TIMESTAMP cannot be empty"}
	errAuthPass      = &Error{Status: 401, Code: "50105", Msg: "Request header SVC-ACCESS-PASSPHRASE incorrect"}
	errAuthKey       = &Error{Status: 401, Code: "50111", Msg: "Invalid SVC-ACCESS-KEY"}
	errAuthTS        = &Error{Status: 401, Code: "50112", Msg: "Invalid SVC-ACCESS-TIMESTAMP"}
	errAuthSkew      = &Error{Status: 401, Code: "50102", Msg: "Timestamp request expired"}
	errAuthSign      = &Error{Status: 401, Code: "50113", Msg: "Invalid Sign"}
	errClientLimited = &Error{Status: 429, Code: "50011", Msg: "Too Many Requests", RetryAfter: 1}
)

var methodGET = []byte("GET")

// admit returns nil when the request may go on.
func (a *admission) admit(ctx *fasthttp.RequestCtx, now time.Time) *Error {
	if !a.signed {
		return a.admitIP(ctx, now)
	}
	c, err := a.verify(&ctx.Request.Header, now)
	if err != nil {
		a.m.Reject(metrics.RejectAuth)
		return err
	}
	if c.limiter != nil && !c.limiter.AllowN(now, 1) {
		a.m.Reject(metrics.RejectRateLimit)
		return errClientLimited.with(nil, ceilSeconds(untilToken(c.limiter, now)))
	}
	return nil
}

// admitIP applies the per-IP rate, when there is one.
func (a *admission) admitIP(ctx *fasthttp.RequestCtx, now time.Time) *Error {
	if a.ips == nil {
		return nil
	}
	if ok, wait := a.ips.allow(a.clientIP(ctx), a.ipRate, a.ipBurst, now); !ok {
		a.m.Reject(metrics.RejectRateLimit)
		return errClientLimited.with(nil, ceilSeconds(wait))
	}
	return nil
}

// verify checks the four SVC-ACCESS headers against the raw request target
// as received: clients encode commas and order parameters their own way.
func (a *admission) verify(h *fasthttp.RequestHeader, now time.Time) (*client, *Error) {
	key := h.PeekBytes(hdrKey)
	pass := h.PeekBytes(hdrPass)
	sign := h.PeekBytes(hdrSign)
	ts := h.PeekBytes(hdrTS)
	switch {
	case len(key) == 0:
		return nil, errAuthNoKey
	case len(pass) == 0:
		return nil, errAuthNoPass
	case len(sign) == 0:
		return nil, errAuthNoSign
	case len(ts) == 0:
		return nil, errAuthNoTS
	}
	c, ok := a.clients[string(key)]
	if !ok {
		return nil, errAuthKey
	}
	if !signer.Equal(pass, c.passphrase) {
		return nil, errAuthPass
	}
	t, err := signer.ParseTimestamp(ts)
	if err != nil {
		return nil, errAuthTS
	}
	if d := now.Sub(t); d > a.maxSkew || d < -a.maxSkew {
		return nil, errAuthSkew
	}
	var buf [64]byte
	want := c.signer.AppendSign(buf[:0], ts, methodGET, h.RequestURI())
	if !signer.Equal(sign, want) {
		return nil, errAuthSign
	}
	return c, nil
}

// clientIP is the peer address, or the last address before a trusted proxy
// in X-Forwarded-For when the peer is a trusted proxy.
func (a *admission) clientIP(ctx *fasthttp.RequestCtx) net.IP {
	ip := ctx.RemoteIP()
	if !a.isTrusted(ip) {
		return ip
	}
	xff := ctx.Request.Header.Peek("X-Forwarded-For")
	// Walk right to left: the rightmost untrusted address is the client.
	for len(xff) > 0 {
		i := bytes.LastIndexByte(xff, ',')
		part := bytes.TrimSpace(xff[i+1:])
		xff = xff[:max(i, 0)]
		cand := net.ParseIP(string(part))
		if cand == nil {
			return ip
		}
		if !a.isTrusted(cand) {
			return cand
		}
		ip = cand
		if i < 0 {
			break
		}
	}
	return ip
}

func (a *admission) isTrusted(ip net.IP) bool {
	for _, n := range a.trusted {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// ipLimiters keeps one bucket per client IP, dropping idle ones so that
// a scan of many addresses cannot grow it without bound.
type ipLimiters struct {
	mu    sync.Mutex
	m     map[string]*ipEntry
	swept time.Time
}

type ipEntry struct {
	l    *rate.Limiter
	seen time.Time
}

const ipMaxEntries = 100_000

func newIPLimiters() *ipLimiters { return &ipLimiters{m: map[string]*ipEntry{}} }

func (l *ipLimiters) allow(ip net.IP, r rate.Limit, burst int, now time.Time) (bool, time.Duration) {
	var buf [16]byte
	key := append(buf[:0], ip.To16()...)
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[string(key)]
	if !ok {
		if len(l.m) >= ipMaxEntries || now.Sub(l.swept) > time.Minute {
			l.sweep(now)
		}
		e = &ipEntry{l: rate.NewLimiter(r, burst)}
		l.m[string(key)] = e
	}
	e.seen = now
	e.l.SetLimitAt(now, r)
	e.l.SetBurstAt(now, burst)
	if !e.l.AllowN(now, 1) {
		return false, untilToken(e.l, now)
	}
	return true, 0
}

// untilToken is how long until l holds a whole token.
func untilToken(l *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - l.TokensAt(now)
	if missing <= 0 || l.Limit() <= 0 {
		return time.Second
	}
	return time.Duration(missing / float64(l.Limit()) * float64(time.Second))
}

// sweep drops buckets idle long enough to be full again.
func (l *ipLimiters) sweep(now time.Time) {
	l.swept = now
	for k, e := range l.m {
		if now.Sub(e.seen) > time.Minute || len(l.m) >= ipMaxEntries {
			delete(l.m, k)
		}
	}
}
