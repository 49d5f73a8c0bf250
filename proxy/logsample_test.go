package proxy

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// failedLines are the "request failed" lines in logs, and the sum of their
// suppressed counts.
func failedLines(t *testing.T, logs *testkit.LogBuffer) (lines int, suppressed int64) {
	t.Helper()
	for _, l := range logs.Lines(t, "request failed") {
		if l["level"] != "WARN" {
			t.Fatalf("request failed at level %v", l["level"])
		}
		lines++
		if n, ok := l["suppressed"].(float64); ok {
			suppressed += int64(n)
		}
	}
	return lines, suppressed
}

// TestFailureLogIsSampled: a client that makes the edge answer 5xx in a
// loop (one WARN line each, 353,826 lines in 10 s in the report) gets one
// line per (route, code) per second; the next line says how many were left
// out, and the lines and the counts add up to the answers.
func TestFailureLogIsSampled(t *testing.T) {
	const answers = 10_000
	h := newHarness(t)
	logs := withLog(h)
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 4000}, nil)
	fail := func(id route.ID, e *envelope.Error) {
		h.p.fail(&ctx, h.p.settings.Load(), id, time.Now(), e.With(errors.New("upstream answered 500"), 0))
	}
	for range answers {
		fail(route.BlockList, envelope.ErrBadGateway) // the test clock stands still: one second
	}
	lines, suppressed := failedLines(t, logs)
	t.Logf("%d answers, %d lines, %d suppressed reported", answers, lines, suppressed)
	if lines != 1 {
		t.Fatalf("%d WARN lines for %d failures within one second, want 1", lines, answers)
	}

	// Another route or code is another key: its first line goes out.
	fail(route.TransactionMulti, envelope.ErrBadGateway)
	fail(route.BlockList, envelope.ErrTimeout)
	if lines, _ = failedLines(t, logs); lines != 3 {
		t.Fatalf("%d lines after two new keys, want 3", lines)
	}

	// A second later the next failure is logged with the count left out.
	h.clock.Advance(time.Second)
	fail(route.BlockList, envelope.ErrBadGateway)
	lines, suppressed = failedLines(t, logs)
	if lines != 4 || suppressed != answers-1 {
		t.Fatalf("after a second: %d lines reporting %d suppressed, want 4 and %d", lines, suppressed, answers-1)
	}
	if got := counterValue(t, h, "explorer_edge_log_suppressed_total"); got != answers-1 {
		t.Fatalf("log_suppressed_total %v, want %d", got, answers-1)
	}
}

// TestFailureLogSampledEndToEnd: the same through the server, with an
// upstream that answers 500 to everything and no retries.
func TestFailureLogSampledEndToEnd(t *testing.T) {
	const answers = 1_000
	h := newHarness(t, func(c *config.Config, s *sim.Config) {
		c.Upstream.Retries = 0
		s.Faults = sim.Faults{HTTP500: 1}
	})
	logs := withLog(h)
	for i := range answers {
		r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", 1+i%50))
		if r.status < 500 {
			t.Fatalf("answer %d: %d, want a 5xx", i, r.status)
		}
	}
	lines, suppressed := failedLines(t, logs)
	t.Logf("%d 5xx answers, %d lines, %d suppressed reported", answers, lines, suppressed)
	if lines > 4 {
		t.Fatalf("%d lines for %d 5xx answers; want at most 4", lines, answers)
	}
	metric := counterValue(t, h, "explorer_edge_log_suppressed_total")
	// One key per code (50026 until the breaker opens, then 50001).
	if lines > 4 || lines+int(metric) != answers {
		t.Fatalf("%d lines and %v suppressed for %d 5xx answers; want at most 4 lines, adding up", lines, metric, answers)
	}
}

// TestFasthttpWarningsAreSampled: fasthttp's warnings about connections
// (one per connection over server limits) are sampled per format; its
// debug lines about one client's malformed request all go out.
func TestFasthttpWarningsAreSampled(t *testing.T) {
	h := newHarness(t)
	logs := withLog(h)
	l := h.p.connLogger()
	for i := range 1_000 {
		l.Printf("The number of connections from %s exceeds MaxConnsPerIP=%d", fmt.Sprintf("203.0.113.%d", i%250), 4)
	}
	l.Printf("Permanent error when accepting new connections: %v", errors.New("too many open files"))
	h.clock.Advance(time.Second)
	l.Printf("The number of connections from %s exceeds MaxConnsPerIP=%d", "203.0.113.1", 4)
	lines := logs.Lines(t, "fasthttp")
	if len(lines) != 3 || lines[2]["suppressed"] != 999.0 {
		t.Fatalf("%d fasthttp lines (want 3), the last %v (want suppressed 999)", len(lines), lines[len(lines)-1])
	}
	if got := counterValue(t, h, "explorer_edge_log_suppressed_total"); got != 999 {
		t.Fatalf("log_suppressed_total %v, want 999", got)
	}
}
