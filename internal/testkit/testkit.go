// Package testkit holds what the packages' tests share: a log sink that
// goroutines write to while the test reads it, and a bounded wait for a
// condition that only polling can observe.
package testkit

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer is an io.Writer for a logger shared by goroutines.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the JSON lines written so far whose msg is msg ("" = all);
// a line that is not JSON fails the test.
func (b *LogBuffer) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if msg == "" || m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Count is the number of lines whose msg is msg.
func (b *LogBuffer) Count(t testing.TB, msg string) int {
	t.Helper()
	return len(b.Lines(t, msg))
}

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test after 10 seconds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
