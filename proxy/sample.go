package proxy

import (
	"context"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"log/slog"
	"sync"
	"time"
)

// repeats samples the log lines a client can cause at will: a 5xx answer
// (one client made 353,826 WARN lines, 71 MB, in 10 s) and fasthttp's
// warnings about connections. A line goes out once per log.repeat_interval
// for each key (message, route, code); the next one that goes out carries
// suppressed=K, and log_suppressed_total counts each left out as it
// happens. Lines the edge bounds itself (one per upstream call, within the
// budget) and the access log (log.access_sample) are not sampled here.
type repeats struct {
	mu   sync.Mutex
	keys map[repeatKey]repeatState
}

type repeatKey struct{ msg, route, code string }

type repeatState struct {
	next       int64 // Unix ns before which the key's lines are left out
	suppressed int64 // left out since the last line
}

// maxRepeatKeys bounds the keys held. Messages, routes and codes come from
// fixed sets, so it is never reached; if it were, the table starts afresh
// (the counts of lines left out stay right in the metric).
const maxRepeatKeys = 4096

// allow reports whether a line of k may go out at now and, if so, how many
// were left out before it.
func (r *repeats) allow(k repeatKey, now time.Time, interval time.Duration) (ok bool, suppressed int64) {
	if interval <= 0 {
		return true, 0
	}
	t := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	st, found := r.keys[k]
	if r.keys == nil || (!found && len(r.keys) >= maxRepeatKeys) {
		r.keys = make(map[repeatKey]repeatState)
	}
	if t < st.next {
		st.suppressed++
		r.keys[k] = st
		return false, 0
	}
	r.keys[k] = repeatState{next: t + int64(interval)}
	return true, st.suppressed
}

// sampleWarn reports whether a WARN line of key k may go out, and how many
// were left out before it.
func (p *Proxy) sampleWarn(k repeatKey) (ok bool, suppressed int64) {
	if !p.log.Enabled(context.Background(), slog.LevelWarn) {
		return false, 0
	}
	ok, suppressed = p.repeats.allow(k, p.clock(), p.settings.Load().cfg.Log.RepeatInterval)
	if !ok {
		p.metrics.LogSuppressed.Inc()
	}
	return ok, suppressed
}

// warnFailed logs a 5xx answer. Nothing is built for a line left out.
func (p *Proxy) warnFailed(id route.ID, e *envelope.Error) {
	route := id.String()
	ok, suppressed := p.sampleWarn(repeatKey{"request failed", route, e.Code})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("route", route), slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("err", e.Error())}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "request failed", attrs...)
}
