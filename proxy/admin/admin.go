// Package admin is the admin port: /metrics, the probes (/healthz,
// /readyz), and behind the purge token POST /purge and the looks inside
// a running edge (GET /cache, /cache/top, /config). It asks the request
// core through the functions of Options; none of the looks asks the
// upstream or the shared tier, or changes what the cache holds.
package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/server"
)

// Options are what the admin port serves from. Every function is
// required but Sample and Recover.
type Options struct {
	Registry *prometheus.Registry // GET /metrics
	Log      *slog.Logger
	// Sample says whether a WARN line of a key may go out; nil = always.
	Sample func(logsample.Key) (ok bool, suppressed int64)
	// Token is the digest of admin.purge_token in force; nil: the
	// operations behind it are off (404).
	Token func() *[32]byte
	// Recover is deferred around each request (panic recovery); nil: none.
	Recover func(ctx *fasthttp.RequestCtx)
	Ready   func() (ok bool, why string)
	// Purge applies the body of POST /purge; the error is the envelope of
	// a refusal (the field at fault) or of a purge the fleet was not told.
	Purge func(body []byte, caller string) (purge.Result, *envelope.Error)
	// Inspect is what the edge holds for a public request URI.
	Inspect func(url []byte) (*Inspected, *envelope.Error)
	Top     *Top
	Clock   func() time.Time
	Config  *ConfigInfo
	// Settings is the configuration in force, secrets redacted.
	Settings func() map[string]any
}

// Handler serves the admin port; on a connection of its health reserve
// (server.HealthOnly), /healthz and /readyz only.
func Handler(o Options) fasthttp.RequestHandler {
	metricsHandler := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}))
	return func(ctx *fasthttp.RequestCtx) {
		if o.Recover != nil {
			defer o.Recover(ctx)
		}
		path := string(ctx.Path())
		if server.HealthOnly(ctx.Conn()) {
			// A place beyond admin_max_conns (AdminListener): one probe.
			defer ctx.SetConnectionClose()
			if path != "/healthz" && path != "/readyz" {
				Error(ctx, errHealthOnly)
				return
			}
		}
		switch path {
		case "/metrics":
			metricsHandler(ctx)
		case "/healthz":
			ctx.SetContentType("text/plain")
			ctx.SetBodyString("ok\n")
		case "/readyz":
			ok, why := o.Ready()
			ctx.SetContentType("text/plain")
			if !ok {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			}
			ctx.SetBodyString(why + "\n")
		case "/purge":
			o.servePurge(ctx)
		case "/cache":
			o.serveCache(ctx)
		case "/cache/top":
			o.serveTop(ctx)
		case "/config":
			o.serveConfig(ctx)
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			ctx.SetBodyString("not found: /metrics, /healthz, /readyz, /purge, /cache, /cache/top, /config\n")
		}
	}
}

var (
	errHealthOnly = &envelope.Error{Status: 503, Code: "50001",
		Msg: "Service temporarily unavailable: admin_max_conns connections open; beyond them, /healthz and /readyz only"}
	errPurgeOff   = &envelope.Error{Status: 404, Code: "404", Msg: "Not found: purge is off (admin.purge_token is not set)"}
	errNoToken    = &envelope.Error{Status: 401, Code: "50103", Msg: "Authorization header with a Bearer token is required"}
	errBadToken   = &envelope.Error{Status: 401, Code: "50111", Msg: "Invalid purge token"}
	errPostOnly   = &envelope.Error{Status: 405, Code: "50115", Msg: "Method not allowed: use POST"}
	errInspectOff = &envelope.Error{Status: 404, Code: "404", Msg: "Not found: /cache and /config are off (admin.purge_token is not set)"}
	errGetOnly    = &envelope.Error{Status: 405, Code: "50115", Msg: "Method not allowed: use GET"}
)

