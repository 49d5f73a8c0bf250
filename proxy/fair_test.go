package proxy

import (
	"explorer-edge/config"
	"explorer-edge/sim"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	greedyKey, greedySecret, greedyPass = "greedy-key", "6EEDD0000000000000000000000000AA", "greedy-pass"
	quietKey, quietSecret, quietPass    = "quiet-key", "9E1E70000000000000000000000000BB", "quiet-pass"
)

// signedAs returns the headers of a request for path signed by a client.
func signedAs(key, secret, pass, path string) []string {
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	return []string{"SVC-ACCESS-KEY", key, "SVC-ACCESS-PASSPHRASE", pass, "SVC-ACCESS-SIGN", sign(secret, ts, path), "SVC-ACCESS-TIMESTAMP", ts}
}

// TestFairShareKeepsQuietClientServed is the attack of a client within its
// own request limit asking only cold keys, about three times the upstream
// budget in misses, beside a quiet client asking fresh keys at a quarter
// of the budget. Every miss of the quiet client is owed a token before
// the greedy client's next ones: its misses are served, and the greedy
// client gets the rest of the budget. Before the fair queue, the greedy
// client's queued reservations ran past budget_wait and the quiet client's
// misses were refused.
func TestFairShareKeepsQuietClientServed(t *testing.T) {
	const rate, burst = 20, 5
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = rate, burst
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{
			{Name: "greedy", APIKey: greedyKey, SecretKey: greedySecret, Passphrase: greedyPass},
			{Name: "quiet", APIKey: quietKey, SecretKey: quietSecret, Passphrase: quietPass},
		}
	})
	final := h.sim.FinalizedHeight("CHAINX")
	path := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", height)
	}
	type tally struct{ ok, refused, other atomic.Int64 }
	var greedy, quiet tally
	record := func(tl *tally, r resp) {
		switch {
		case r.status == 200 && r.code() == "0":
			tl.ok.Add(1)
		case r.status == 503:
			tl.refused.Add(1)
		default:
			tl.other.Add(1)
			t.Errorf("unexpected answer %d %s", r.status, r.body)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for range 24 { // about 3x the budget in misses
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := path(final - next.Add(1)) // cold: each height once
				record(&greedy, h.get(p, signedAs(greedyKey, greedySecret, greedyPass, p)...))
			}
		}()
	}
	// The quiet client: 15 fresh keys, one every 200 ms (5/s, a quarter of
	// the budget), from the top of the chain where the greedy one never asks.
	const quietAsks = 15
	tick := time.NewTicker(200 * time.Millisecond)
	for i := range quietAsks {
		<-tick.C
		p := path(final - 5_000 - int64(i))
		record(&quiet, h.get(p, signedAs(quietKey, quietSecret, quietPass, p)...))
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	span := time.Since(start)
	calls := h.upstreamCalls()
	t.Logf("over %v: greedy %d served %d refused; quiet %d served %d refused; upstream calls %d (greedy %v, quiet %v)",
		span.Round(time.Millisecond), greedy.ok.Load(), greedy.refused.Load(), quiet.ok.Load(), quiet.refused.Load(), calls,
		gathered(t, h).value(t, "explorer_edge_client_upstream_calls_total", "client", "greedy"),
		gathered(t, h).value(t, "explorer_edge_client_upstream_calls_total", "client", "quiet"))
	if q := quiet.ok.Load(); q < quietAsks*9/10 {
		t.Errorf("the quiet client got %d of %d misses served, want at least 90%%", q, quietAsks)
	}
	if greedy.ok.Load() == 0 || greedy.refused.Load() == 0 {
		t.Errorf("the greedy client should get the rest of the budget and be refused beyond it: %d served, %d refused",
			greedy.ok.Load(), greedy.refused.Load())
	}
	f := gathered(t, h)
	if got := f.value(t, "explorer_edge_client_refused_total", "client", "greedy", "reason", "budget"); got != float64(greedy.refused.Load()) {
		t.Errorf("client_refused_total{greedy,budget} = %v, the greedy client saw %d refusals", got, greedy.refused.Load())
	}
	if got := f.value(t, "explorer_edge_client_upstream_calls_total", "client", "quiet"); got != float64(quiet.ok.Load()) {
		t.Errorf("client_upstream_calls_total{quiet} = %v for %d misses served", got, quiet.ok.Load())
	}
	if limit := int64(rate*span.Seconds()) + burst + 2; calls > limit {
		t.Errorf("%d upstream calls in %v, above rate x span + burst = %d", calls, span, limit)
	}
}

