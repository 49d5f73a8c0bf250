package admission

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"explorer-edge/config"
	"explorer-edge/internal/ipgroup"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/upstream"
	"explorer-edge/signer"
)

// Rules decides whether a request may go on: the SVC-ACCESS-* signature
// of a configured client (auth.mode signed) and the client's rate, or a rate
// per client IP (auth.mode off).
type Rules struct {
	signed  bool
	maxSkew time.Duration
	clients map[string]*Client // by api key
	ipRate  float64
	ipBurst int
	ipV6    int // bits of an IPv6 address one bucket covers
	ips     *ipLimiters
	trusted []netip.Prefix
	m       *metrics.Metrics
	// anon is the tenant of unsigned traffic (auth off): one pool, not
	// one per address, which an attacker with many addresses would
	// multiply.
	anon *upstream.Tenant
}

type Client struct {
	Name       string
	passphrase []byte
	signer     *signer.Signer
	limiter    *rate.Limiter // nil = no limit
	tenant     *upstream.Tenant
	Policy     []byte // its RateLimit-Policy value; nil without a limit
}

func New(cfg config.Auth, m *metrics.Metrics) (*Rules, error) {
	a := &Rules{signed: cfg.Mode == "signed", maxSkew: cfg.MaxSkew, clients: map[string]*Client{},
		ipRate: cfg.IPRate, ipBurst: cfg.IPBurst, ipV6: cfg.IPv6Prefix, m: m,
		anon: &upstream.Tenant{Name: "anonymous", Share: 1}}
	if !a.signed { // signed, no request is anonymous: no series that cannot move
		a.anon.Acct = m.Client("anonymous")
	}
	for _, c := range cfg.Clients {
		share := c.Share
		if share == 0 {
			share = 1
		}
		cl := &Client{Name: c.Name, passphrase: []byte(c.Passphrase),
			signer: signer.New(signer.Credentials{APIKey: c.APIKey, SecretKey: c.SecretKey, Passphrase: c.Passphrase}),
			tenant: &upstream.Tenant{Name: c.Name, Share: share, Acct: m.Client(c.Name)}}
		if c.Rate > 0 {
			cl.limiter = rate.NewLimiter(rate.Limit(c.Rate), c.Burst)
			cl.Policy = rateLimitPolicy(c.Rate, c.Burst)
		}
		a.clients[c.APIKey] = cl
	}
	if cfg.IPRate > 0 {
		a.ips = newIPLimiters(cfg.IPMaxTracked)
	}
	for _, s := range cfg.TrustedProxies {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, err
		}
		a.trusted = append(a.trusted, p)
	}
	return a, nil
}

