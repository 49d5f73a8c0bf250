package proxy

import (
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/server"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// AdminHandler serves /metrics, /healthz, /readyz, POST /purge
// (purge.go), and GET /cache, /cache/top and /config (inspect.go) on the
// admin listener; on a connection of its health reserve,
// /healthz and /readyz only.
func (p *Proxy) AdminHandler() fasthttp.RequestHandler {
	metricsHandler := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(p.metrics.Registry, promhttp.HandlerOpts{}))
	return func(ctx *fasthttp.RequestCtx) {
		defer p.recoverRequest(ctx, "admin")
		path := string(ctx.Path())
		if server.HealthOnly(ctx.Conn()) {
			// A place beyond admin_max_conns (AdminListener): one probe.
			defer ctx.SetConnectionClose()
			if path != "/healthz" && path != "/readyz" {
				adminError(ctx, errAdminHealthOnly)
				return
			}
		}
		switch path {
		case "/metrics":
			metricsHandler(ctx)
		case "/healthz":
			ctx.SetContentType("text/plain")
			ctx.SetBodyString("ok\n")
		case "/purge":
			p.servePurge(ctx)
		case "/cache":
			p.serveInspectCache(ctx)
		case "/cache/top":
			p.serveInspectTop(ctx)
		case "/config":
			p.serveInspectConfig(ctx)
		case "/readyz":
			ok, why := p.Ready()
			ctx.SetContentType("text/plain")
			if !ok {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			}
			ctx.SetBodyString(why + "\n")
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			ctx.SetBodyString("not found: /metrics, /healthz, /readyz, /purge, /cache, /cache/top, /config\n")
		}
	}
}

var errAdminHealthOnly = &envelope.Error{Status: 503, Code: "50001",
	Msg: "Service temporarily unavailable: admin_max_conns connections open; beyond them, /healthz and /readyz only"}
