package admission

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
)

// CORS (the Fetch standard) for frontends that call the edge from a
// browser on another origin. With cors.allow_origins empty nothing here
// runs but one length check. "*" answers every request with
// Access-Control-Allow-Origin: *, so the answer does not depend on Origin
// and a CDN may share it; a list of origins echoes the request's Origin
// when it is listed, and every answer then carries Vary: Origin, since a
// CDN must not give one origin's answer to another.

var (
	hdrOrigin  = []byte("Origin")
	hdrVary    = []byte("Vary")
	hdrACAO    = []byte("Access-Control-Allow-Origin")
	hdrACEH    = []byte("Access-Control-Expose-Headers")
	hdrACAM    = []byte("Access-Control-Allow-Methods")
	hdrACAH    = []byte("Access-Control-Allow-Headers")
	hdrACMA    = []byte("Access-Control-Max-Age")
	hdrACRM    = []byte("Access-Control-Request-Method")
	valStar    = []byte("*")
	valOrigin  = []byte("Origin")
	valMethods = []byte("GET, HEAD")
	// What a page's script may read of an answer beside the safelisted
	// headers: the cache's, the request id to quote, the client's limit.
	valExposeHeaders = []byte("Cache-Status, Age, ETag, Retry-After, X-Request-Id, RateLimit, RateLimit-Policy")
)

// CORS is cors.* of the configuration, ready for the request path.
type CORS struct {
	any          bool     // "*"
	origins      [][]byte // lower case, no trailing slash
	maxAge       []byte   // seconds
	allowHeaders []byte   // cors.allow_headers joined; nil: none but the safelisted
}

// NewCORS returns nil when CORS is off.
func NewCORS(cfg config.CORS) *CORS {
	if len(cfg.AllowOrigins) == 0 {
		return nil
	}
	c := &CORS{maxAge: strconv.AppendInt(nil, int64(cfg.MaxAge.Seconds()), 10)}
	if len(cfg.AllowHeaders) > 0 {
		c.allowHeaders = []byte(strings.Join(cfg.AllowHeaders, ", "))
	}
	for _, o := range cfg.AllowOrigins {
		if o == "*" {
			c.any = true
			continue
		}
		c.origins = append(c.origins, []byte(strings.TrimSuffix(strings.ToLower(o), "/")))
	}
	return c
}

// AllowOrigin is the Access-Control-Allow-Origin value for this request,
// or nil for none.
func (c *CORS) AllowOrigin(ctx *fasthttp.RequestCtx) []byte {
	if c.any {
		return valStar
	}
	origin := ctx.Request.Header.PeekBytes(hdrOrigin)
	if len(origin) == 0 {
		return nil
	}
	for _, o := range c.origins {
		if bytes.EqualFold(o, origin) {
			return origin
		}
	}
	return nil
}

// Headers adds the CORS Headers of an answer (hit, miss or error) and
// says whether it depends on Origin (for Vary).
func (c *CORS) Headers(ctx *fasthttp.RequestCtx) (varyOrigin bool) {
	if c == nil {
		return false
	}
	if o := c.AllowOrigin(ctx); o != nil {
		h := &ctx.Response.Header
		h.SetCanonical(hdrACAO, o)
		h.SetCanonical(hdrACEH, valExposeHeaders)
	}
	return !c.any
}

// Preflight answers an OPTIONS Preflight (a request with
// Access-Control-Request-Method) from an allowed origin with 204; it
// reports false, answering nothing, for any other request.
func (c *CORS) Preflight(ctx *fasthttp.RequestCtx) bool {
	if c == nil || !ctx.IsOptions() || len(ctx.Request.Header.PeekBytes(hdrACRM)) == 0 {
		return false
	}
	o := c.AllowOrigin(ctx)
	if o == nil || len(ctx.Request.Header.PeekBytes(hdrOrigin)) == 0 {
		return false
	}
	h := &ctx.Response.Header
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	h.SetCanonical(hdrACAO, o)
	h.SetCanonical(hdrACAM, valMethods)
	if c.allowHeaders != nil {
		h.SetCanonical(hdrACAH, c.allowHeaders)
	}
	h.SetCanonical(hdrACMA, c.maxAge)
	if !c.any {
		h.SetCanonical(hdrVary, valOrigin)
	}
	return true
}
