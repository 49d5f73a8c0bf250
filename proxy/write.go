package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
)

var (
	ctJSON            = []byte("application/json")
	hdrCacheStatus    = []byte("Cache-Status")
	hdrCacheControl   = []byte("Cache-Control")
	hdrAge            = []byte("Age")
	hdrETag           = []byte("ETag")
	hdrVary           = []byte("Vary")
	hdrRetryAfter     = []byte("Retry-After")
	hdrIfNoneMatch    = []byte("If-None-Match")
	valAcceptEncoding = []byte("Accept-Encoding")
	valGzip           = []byte("gzip")
	ccNoStore         = []byte("no-store")
	ccPublic          = []byte("public, max-age=")
	csMissUncacheable = []byte("explorer-edge; fwd=miss; detail=uncacheable")
)

// cacheStatus is what an answer says in its Cache-Status header (RFC 9211).
// Each value is the fixed text after which ttl (when hasTTL) and detail go.
type cacheStatus struct {
	text   string
	hasTTL bool
	detail string
}

var (
	statusHit             = cacheStatus{"explorer-edge; hit", true, ""}
	statusSharedHit       = cacheStatus{"explorer-edge; hit", true, "shared"}
	statusStaleRevalidate = cacheStatus{"explorer-edge; hit", true, "stale-while-revalidate"}
	statusMiss            = cacheStatus{"explorer-edge; fwd=miss; stored", true, ""}
	statusMissNotStored   = cacheStatus{"explorer-edge; fwd=miss", false, ""}
	statusCollapsed       = cacheStatus{"explorer-edge; fwd=miss; collapsed", true, ""}
	statusPartial         = cacheStatus{"explorer-edge; fwd=partial; stored", true, ""}
	statusStaleEnvelope   = cacheStatus{"explorer-edge; hit", true, "stale-if-error-" + reasonEnvelope}
)

// staleErrorStatus names, in the detail, why a stale copy was served.
func staleErrorStatus(err error) cacheStatus {
	detail := "stale-if-error"
	var e *Error
	if errors.As(err, &e) && e.reason != "" {
		detail += "-" + e.reason
	}
	return cacheStatus{"explorer-edge; hit", true, detail}
}

// writeEntry sends a stored answer. It copies no body bytes and allocates
// nothing: header values are built in the query's scratch buffer and fasthttp
// copies them into its own reused header storage.
func (p *Proxy) writeEntry(ctx *fasthttp.RequestCtx, q *query, e *cache.Entry, now time.Time, st cacheStatus) {
	h := &ctx.Response.Header
	ns := now.UnixNano()
	ttl := e.TTL(ns)
	b := q.scratch[:0]

	b = append(b, st.text...)
	if st.hasTTL {
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, ttl, 10)
	}
	if st.detail != "" {
		b = append(b, "; detail="...)
		b = append(b, st.detail...)
	}
	h.SetCanonical(hdrCacheStatus, b)

	b = append(b[:0], ccPublic...)
	b = strconv.AppendInt(b, max(ttl, 0), 10)
	h.SetCanonical(hdrCacheControl, b)

	b = strconv.AppendInt(b[:0], e.Age(ns), 10)
	h.SetCanonical(hdrAge, b)
	h.SetCanonical(hdrETag, e.ETag)
	h.SetCanonical(hdrVary, valAcceptEncoding)
	q.scratch = b

	if e.Status != 0 { // a cached refusal keeps the upstream's status
		ctx.SetStatusCode(e.Status)
	}
	// If-None-Match applies only to an answer that would be 2xx (RFC 9110 section 13.2.1).
	if inm := ctx.Request.Header.PeekBytes(hdrIfNoneMatch); len(inm) > 0 && e.Status < 300 && etagMatch(inm, e.ETag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	h.SetContentTypeBytes(ctJSON)
	body := e.Body
	if e.Gzip != nil && ctx.Request.Header.HasAcceptEncodingBytes(valGzip) {
		body = e.Gzip
		h.SetContentEncodingBytes(valGzip)
	}
	ctx.Response.SetBodyRaw(body)
}

// etagMatch implements the weak comparison of If-None-Match (RFC 9110
// section 13.1.2): "*" or any listed tag equal to ours, W/ ignored.
func etagMatch(inm, etag []byte) bool {
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

// fail writes err as an envelope. Every error goes through here.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, id routeID, start time.Time, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errBadGateway.with(err, 0)
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	if e.RetryAfter > 0 {
		ctx.Response.Header.SetCanonical(hdrRetryAfter, strconv.AppendInt(nil, int64(e.RetryAfter), 10))
	}
	ctx.Response.SetBodyRaw(appendEnvelope(nil, e.Code, e.Msg))
	p.metrics.Request(int(id), p.metrics.CodeIndex(e.Code), time.Since(start).Seconds())
	p.access(ctx, id, noResult, e.Code, start)
	if e.Status >= 500 {
		p.log.Warn("request failed", "route", id.String(), "status", e.Status, "code", e.Code, "err", e.Error())
	}
}
