package tracing

import (
	"errors"
	"explorer-edge/internal/testkit"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestTracingErrorsLoggedSampled: OpenTelemetry's errors (here a refused
// export whose body is a multi-line HTML page) become one WARN line each,
// on one line, bounded, with any URL password redacted, and at most one per
// interval for each kind, the next one counting those left out.
func TestTracingErrorsLoggedSampled(t *testing.T) {
	var b testkit.LogBuffer
	now := time.Unix(1_700_000_000, 0)
	h := &otelErrors{log: slog.New(slog.NewJSONHandler(&b, nil)), interval: 10 * time.Second, now: func() time.Time { return now }}
	page := "<html>\n<head><title>500 Internal Server Error</title></head>\n<body>\n" + strings.Repeat("<p>filler</p>\n", 500) + "</body>\n</html>"
	refused := errors.New("traces export: failed to send to http://user:hunter22@collector:4318/v1/traces: 500 Internal Server Error (body: " + page + ")")
	for range 50 {
		h.Handle(refused)
	}
	h.Handle(errors.New("traces export: context deadline exceeded"))
	now = now.Add(11 * time.Second)
	h.Handle(refused)
	lines := b.Lines(t, "tracing failed")
	if len(lines) != 3 || len(strings.Split(strings.TrimSpace(b.String()), "\n")) != 3 {
		t.Fatalf("52 errors of two kinds over 11 s logged as:\n%s", b.String())
	}
	for i, l := range lines {
		msg, _ := l["err"].(string)
		if l["level"] != "WARN" || strings.Contains(msg, "\n") || len(msg) > maxOtelError+3 || strings.Contains(msg, "hunter22") {
			t.Errorf("line %d: %v", i, l)
		}
	}
	if !strings.Contains(lines[0]["err"].(string), "500 Internal Server Error") || lines[1]["err"] != "traces export: context deadline exceeded" {
		t.Errorf("lines: %v", lines)
	}
	if lines[0]["suppressed"] != nil || lines[2]["suppressed"] != float64(49) {
		t.Errorf("suppressed: first %v, after the interval %v, want none and 49", lines[0]["suppressed"], lines[2]["suppressed"])
	}
}
