package proxy

import (
	"context"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/route"
	"log/slog"
)

// sampleWarn reports whether a WARN line of key k may go out, and how many
// were left out before it.
func (p *Proxy) sampleWarn(k logsample.Key) (ok bool, suppressed int64) {
	if !p.log.Enabled(context.Background(), slog.LevelWarn) {
		return false, 0
	}
	ok, suppressed = p.ops.repeats.Allow(k, p.clock(), p.settings.Load().cfg.Log.RepeatInterval)
	if !ok {
		p.metrics.LogSuppressed.Inc()
	}
	return ok, suppressed
}

// warnFailed logs a 5xx answer. Nothing is built for a line left out.
func (p *Proxy) warnFailed(id route.ID, e *envelope.Error) {
	route := id.String()
	ok, suppressed := p.sampleWarn(logsample.Key{Msg: "request failed", Route: route, Code: e.Code})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("route", route), slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("err", e.Error())}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "request failed", attrs...)
}
