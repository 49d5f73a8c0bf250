package main

import (
	"fmt"
	"time"
)

// phaseRow is one phase's line of the summary: its answers, the upstream
// calls made while it was in force against the budget of its time, and
// the nodes' peaks while it ran.
type phaseRow struct {
	title   string
	counts  *phaseCounts
	redis   bool          // Redis was paused or stopped
	dur     time.Duration // between the reads of the sim's count
	calls   int64         // -1: unknown (a stats read failed)
	budget  float64       // rate x dur + burst
	gorPeak float64       // the highest of any node; 0 no sample
	rssPeak float64
	over    bool // its budget window went beyond budgetSlack
}

// phaseTable makes the rows of every phase that ended. The calls of a
// phase are the sim's count at the next phase's start less the count at
// its own; a call in flight at a boundary counts where the sim received
// it.
func phaseTable(tl *timeline, nodes []*node, fleet bool, rate, burst float64) []phaseRow {
	tl.mu.Lock()
	spans := append([]span(nil), tl.spans...)
	tl.mu.Unlock()
	var samples [][]sample
	for _, n := range nodes {
		samples = append(samples, n.scr.all())
	}
	var rows []phaseRow
	for i, sp := range spans {
		if i >= maxPhases || sp.to.IsZero() {
			break
		}
		row := phaseRow{title: tl.names[i], counts: &tl.phase[i], redis: fleet && sp.ph.redis.every > 0, dur: sp.to.Sub(sp.from), calls: -1}
		if i+1 < len(spans) && sp.calls >= 0 && spans[i+1].calls >= 0 {
			row.calls, row.dur = spans[i+1].calls-sp.calls, spans[i+1].callsAt.Sub(sp.callsAt)
		}
		row.budget = rate*row.dur.Seconds() + burst
		for _, ss := range samples {
			for _, sm := range ss {
				if !sm.at.Before(sp.from) && sm.at.Before(sp.to) {
					row.gorPeak, row.rssPeak = max(row.gorPeak, sm.goroutines), max(row.rssPeak, sm.rss)
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// overBudget checks the phases' calls against the budget, by windows: a
// phase alone, or a phase with Redis faults together with the next one.
// Within a Redis phase the fleet may spend, beyond rate x time + burst,
// what the nodes spent alone during the last outage (their local shares
// of the rate times the outage); that debt is charged to the shared bucket
// at the first take after Redis answers, so a window that includes the
// next phase holds the plain bound. It marks the rows of every window
// beyond budgetSlack x its budget and returns a line for each.
func overBudget(rows []phaseRow, rate, burst float64) []string {
	var out []string
	for i := 0; i < len(rows); i++ {
		j := i
		if rows[i].redis && i+1 < len(rows) {
			j = i + 1
		}
		var calls int64
		var dur time.Duration
		known := true
		for k := i; k <= j; k++ {
			known = known && rows[k].calls >= 0
			calls += rows[k].calls
			dur += rows[k].dur
		}
		if !known {
			continue
		}
		b := rate*dur.Seconds() + burst
		if float64(calls) > budgetSlack*b {
			for k := i; k <= j; k++ {
				rows[k].over = true
			}
			which := fmt.Sprintf("phase %d", i+1)
			if j > i {
				which = fmt.Sprintf("phases %d-%d", i+1, j+1)
			}
			out = append(out, fmt.Sprintf("%s: %d upstream calls in %.1fs, %.2f x rate x time + burst = %.0f", which, calls, dur.Seconds(), float64(calls)/b, b))
		}
	}
	return out
}
