// Package logsample samples the log lines a client can cause at will: one
// line per interval for each key, the next one saying how many were left
// out.
package logsample

import (
	"math"
	"sync"
	"time"
)

// Repeats samples the log lines a client can cause at will: a 5xx answer
// (one client made 353,826 WARN lines, 71 MB, in 10 s) and fasthttp's
// warnings about connections. A line goes out once per log.repeat_interval
// for each key (message, route, code); the next one that goes out carries
// suppressed=K, and log_suppressed_total counts each left out as it
// happens. Lines the edge bounds itself (one per upstream call, within the
// budget) and the access log (log.access_sample) are not sampled here.
type Repeats struct {
	mu   sync.Mutex
	keys map[Key]repeatState
}

// Key is what lines are counted by: message, route (or account), code.
type Key struct{ Msg, Route, Code string }

type repeatState struct {
	next       int64 // Unix ns before which the key's lines are left out
	suppressed int64 // left out since the last line
}

// maxRepeatKeys bounds the keys held. Messages, routes and codes come from
// fixed sets, so it is never reached; if it were, the table starts afresh
// (the counts of lines left out stay right in the metric).
const maxRepeatKeys = 4096

// Allow reports whether a line of k may go out at now and, if so, how many
// were left out before it.
func (r *Repeats) Allow(k Key, now time.Time, interval time.Duration) (ok bool, suppressed int64) {
	if interval <= 0 {
		return true, 0
	}
	t := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	st, found := r.keys[k]
	if r.keys == nil || (!found && len(r.keys) >= maxRepeatKeys) {
		r.keys = make(map[Key]repeatState)
	}
	if t < st.next {
		st.suppressed++
		r.keys[k] = st
		return false, 0
	}
	r.keys[k] = repeatState{next: t + int64(interval)}
	return true, st.suppressed
}

// Threshold turns a sampled fraction (0..1: log.access_sample, one in
// admin.top_sample) into the threshold a random uint64 is compared with.
func Threshold(fraction float64) uint64 {
	switch {
	case fraction <= 0:
		return 0
	case fraction >= 1:
		return math.MaxUint64
	}
	return uint64(fraction * (1 << 64))
}
