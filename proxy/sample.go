package proxy

import (
	"context"
	"log/slog"

	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/route"
)

// sampleWarn reports whether a WARN line of key k may go out, and how many
// were left out before it, under the settings in force (work outside a
// request: the upstream's lines, fasthttp's, the purges').
func (p *Proxy) sampleWarn(k logsample.Key) (ok bool, suppressed int64) {
	return p.sample(p.settings.Load(), k)
}

// sample is sampleWarn under a request's settings s.
func (p *Proxy) sample(s *settings, k logsample.Key) (ok bool, suppressed int64) {
	if !p.log.Enabled(context.Background(), slog.LevelWarn) {
		return false, 0
	}
	ok, suppressed = p.ops.repeats.Allow(k, p.clock(), s.cfg.Log.RepeatInterval)
	if !ok {
		p.metrics.LogSuppressed.Inc()
	}
	return ok, suppressed
}

// warnFailed logs a 5xx answer. Nothing is built for a line left out.
func (p *Proxy) warnFailed(s *settings, id route.ID, e *envelope.Error) {
	route := id.String()
	ok, suppressed := p.sample(s, logsample.Key{Msg: "request failed", Route: route, Code: e.Code})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("route", route), slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("err", e.Error())}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "request failed", attrs...)
}
