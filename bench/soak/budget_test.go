package main

import (
	"strings"
	"testing"
	"time"
)

// TestOverBudget: a phase alone beyond 1.1 x (rate x time + burst) fails;
// a Redis phase is judged with the next one, which its debt is charged to.
func TestOverBudget(t *testing.T) {
	row := func(calls int64, redis bool) phaseRow {
		return phaseRow{calls: calls, dur: 3 * time.Second, redis: redis}
	}
	const rate, burst = 100, 100 // 400 a phase, 700 two
	cases := []struct {
		name string
		rows []phaseRow
		want []string // the windows reported
	}{
		{"within", []phaseRow{row(400, false), row(440, false)}, nil},
		{"a phase beyond", []phaseRow{row(400, false), row(441, false), row(10, false)}, []string{"phase 2:"}},
		{"a Redis phase's debt charged in the next", []phaseRow{row(500, true), row(250, false)}, nil},
		{"a Redis phase and the next beyond", []phaseRow{row(500, true), row(300, false)}, []string{"phases 1-2:"}},
		{"the last phase with Redis, alone", []phaseRow{row(400, false), row(500, true)}, []string{"phase 2:"}},
		{"unknown calls skipped", []phaseRow{row(-1, false), row(-1, true), row(900, false)}, []string{"phase 3:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := overBudget(c.rows, rate, burst)
			if len(got) != len(c.want) {
				t.Fatalf("got %q, want windows %q", got, c.want)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("got %q, want it to start %q", got[i], w)
				}
			}
			marked := 0
			for _, r := range c.rows {
				if r.over {
					marked++
				}
			}
			if (marked > 0) != (len(c.want) > 0) {
				t.Errorf("%d rows marked over, %d windows reported", marked, len(c.want))
			}
		})
	}
}