// TestAccountingPerClient: each client's requests by result, the upstream
// calls its misses caused, the requests another's fetch answered and the
// bytes it was sent, on series named by the configured client; a forged
// request carrying a client's key counts on no one.
func TestAccountingPerClient(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{
			{Name: "web", APIKey: greedyKey, SecretKey: greedySecret, Passphrase: greedyPass},
			{Name: "app", APIKey: quietKey, SecretKey: quietSecret, Passphrase: quietPass},
		}
	})
	web := func(p string) resp { return h.get(p, signedAs(greedyKey, greedySecret, greedyPass, p)...) }
	app := func(p string) resp { return h.get(p, signedAs(quietKey, quietSecret, quietPass, p)...) }
	slow := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"

	// web leads a miss held upstream; three requests of app join its
	// flight before it is let go (a 300 ms delay let late ones miss it).
	gate := h.holdUpstream()
	defer gate.release()
	answers := make([]resp, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); answers[0] = web(slow) }()
	gate.waitArrived(t, 1)
	for i := 1; i < len(answers); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = app(slow) }()
	}
	waitLoading(t, len(answers))
	gate.release()
	wg.Wait()
	hit := web(slow) // fresh for a second of the test clock, which stands still
	forged := h.get(slow, "SVC-ACCESS-KEY", greedyKey, "SVC-ACCESS-PASSPHRASE", greedyPass,
		"SVC-ACCESS-SIGN", "forged", "SVC-ACCESS-TIMESTAMP", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	if forged.status != 401 {
		t.Fatalf("forged signature answered %d", forged.status)
	}
	for i, r := range append(answers, hit) {
		if r.status != 200 {
			t.Fatalf("answer %d: %d %s", i, r.status, r.body)
		}
	}

	f := gathered(t, h)
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"explorer_edge_client_upstream_calls_total", []string{"client", "web"}, 1},
		{"explorer_edge_client_upstream_calls_total", []string{"client", "app"}, 0},
		{"explorer_edge_client_requests_total", []string{"client", "web", "result", "miss"}, 1},
		{"explorer_edge_client_requests_total", []string{"client", "web", "result", "hit"}, 1},
		{"explorer_edge_client_requests_total", []string{"client", "web", "result", "error"}, 0},
		{"explorer_edge_client_requests_total", []string{"client", "app", "result", "collapsed"}, 3},
		{"explorer_edge_client_requests_total", []string{"client", "app", "result", "miss"}, 0},
		{"explorer_edge_client_response_bytes_total", []string{"client", "web"}, float64(len(answers[0].body) + len(hit.body))},
		{"explorer_edge_client_response_bytes_total", []string{"client", "app"}, float64(3 * len(answers[1].body))},
	}
	for _, w := range want {
		if got := f.value(t, w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	if _, ok := f["explorer_edge_client_requests_total"]; ok {
		for _, m := range f["explorer_edge_client_requests_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "client" && l.GetValue() != "web" && l.GetValue() != "app" {
					t.Errorf("a series of client %q, neither configured nor possible in signed mode", l.GetValue())
				}
			}
		}
	}
}

// TestRateLimitHeaders: a signed client with a request limit is told its
// own limit (RateLimit-Policy) and what is left of it (RateLimit) on every
// answer, its 429 included; a client without a limit gets neither field.
func TestRateLimitHeaders(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{
			{Name: "limited", APIKey: greedyKey, SecretKey: greedySecret, Passphrase: greedyPass, Rate: 0.5, Burst: 3},
			{Name: "free", APIKey: quietKey, SecretKey: quietSecret, Passphrase: quietPass},
		}
	})
	p := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	var got []string
	var last resp
	for range 4 {
		last = h.get(p, signedAs(greedyKey, greedySecret, greedyPass, p)...)
		if pol := last.header["Ratelimit-Policy"]; pol != `"client";q=3;w=6` {
			t.Fatalf("RateLimit-Policy %q (status %d)", pol, last.status)
		}
		got = append(got, last.header["Ratelimit"])
	}
	// r falls 2, 1, 0 (a token may come back during the test at 0.5/s:
	// then r is one higher); t is the seconds until the bucket is full.
	for i, g := range got[:3] {
		var r, tt int
		if _, err := fmt.Sscanf(g, `"client";r=%d;t=%d`, &r, &tt); err != nil {
			t.Fatalf("RateLimit %q: %v", g, err)
		}
		if r < 2-i || r > 3-i || tt < 1 || tt > 6 {
			t.Errorf("request %d: RateLimit %q, want r=%d and t within 1..6", i+1, g, 2-i)
		}
	}
	if last.status != 429 || !strings.HasPrefix(got[3], `"client";r=0;t=`) {
		t.Errorf("the fourth request: status %d, RateLimit %q; want 429 and r=0", last.status, got[3])
	}
	if n := gathered(t, h).value(t, "explorer_edge_client_refused_total", "client", "limited", "reason", "rate_limit"); n != 1 {
		t.Errorf("client_refused_total{limited,rate_limit} = %v, want 1", n)
	}
	free := h.get(p, signedAs(quietKey, quietSecret, quietPass, p)...)
	if _, ok := free.header["Ratelimit"]; ok || free.header["Ratelimit-Policy"] != "" {
		t.Errorf("a client without a limit got RateLimit fields: %v", free.header)
	}
}