// parseTrusted reads an entry of auth.trusted_proxies: an address (a
// prefix of its full length) or a CIDR, IPv4-mapped IPv6 taken as IPv4.
func parseTrusted(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("auth.trusted_proxies: %q is neither an IP nor a CIDR", s)
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Inherit keeps the rate state of clients and IPs across a reload, so a
// reload is not a way around a limit.
func (a *Rules) Inherit(old *Rules) {
	for key, c := range a.clients {
		if o, ok := old.clients[key]; ok && o.limiter != nil && c.limiter != nil {
			o.limiter.SetLimit(c.limiter.Limit())
			o.limiter.SetBurst(c.limiter.Burst())
			c.limiter = o.limiter
		}
	}
	if a.ips != nil && old.ips != nil && a.ips.capacity() == old.ips.capacity() {
		a.ips = old.ips
	}
}

var (
	errAuthNoKey     = &envelope.Error{Status: 401, Code: "50103", Msg: "Request header SVC-ACCESS-KEY cannot be empty"}
	errAuthNoPass    = &envelope.Error{Status: 401, Code: "50104", Msg: "Request header SVC-ACCESS-PASSPHRASE cannot be empty"}
	errAuthNoSign    = &envelope.Error{Status: 401, Code: "50106", Msg: "Request header SVC-ACCESS-SIGN cannot be empty"}
	errAuthNoTS      = &envelope.Error{Status: 401, Code: "50107", Msg: "Request header SVC-ACCESS-TIMESTAMP cannot be empty"}
	errAuthPass      = &envelope.Error{Status: 401, Code: "50105", Msg: "Request header SVC-ACCESS-PASSPHRASE incorrect"}
	errAuthKey       = &envelope.Error{Status: 401, Code: "50111", Msg: "Invalid SVC-ACCESS-KEY"}
	errAuthTS        = &envelope.Error{Status: 401, Code: "50112", Msg: "Invalid SVC-ACCESS-TIMESTAMP"}
	errAuthSkew      = &envelope.Error{Status: 401, Code: "50102", Msg: "Timestamp request expired"}
	errAuthSign      = &envelope.Error{Status: 401, Code: "50113", Msg: "Invalid Sign"}
	errClientLimited = &envelope.Error{Status: 429, Code: "50011", Msg: "Too Many Requests", RetryAfter: 1}
)

// The signed headers of a client request (package signer names them).
var hdrKey, hdrSign, hdrPass, hdrTS = []byte(signer.HeaderKey), []byte(signer.HeaderSign), []byte(signer.HeaderPassphrase), []byte(signer.HeaderTimestamp)

var methodGET = []byte("GET")

// Admit returns a nil error when the request may go on, and the signed
// client it comes from (nil when auth is off or the signature is bad).
func (a *Rules) Admit(ctx *fasthttp.RequestCtx, now time.Time) (*Client, *envelope.Error) {
	if !a.signed {
		return nil, a.AdmitIP(ctx, now)
	}
	c, err := a.verify(&ctx.Request.Header, now)
	if err != nil {
		a.m.Reject(metrics.RejectAuth)
		return nil, err
	}
	if c.limiter != nil && !c.limiter.AllowN(now, 1) {
		a.m.Reject(metrics.RejectRateLimit)
		c.tenant.Acct.Refused(metrics.RefusedRateLimit)
		return c, errClientLimited.With(nil, envelope.CeilSeconds(untilToken(c.limiter, now)))
	}
	return c, nil
}

// TenantOf is who a request of c is charged to.
func (a *Rules) TenantOf(c *Client) *upstream.Tenant {
	if c == nil {
		return a.anon
	}
	return c.tenant
}

// AdmitIP applies the per-IP rate, when there is one.
func (a *Rules) AdmitIP(ctx *fasthttp.RequestCtx, now time.Time) *envelope.Error {
	if a.ips == nil {
		return nil
	}
	if ok, wait := a.ips.allow(a.ClientKey(ctx).As16(), a.ipRate, a.ipBurst, now); !ok {
		a.m.Reject(metrics.RejectRateLimit)
		a.anon.Acct.Refused(metrics.RefusedRateLimit)
		return errClientLimited.With(nil, envelope.CeilSeconds(wait))
	}
	return nil
}

// verify checks the four SVC-ACCESS headers against the raw request target
// as received: clients encode commas and order parameters their own way.
func (a *Rules) verify(h *fasthttp.RequestHeader, now time.Time) (*Client, *envelope.Error) {
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

// ClientKey is the key every per-address limit counts the request's
// client under (auth.ip_rate, stream.max_per_ip): its address, an IPv6
// one by its first auth.ip_v6_prefix bits (ipgroup.Key).
func (a *Rules) ClientKey(ctx *fasthttp.RequestCtx) netip.Addr {
	return ipgroup.Key(a.ClientIP(ctx), a.ipV6)
}

// PeerKey is the key server.max_conns_per_ip counts a connection from
// peer under, the same group as ClientKey's; counted is false for a peer
// of auth.trusted_proxies, whose connections carry many clients.
func (a *Rules) PeerKey(peer netip.Addr) (key netip.Addr, counted bool) {
	peer = peer.Unmap()
	if a.IsTrusted(peer) {
		return netip.Addr{}, false
	}
	return ipgroup.Key(peer, a.ipV6), true
}

// ClientIP is the peer address or, when the peer is a trusted proxy, the
// rightmost address of X-Forwarded-For that is not a trusted proxy. Every
// X-Forwarded-For line counts, as one list in the order received: a proxy
// may append to the line it got (nginx) or add a line of its own (HAProxy's
// option forwardfor), and then the client's own, possibly forged, line
// comes first. Walking from the right, each address was written by the hop
// before it, so the first untrusted one is the client as our proxies saw it.
func (a *Rules) ClientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	ip = ip.Unmap()
	if !a.IsTrusted(ip) {
		return ip
	}
	lines := ctx.Request.Header.PeekAll("X-Forwarded-For")
	for i := len(lines) - 1; i >= 0; i-- {
		for xff := lines[i]; len(xff) > 0; {
			j := bytes.LastIndexByte(xff, ',')
			part := bytes.TrimSpace(xff[j+1:])
			xff = xff[:max(j, 0)]
			if len(part) == 0 {
				continue
			}
			cand, ok := parseForwarded(part)
			if !ok {
				return ip // garbage: the last hop we can vouch for
			}
			if !a.IsTrusted(cand) {
				return cand
			}
			ip = cand
		}
	}
	return ip
}

// parseForwarded reads one X-Forwarded-For element: an address, or an
// address with a port as some proxies write it. IPv4, the common case, is
// parsed without allocating.
func parseForwarded(b []byte) (netip.Addr, bool) {
	if bytes.IndexByte(b, ':') < 0 {
		var buf [4]byte
		ip, err := fasthttp.ParseIPv4(buf[:], b)
		if err != nil {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(ip)), true
	}
	if a, err := netip.ParseAddr(string(b)); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(string(b)); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func (a *Rules) IsTrusted(ip netip.Addr) bool {
	for _, p := range a.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// untilToken is how long until l holds a whole token.
func untilToken(l *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - l.TokensAt(now)
	if missing <= 0 || l.Limit() <= 0 {
		return time.Second
	}
	return time.Duration(missing / float64(l.Limit()) * float64(time.Second))
}

// verifiedKey is the user value of a request holding what admission
// found: the client whose signature it verified, or a nil *client when it
// refused the request (a zero-size key: no allocation).
type verifiedKey struct{}

// SetVerified records admission's verdict on ctx: c verified (nil:
// refused). Only with auth.mode signed.
func (a *Rules) SetVerified(ctx *fasthttp.RequestCtx, c *Client) {
	if a.signed {
		ctx.SetUserValue(verifiedKey{}, c)
	}
}

// ClientOf is the client a request is counted and logged as: the one
// whose signature admission verified. A request refused before admission
// (an unknown path, a method, a framing refusal) has its signature checked
// here, so that a signed client's 404 is still its own; one that carries a
// client's key but no valid signature is no client's (the key is public).
func (a *Rules) ClientOf(ctx *fasthttp.RequestCtx) *Client {
	if !a.signed {
		return nil
	}
	if c, admitted := ctx.UserValue(verifiedKey{}).(*Client); admitted {
		return c
	}
	c, err := a.verify(&ctx.Request.Header, time.Now())
	if err != nil {
		return nil
	}
	a.SetVerified(ctx, c) // the access line and the accounting ask both
	return c
}

// Payer is the tenant an answered request is counted on: the signed
// client whose signature admission verified, or anonymous when auth is
// off; nil for any other request (its key may be anyone's).
func (a *Rules) Payer(ctx *fasthttp.RequestCtx) *upstream.Tenant {
	if !a.signed {
		return a.anon
	}
	if c := a.ClientOf(ctx); c != nil {
		return c.tenant
	}
	return nil
}