// authorized checks the request's Authorization: Bearer against
// admin.purge_token, as every operation of the admin port beyond /metrics
// and the probes does; when it fails, it answers the refusal (off when no
// token is set: 404; no token given or a wrong one: 401) and returns false.
// what names the operation in the sampled log line of a wrong token.
func (o *Options) authorized(ctx *fasthttp.RequestCtx, off *envelope.Error, what string) bool {
	token := o.Token()
	if token == nil {
		Error(ctx, off)
		return false
	}
	auth := ctx.Request.Header.Peek("Authorization")
	if len(auth) < 7 || !strings.EqualFold(string(auth[:7]), "bearer ") {
		Error(ctx, errNoToken)
		return false
	}
	sum := sha256.Sum256(bytes.TrimSpace(auth[7:]))
	if subtle.ConstantTimeCompare(sum[:], token[:]) != 1 {
		// Sampled: whoever reaches the admin port can repeat it at will.
		msg := what + " refused: wrong token"
		ok, suppressed := true, int64(0)
		if o.Sample != nil {
			ok, suppressed = o.Sample(logsample.Key{Msg: msg})
		}
		if ok {
			o.Log.Warn(msg, "caller", ctx.RemoteAddr().String(), "suppressed", suppressed)
		}
		Error(ctx, errBadToken)
		return false
	}
	return true
}

// inspectAllowed is authorized for the GET operations, and their method.
func (o *Options) inspectAllowed(ctx *fasthttp.RequestCtx) bool {
	if !o.authorized(ctx, errInspectOff, "inspect") {
		return false
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		Error(ctx, errGetOnly)
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return false
	}
	return true
}

// servePurge is POST /purge.
func (o *Options) servePurge(ctx *fasthttp.RequestCtx) {
	if !o.authorized(ctx, errPurgeOff, "purge") {
		return
	}
	if !ctx.IsPost() {
		Error(ctx, errPostOnly)
		return
	}
	res, e := o.Purge(ctx.PostBody(), ctx.RemoteAddr().String())
	if e != nil {
		Error(ctx, e)
		return
	}
	out, _ := json.Marshal(struct {
		Code string         `json:"code"`
		Msg  string         `json:"msg"`
		Data []purge.Result `json:"data"`
	}{"0", "", []purge.Result{res}})
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(out)
}

// serveCache is GET /cache?url=...
func (o *Options) serveCache(ctx *fasthttp.RequestCtx) {
	if !o.inspectAllowed(ctx) {
		return
	}
	raw := bytes.TrimSpace(ctx.QueryArgs().Peek("url"))
	if len(raw) == 0 {
		Error(ctx, envelope.Missing("url"))
		return
	}
	out, e := o.Inspect(raw)
	if e != nil {
		Error(ctx, e)
		return
	}
	writeJSON(ctx, out)
}

// serveTop is GET /cache/top?n=20.
func (o *Options) serveTop(ctx *fasthttp.RequestCtx) {
	if !o.inspectAllowed(ctx) {
		return
	}
	n := 20
	if raw := bytes.TrimSpace(ctx.QueryArgs().Peek("n")); len(raw) > 0 {
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 || v > topSlots {
			Error(ctx, envelope.Invalid("n", "not a number from 1 to "+strconv.Itoa(topSlots)))
			return
		}
		n = v
	}
	writeJSON(ctx, o.Top.Report(n, o.Clock().UnixNano()))
}

// serveConfig is GET /config.
func (o *Options) serveConfig(ctx *fasthttp.RequestCtx) {
	if !o.inspectAllowed(ctx) {
		return
	}
	writeJSON(ctx, o.Config.report(o.Settings()))
}

// writeJSON answers v as the one item of an envelope of code "0", URLs
// as written (no \u0026 for &).
func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
		Data []any  `json:"data"`
	}{"0", "", []any{v}})
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(out.Bytes())
}

// Error writes an envelope on the admin port.
func Error(ctx *fasthttp.RequestCtx, e *envelope.Error) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	switch e.Status {
	case fasthttp.StatusUnauthorized: // RFC 6750 section 3
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="explorer-edge purge"`)
	case fasthttp.StatusMethodNotAllowed:
		ctx.Response.Header.Set("Allow", "POST")
	}
	ctx.SetBody(envelope.Append(nil, e.Code, e.Msg))
}
