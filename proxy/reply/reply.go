// Package reply is what an answer says beside its body: its Cache-Status
// (RFC 9211), its caching headers (RFC 9111, RFC 5861, RFC 8246), and the
// reading of what the client accepts (Accept-Encoding, If-None-Match). It
// allocates nothing: header values are built in a buffer the caller
// reuses.
package reply

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
)

var (
	hdrCacheStatus  = []byte("Cache-Status")
	hdrCacheControl = []byte("Cache-Control")
	hdrAge          = []byte("Age")
	valGzip         = []byte("gzip")
	valXGzip        = []byte("x-gzip")
	semicolon       = []byte(";")
	ccPublic        = []byte("public, max-age=")
	ccMaxAge        = []byte("max-age=")
	ccSWR           = []byte(", stale-while-revalidate=")
	ccSIE           = []byte(", stale-if-error=")
	ccImmutable     = []byte(", immutable")
)

// Status is what an answer says in its Cache-Status header (RFC 9211).
// Each value is the fixed text after which ttl (when hasTTL) and detail go.
type Status struct {
	Text   string
	HasTTL bool
	Detail string
}

var (
	Hit             = Status{"explorer-edge; hit", true, ""}
	SharedHit       = Status{"explorer-edge; hit", true, "shared"}
	DiskHit         = Status{"explorer-edge; hit", true, "disk"}
	StaleRevalidate = Status{"explorer-edge; hit", true, "stale-while-revalidate"}
	Miss            = Status{"explorer-edge; fwd=miss; stored", true, ""}
	MissNotStored   = Status{"explorer-edge; fwd=miss", false, ""}
	Collapsed       = Status{"explorer-edge; fwd=miss; collapsed", true, ""}
	Partial         = Status{"explorer-edge; fwd=partial; stored", true, ""}
	StaleEnvelope   = Status{"explorer-edge; hit", true, "stale-if-error-" + envelope.ReasonEnvelope}
	StaleBehind     = Status{"explorer-edge; hit", true, "stale-if-error-behind"}
)

// StaleError names, in the detail, why a stale copy was served.
func StaleError(err error) Status {
	detail := "stale-if-error"
	if why := envelope.KindOf(err).Detail(); why != "" {
		detail += "-" + why
	}
	return Status{"explorer-edge; hit", true, detail}
}

// CDN is how answers are written behind a CDN (cdn.*, docs/cdn.md); nil:
// no CDN, answers as the edge writes them for everyone.
type CDN struct {
	// Tags names the tags header and how tags are written.
	Tags purge.Naming
	// Control are the headers that carry the CDN's lifetime
	// (CDN-Cache-Control, RFC 9213, and the CDN's own:
	// Cloudflare-CDN-Cache-Control beside Cache-Tag, Surrogate-Control
	// beside Surrogate-Key).
	Control [][]byte
	// BrowserTTL bounds the browsers' max-age past the answer's Age, in
	// seconds; 0: none.
	BrowserTTL int64
}

var (
	hdrCDNCacheControl   = []byte("Cdn-Cache-Control") // as fasthttp writes names (SetCanonical)
	hdrCloudflareControl = []byte("Cloudflare-Cdn-Cache-Control")
	hdrSurrogateControl  = []byte("Surrogate-Control")
)

// NewCDN is the CDN of the configuration's cdn section; nil when its
// tag_header is empty.
func NewCDN(c config.CDN, chains []string) *CDN {
	if c.TagHeader == "" {
		return nil
	}
	d := &CDN{Tags: purge.Naming{Header: fasthttp.AppendNormalizedHeaderKey(nil, c.TagHeader), Sep: config.CDNTagSeparator(c.TagHeader),
		Prefix: c.TagPrefix, Chains: chains}, Control: [][]byte{hdrCDNCacheControl},
		BrowserTTL: int64(c.BrowserTTL / time.Second)}
	switch strings.ToLower(c.TagHeader) {
	case "cache-tag":
		d.Control = append(d.Control, hdrCloudflareControl)
	case "surrogate-key":
		d.Control = append(d.Control, hdrSurrogateControl)
	}
	if c.Provider == "cloudflare" && len(d.Control) == 1 {
		d.Control = append(d.Control, hdrCloudflareControl)
	}
	return d
}

