package upstream

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// testAccount is an account of the default configuration; nothing
// listens at its base_url.
func testAccount(t *testing.T) *account {
	t.Helper()
	cfg := config.Default().Upstream
	cfg.BaseURL = "http://127.0.0.1:1"
	u, err := newAccount("default", cfg, metrics.New(route.Names(), nil, nil), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUpstreamLockoutEndsOnAnAnswerSentAfterIt: a good answer to a call
// sent after the 429 ends the lock-out; one to a call already in flight
// when the 429 came does not.
func TestUpstreamLockoutEndsOnAnAnswerSentAfterIt(t *testing.T) {
	u := testAccount(t)
	now := time.Now()
	u.throttled([]byte("30"), now)
	u.recovered(now.Add(-time.Millisecond))
	if _, ok := u.lockedUntil(time.Now()); !ok {
		t.Errorf("an answer to a call sent before the 429 ended the lock-out")
	}
	u.recovered(now.Add(time.Millisecond))
	if until, ok := u.lockedUntil(time.Now()); ok {
		t.Errorf("an answer to a call sent after the 429 left the lock-out until %v", until)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	f := func(v string, want time.Duration) {
		t.Helper()
		if got := retryAfter([]byte(v), now, time.Minute); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
	f("", time.Second)
	f("garbage", time.Second)
	f("0", time.Second)
	f("-5", time.Second)
	f(" 7 ", 7*time.Second)
	f("60", time.Minute)
	f("31536000", time.Minute)
	f("9223372036854775807", time.Minute) // would overflow a Duration
	f(now.Add(20*time.Second).Format(http.TimeFormat), 20*time.Second)
	f(now.AddDate(1, 0, 0).Format(http.TimeFormat), time.Minute)
	f(now.Add(-time.Hour).Format(http.TimeFormat), time.Second)
}
