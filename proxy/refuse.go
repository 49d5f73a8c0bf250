package proxy

import (
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/server"
	"time"

	"github.com/valyala/fasthttp"
)

// refuseFraming answers a request framingError refuses and closes the
// connection: whatever follows on it cannot be trusted to be a request.
func (p *Proxy) refuseFraming(ctx *fasthttp.RequestCtx, start time.Time, e *envelope.Error) {
	id := route.Unknown
	if r := route.ByPath(ctx.Path()); r != nil {
		id = r.ID
	}
	p.fail(ctx, id, start, e)
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
		p.fail(ctx, route.Unknown, time.Now(), server.UnreadableError(err, headersTooLarge))
	}
}