// CacheHeaders sets Cache-Status, Cache-Control and Age of e at ns, built
// in b, which it returns for reuse. Behind a CDN (cdn not nil) it also
// sets the tags and the CDN's lifetime.
func CacheHeaders(h *fasthttp.ResponseHeader, b []byte, e *cache.Entry, ns int64, st Status, cdn *CDN) []byte {
	b = append(b, st.Text...)
	if st.HasTTL {
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, e.TTL(ns), 10)
	}
	if st.Detail != "" {
		b = append(b, "; detail="...)
		b = append(b, st.Detail...)
	}
	h.SetCanonical(hdrCacheStatus, b)

	// RFC 9111: max-age is the freshness lifetime and Age the time since
	// the upstream answered, so a shared cache keeps the answer fresh for
	// max-age - Age more; the stale windows go as RFC 5861 directives.
	age := e.Age(ns)
	if cdn != nil {
		// The CDN is given the whole lifetime (RFC 9213): a purge
		// reaches it. A browser cannot be purged: it keeps the answer
		// at most BrowserTTL past what the edge sent.
		b = appendLifetime(append(b[:0], ccMaxAge...), e, e.Lifetime())
		for _, name := range cdn.Control {
			h.SetCanonical(name, b)
		}
		tags := e.CDNTags(&cdn.Tags)
		if tags == nil { // the entry's first answer under this naming
			tags = cdn.Tags.AppendEntryTags(nil, e)
			e.SetCDNTags(&cdn.Tags, tags)
		}
		h.SetCanonical(cdn.Tags.Header, tags)
	}
	life := e.Lifetime()
	if cdn != nil && cdn.BrowserTTL > 0 {
		life = min(life, age+cdn.BrowserTTL)
	}
	b = appendLifetime(append(b[:0], ccPublic...), e, life)
	// Settled chain data never changes: a browser need not revalidate it
	// while it is fresh, not even on reload (RFC 8246). Behind a CDN it
	// may: a purge that reached the CDN reaches a browser at its next
	// reload.
	if e.Class == cache.Final && e.Status == 0 && cdn == nil {
		b = append(b, ccImmutable...)
	}
	h.SetCanonical(hdrCacheControl, b)

	b = strconv.AppendInt(b[:0], age, 10)
	h.SetCanonical(hdrAge, b)
	return b
}

// appendLifetime appends max-age's value life and e's stale windows.
func appendLifetime(b []byte, e *cache.Entry, life int64) []byte {
	b = strconv.AppendInt(b, life, 10)
	if e.StaleWhileRevalidate >= int64(time.Second) {
		b = append(b, ccSWR...)
		b = strconv.AppendInt(b, e.StaleWhileRevalidate/int64(time.Second), 10)
	}
	if e.StaleIfError >= int64(time.Second) {
		b = append(b, ccSIE...)
		b = strconv.AppendInt(b, e.StaleIfError/int64(time.Second), 10)
	}
	return b
}

// AcceptsGzip reads Accept-Encoding as RFC 9110 section 12.5.3 does: gzip
// (or x-gzip) with a q above 0, or failing a gzip entry, "*" with a q above
// 0. Allocates nothing.
func AcceptsGzip(v []byte) bool {
	gzip, star := -1, -1 // -1 absent, 0 refused, 1 accepted
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		coding, params, _ := bytes.Cut(item, semicolon)
		coding = bytes.TrimSpace(coding)
		accepted := 1
		if qZero(params) {
			accepted = 0
		}
		switch {
		case bytes.EqualFold(coding, valGzip), bytes.EqualFold(coding, valXGzip):
			gzip = accepted
		case len(coding) == 1 && coding[0] == '*':
			star = accepted
		}
	}
	if gzip >= 0 {
		return gzip == 1
	}
	return star == 1
}

// qZero reports whether the parameters of an Accept-Encoding item hold a
// weight of 0 ("q=0", "q=0.0", "Q=0.000").
func qZero(params []byte) bool {
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, semicolon)
		p = bytes.TrimSpace(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		w := bytes.TrimSpace(p[2:])
		if len(w) == 0 || w[0] != '0' {
			return false
		}
		for _, c := range w[1:] {
			if c != '.' && c != '0' {
				return false
			}
		}
		return true
	}
	return false
}

// ETagMatch implements the weak comparison of If-None-Match (RFC 9110
// section 13.1.2): "*" or any listed tag equal to ours, W/ ignored.
func ETagMatch(inm, etag []byte) bool {
	for len(inm) > 0 {
		inm = bytes.TrimLeft(inm, " \t,")
		if len(inm) == 0 {
			return false
		}
		if inm[0] == '*' {
			return true
		}
		inm = bytes.TrimPrefix(inm, []byte("W/"))
		end := bytes.IndexByte(inm, ',')
		if end < 0 {
			end = len(inm)
		}
		if bytes.Equal(bytes.TrimRight(inm[:end], " \t"), etag) {
			return true
		}
		inm = inm[end:]
	}
	return false
}
