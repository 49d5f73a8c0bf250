package proxy

import (
	"context"
	"explorer-edge/proxy/admin"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/valyala/fasthttp"
)

// A panic is a bug of the edge's, never a reason to stop serving every
// other request: fasthttp does not recover panics (one traced request for
// an expired entry once ended the process), so each handler and each
// goroutine the request path starts defers one of the functions below. A
// panic recovered is answered as a 500 envelope, counted in
// explorer_edge_panics_total{where}, and logged at error with its stack,
// once per log.repeat_interval for the same place and value.

// errPanic answers a request whose handling panicked.
var errPanic = &envelope.Error{Status: 500, Code: "50026", Msg: "Internal error: the edge failed on this request (logged)", Kind: envelope.KindInternal}

// maxPanicKey bounds the part of a panic's value that keys its sampling.
const maxPanicKey = 120

// recoverRequest is deferred by a listener's handler (where: public,
// admin): a panic is answered with errPanic on a connection then closed
// (what the handler left half done is not trusted).
func (p *Proxy) recoverRequest(ctx *fasthttp.RequestCtx, where string) {
	v := recover()
	if v == nil {
		return
	}
	p.panicked(where, v)
	p.writeError(ctx, p.settings.Load(), errPanic)
	ctx.SetConnectionClose()
}

// recoverFlight is deferred inside a flight's fetch: a panic there would
// otherwise be re-raised by singleflight in a goroutine of its own, where
// nothing can recover it. The flight ends with errPanic for every request
// that joined it.
func (p *Proxy) recoverFlight(err *error) {
	v := recover()
	if v == nil {
		return
	}
	p.panicked("background", v)
	*err = errPanic.With(fmt.Errorf("panic: %v", v), 0)
}

// recoverBackground is deferred by goroutines no client waits on
// (refreshes, batch sends).
func (p *Proxy) recoverBackground() {
	if v := recover(); v != nil {
		p.panicked("background", v)
	}
}

// panicked counts and logs the panic v recovered at where.
func (p *Proxy) panicked(where string, v any) {
	p.metrics.Panics.WithLabelValues(where).Inc()
	msg := fmt.Sprint(v)
	key := msg
	if len(key) > maxPanicKey {
		key = key[:maxPanicKey]
	}
	ok, suppressed := p.sampleWarn(logsample.Key{Msg: "panic", Route: where, Code: key})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("where", where), slog.String("panic", msg), slog.String("stack", string(debug.Stack()))}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	p.log.LogAttrs(context.Background(), slog.LevelError, "panic recovered", attrs...)
}

// recoverAdmin is recoverRequest of the admin port (admin.Options.Recover):
// deferred itself, so recover sees the panic.
func (p *Proxy) recoverAdmin(ctx *fasthttp.RequestCtx) {
	v := recover()
	if v == nil {
		return
	}
	p.panicked("admin", v)
	admin.Error(ctx, errPanic)
	ctx.SetConnectionClose()
}
