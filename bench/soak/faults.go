package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// phase is one setting of explorer-sim's faults (the JSON of POST
// /sim/faults; absent fields are zero).
type phase struct {
	name   string
	faults map[string]any
}

// oversizedBytes is the size of the sim's oversized answers in the soak: 2
// MiB against the edge's upstream.max_response_bytes of 1 MiB (see
// edgeConfig). The defaults (9 MiB against 8 MiB) test the same limit but
// would make the sim allocate and send 9 MiB tens of times a second, and
// the soak would measure the loopback instead of the edge.
const oversizedBytes = 2 << 20

// phases is the cycle of faults, each kind alone and in mixes, with quiet
// phases between them (after which every answer must be good again). The
// run ends with a quiet phase of its own, outside the cycle.
var phases = []phase{
	{"none", map[string]any{}},
	{"latency spikes 50ms+[0,600ms)", map[string]any{"latency": "50ms", "jitter": "600ms"}},
	{"http500 20%", map[string]any{"http500": 0.2}},
	{"http429 10%, Retry-After 1", map[string]any{"http429": 0.1, "retry_after": 1}},
	{"envelope 50026 20%", map[string]any{"envelope": 0.2, "envelope_code": "50026"}},
	{"hang 3%", map[string]any{"hang": 0.03}},
	{"drop 20%", map[string]any{"drop": 0.2}},
	{"malformed 20%", map[string]any{"malformed": 0.2}},
	{"none", map[string]any{}},
	{"truncated 20%", map[string]any{"truncated": 0.2}},
	{"oversized 15%", map[string]any{"oversized": 0.15, "oversized_bytes": oversizedBytes}},
	{"envelope 50011 10%", map[string]any{"envelope": 0.1, "envelope_code": "50011"}},
	{"mix: 500, drop, malformed, truncated, latency", map[string]any{
		"http500": 0.1, "drop": 0.05, "malformed": 0.05, "truncated": 0.05, "latency": "10ms", "jitter": "40ms"}},
	{"block-list: http500 30%", map[string]any{"route": "block-list", "http500": 0.3}},
	{"mix: 429 (Retry-After 2), envelope, oversized, hang", map[string]any{
		"http429": 0.05, "retry_after": 2, "envelope": 0.1, "oversized": 0.05, "oversized_bytes": oversizedBytes, "hang": 0.02}},
	{"transaction-multi: drop 30% + latency", map[string]any{"route": "transaction-multi", "drop": 0.3, "latency": "20ms", "jitter": "600ms"}},
	{"latency spike 450ms+[0,200ms)", map[string]any{"latency": "450ms", "jitter": "200ms"}},
	{"mix: 500, 429, drop, malformed, truncated", map[string]any{
		"http500": 0.06, "http429": 0.03, "drop": 0.06, "malformed": 0.06, "truncated": 0.06}},
}

var (
	quiet   = phase{"quiet (no faults)", map[string]any{}}
	cleared = phase{"cleared after the load", map[string]any{}}
)

// span is a time during which a phase's faults may have been in force: from
// just before it was posted to just after the next one was.
type span struct {
	from, to time.Time // to zero: still in force
	ph       phase
}

func (s span) active() bool { return len(s.ph.faults) > 0 }

func (s span) envelopeCode() string {
	if f, _ := s.ph.faults["envelope"].(float64); f > 0 {
		code, _ := s.ph.faults["envelope_code"].(string)
		if code == "" {
			code = "50026"
		}
		return code
	}
	return ""
}

// timeline records which faults were in force when.
type timeline struct {
	mu    sync.Mutex
	spans []span
	names []string // phases of the cycle in the order run
	// cur is the index of the phase in force (-1 before the first); the
	// answers of requests sent under it are counted in phase[cur].
	cur   atomic.Int32
	phase [maxPhases]phaseCounts
}

const maxPhases = 128 // phases counted apart; later ones share the last

