package proxy

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/reply"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/server"
)

var (
	ctJSON            = []byte("application/json")
	hdrCacheStatus    = []byte("Cache-Status")
	hdrCacheControl   = []byte("Cache-Control")
	hdrETag           = []byte("ETag")
	hdrVary           = []byte("Vary")
	valOrigin         = []byte("Origin")
	valAEOrigin       = []byte("Accept-Encoding, Origin")
	hdrRetryAfter     = []byte("Retry-After")
	hdrAllow          = []byte("Allow")
	hdrLink           = []byte("Link")
	valAllow          = []byte("GET, HEAD")
	hdrIfNoneMatch    = []byte("If-None-Match")
	hdrAcceptEncoding = []byte("Accept-Encoding")
	valAcceptEncoding = hdrAcceptEncoding
	valGzip           = []byte("gzip")
	etagGzipSuffix    = []byte(`-gz"`)
	ccNoStore         = []byte("no-store")
	csMissUncacheable = []byte("explorer-edge; fwd=miss; detail=uncacheable")
)

// streamMin is the identity size above which an answer held compressed is
// inflated as it is sent rather than whole into the response: 8 MB answers
// to clients taking no gzip would hold 8 MB each while they are written.
const streamMin = 64 << 10

// writeEntry sends a stored answer. It copies no body bytes and allocates
// nothing: header values are built in the query's scratch buffer and fasthttp
// copies them into its own reused header storage.
func (p *Proxy) writeEntry(ctx *fasthttp.RequestCtx, s *settings, q *query, e *cache.Entry, now time.Time, st reply.Status) {
	h := &ctx.Response.Header
	b := reply.CacheHeaders(h, q.scratch[:0], e, now.UnixNano(), st, s.cdn)

	// Each representation has its own strong validator (RFC 9110 section
	// 8.8.3): the gzip body's is the identity body's with "-gz".
	gz := e.Gzip != nil && reply.AcceptsGzip(ctx.Request.Header.PeekBytes(hdrAcceptEncoding))
	etag := e.ETag
	if gz {
		b = append(b[:0], e.ETag[:len(e.ETag)-1]...)
		b = append(b, etagGzipSuffix...)
		etag = b
	}
	h.SetCanonical(hdrETag, etag)
	vary := valAcceptEncoding
	if s.cors.Headers(ctx) {
		vary = valAEOrigin
	}
	h.SetCanonical(hdrVary, vary)
	q.scratch = b
	if l := blockLink(e); len(l) > 0 { // a block list's next and previous pages, pinned (blocklist.go)
		h.SetCanonical(hdrLink, l)
	}

	if e.Status != 0 { // a cached refusal keeps the upstream's status
		ctx.SetStatusCode(e.Status)
	}
	// If-None-Match applies only to an answer that would be 2xx (RFC 9110 section 13.2.1).
	if inm := ctx.Request.Header.PeekBytes(hdrIfNoneMatch); len(inm) > 0 && e.Status < 300 && reply.ETagMatch(inm, etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	h.SetContentTypeBytes(ctJSON)
	p.writeBody(ctx, s, e, gz)
}

// writeBody sends e's body: compressed when gz, else its identity bytes
// (held, streamed through an inflater, or inflated into the response's
// reused buffer).
func (p *Proxy) writeBody(ctx *fasthttp.RequestCtx, s *settings, e *cache.Entry, gz bool) {
	if gz {
		ctx.Response.Header.SetContentEncodingBytes(valGzip)
		ctx.Response.SetBodyRaw(e.Gzip)
		return
	}
	if body := p.cache.Identity(e); body != nil || e.Gzip == nil {
		ctx.Response.SetBodyRaw(body)
		return
	}
	if e.Size > streamMin { // a request holds the inflater, not the answer
		ctx.Response.SetBodyStream(e.Reader(), e.Size)
		return
	}
	// Inflated into the response's own buffer, which fasthttp reuses:
	// nothing allocated once it has grown to the answer's size.
	body, err := e.Inflate(ctx.Response.SwapBody(nil))
	ctx.Response.SwapBody(body)
	if err != nil { // the cache's own bytes, checked when they came from Redis: never expected
		p.log.Error("stored answer does not inflate; dropped", "key", e.Key, "err", err.Error())
		p.cache.Del(e.Key)
		p.writeError(ctx, s, envelope.ErrBadGateway)
	}
}

// fail writes err as an envelope. Every error goes through here.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, s *settings, id route.ID, start time.Time, err error) {
	var e *envelope.Error
	if !errors.As(err, &e) {
		e = envelope.ErrBadGateway.With(err, 0)
	}
	p.writeError(ctx, s, e)
	p.answered(ctx, s, id, metrics.ResultNone, e.Code, start)
	if e.Status >= 500 {
		p.warnFailed(s, id, e)
	}
}

// writeError replaces the response with e's envelope.
func (p *Proxy) writeError(ctx *fasthttp.RequestCtx, s *settings, e *envelope.Error) {
	server.ResetResponse(ctx)
	ctx.SetStatusCode(e.Status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	if e.Status == fasthttp.StatusMethodNotAllowed { // RFC 9110 section 15.5.6
		ctx.Response.Header.SetCanonical(hdrAllow, valAllow)
	}
	if e.RetryAfter > 0 {
		ctx.Response.Header.SetCanonical(hdrRetryAfter, strconv.AppendInt(nil, int64(e.RetryAfter), 10))
	}
	ctx.Response.SetBodyRaw(envelope.Append(nil, e.Code, e.Msg))
	p.corsHeaders(ctx, s)
}

// corsHeaders adds the CORS headers to an answer that is not a stored
// entry (an error, a passed-through envelope), with Vary: Origin when the
// answer depends on it.
func (p *Proxy) corsHeaders(ctx *fasthttp.RequestCtx, s *settings) {
	if s.cors.Headers(ctx) {
		ctx.Response.Header.SetCanonical(hdrVary, valOrigin)
	}
}

// refuseFraming answers a request server.FramingError refuses and closes the
// connection: whatever follows on it cannot be trusted to be a request.
func (p *Proxy) refuseFraming(ctx *fasthttp.RequestCtx, s *settings, start time.Time, e *envelope.Error) {
	id := route.Unknown
	if r := route.ByPath(ctx.Path()); r != nil {
		id = r.ID
	}
	p.fail(ctx, s, id, start, e)
	ctx.SetConnectionClose()
}

// unreadable is the public server's ErrorHandler: fasthttp calls it for a
// request it could not read, before any handler, and closes the
// connection after the answer. What reaches it (fasthttp v1.74.0,
// server.go serveConn): *ErrSmallBuffer when the request line and headers
// outgrow the read buffer, ErrBodyTooLarge beyond MaxRequestBodySize, a
// read timeout, and every parse error of the request line, headers, URI or
// body. Each gets an envelope of the error table instead of fasthttp's
// plain text; the cause, which may quote the client's headers, is not
// shown.
func (p *Proxy) unreadable(headersTooLarge *envelope.Error) func(*fasthttp.RequestCtx, error) {
	return func(ctx *fasthttp.RequestCtx, err error) {
		p.fail(ctx, p.settings.Load(), route.Unknown, time.Now(), server.UnreadableError(err, headersTooLarge))
	}
}