// phaseCounts are the answers to requests sent during one phase.
type phaseCounts struct {
	requests, good, stale, staleErr, failures, envelopes atomic.Int64
}

// current is where answers to a request sent now are counted (nil before
// the first phase: the warm-up).
func (tl *timeline) current() *phaseCounts {
	i := tl.cur.Load()
	if i < 0 {
		return nil
	}
	return &tl.phase[min(int(i), maxPhases-1)]
}

func newTimeline() *timeline {
	tl := &timeline{}
	tl.cur.Store(-1)
	return tl
}

// grace is how long after faults end an answer may still show them: an
// upstream attempt that started under them (timeout 500 ms, one retry,
// retry_max_time 2 s), the breaker's open time (1 s) and a probe, and a
// Retry-After of up to 2 s. Past it, with no fault in force, every answer
// must be good.
const grace = 3 * time.Second

// during reports whether any fault may have affected a request that ran
// from start to end, and the codes of the error envelopes injected then.
func (tl *timeline) during(start, end time.Time) (faulty bool, envelopeCodes map[string]bool) {
	from := start.Add(-grace)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i := len(tl.spans) - 1; i >= 0; i-- {
		s := tl.spans[i]
		if !s.to.IsZero() && s.to.Before(from) {
			break
		}
		if s.from.After(end) || !s.active() {
			continue
		}
		faulty = true
		if c := s.envelopeCode(); c != "" {
			if envelopeCodes == nil {
				envelopeCodes = map[string]bool{}
			}
			envelopeCodes[c] = true
		}
	}
	return faulty, envelopeCodes
}

// simControl talks to explorer-sim's /sim/* endpoints.
type simControl struct {
	base string
	hc   *http.Client
	tl   *timeline
}

// set replaces the sim's faults with ph, recording it in the timeline.
func (sc *simControl) set(ctx context.Context, ph phase) error {
	body, err := json.Marshal(ph.faults)
	if err != nil {
		return err
	}
	sc.tl.mu.Lock()
	now := time.Now()
	sc.tl.spans = append(sc.tl.spans, span{from: now, ph: ph})
	sc.tl.names = append(sc.tl.names, ph.name)
	sc.tl.cur.Store(int32(len(sc.tl.spans) - 1))
	sc.tl.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sc.base+"/sim/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := sc.hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST /sim/faults: %w", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /sim/faults %s: %d %s", body, resp.StatusCode, answer)
	}
	// The previous phase is over once the sim has answered.
	done := time.Now()
	sc.tl.mu.Lock()
	if n := len(sc.tl.spans); n >= 2 {
		sc.tl.spans[n-2].to = done
	}
	sc.tl.mu.Unlock()
	return nil
}

// simStats is the part of GET /sim/stats the soak reads.
type simStats struct {
	RequestsTotal int64 `json:"requests_total"`
	AuthFailures  int64 `json:"auth_failures"` // the edge signs every call: must stay 0
}

func (sc *simControl) stats(ctx context.Context) (st simStats, err error) {
	err = sc.getJSON(ctx, "/sim/stats", &st)
	return st, err
}

func (sc *simControl) resetStats(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sc.base+"/sim/stats/reset", nil)
	if err != nil {
		return err
	}
	resp, err := sc.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /sim/stats/reset: %d", resp.StatusCode)
	}
	return nil
}

func (sc *simControl) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := sc.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// cycle runs the phases in turn, each for period (the last one cut short),
// until quietAt, then sets the quiet phase. It returns when the quiet phase
// is set or ctx ends.
func (sc *simControl) cycle(ctx context.Context, period time.Duration, quietAt time.Time) error {
	for i := 0; time.Until(quietAt) > 0; i++ {
		if err := sc.set(ctx, phases[i%len(phases)]); err != nil {
			return err
		}
		t := time.NewTimer(min(period, time.Until(quietAt)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return sc.set(ctx, quiet)
}
