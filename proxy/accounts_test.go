package proxy

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// mirrorCreds are the second account's: another key of another upstream.
var mirrorCreds = signer.Credentials{APIKey: "mirror-key", SecretKey: "A1B2C3D4E5F60000000000000000CAFE", Passphrase: "mirror-pass"}

// secondSim is an explorer-sim of its own (the same chain, other
// credentials) on a free port; close stops it answering (connections
// refused), as an upstream that died.
type secondSim struct {
	*sim.Server
	url   string
	close func()
}

func startSecondSim(t *testing.T) *secondSim {
	t.Helper()
	return startSecondSimAt(t, newClock().Now) // the chain the harness sim has
}

// withMirror adds the second sim as the account "mirror".
func withMirror(m *secondSim, rate float64, burst int) harnessOpt {
	return func(c *config.Config, _ *sim.Config) {
		c.Upstream.Accounts = []config.Account{{Name: "mirror", BaseURL: m.url, APIKey: mirrorCreds.APIKey,
			SecretKey: mirrorCreds.SecretKey, Passphrase: mirrorCreds.Passphrase, Rate: rate, Burst: burst}}
	}
}

// coldMisses asks n block lists at heights no one asked before and counts
// the answers that were not data.
func coldMisses(t *testing.T, h *harness, from, n int) (failed int) {
	t.Helper()
	final := h.sim.FinalizedHeight("CHAINX")
	for i := range n {
		r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", final-int64(from+i)))
		if r.status != 200 || r.code() != "0" {
			failed++
			t.Logf("miss %d: %d %s", i, r.status, r.body)
		}
	}
	return failed
}

func calls(s *sim.Server) int64 { return s.Stats().RequestsTotal }

// TestAccountsShareTheMisses: two healthy accounts both serve.
func TestAccountsShareTheMisses(t *testing.T) {
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, 10000, 10000))
	if failed := coldMisses(t, h, 0, 40); failed > 0 {
		t.Fatalf("%d of 40 misses failed", failed)
	}
	a, b := h.upstreamCalls(), calls(m.Server)
	t.Logf("default %d calls, mirror %d", a, b)
	// Alike accounts take turns; one slower by more than a step of 10 ms
	// (a loaded machine) gets fewer, but a healthy account is never idle.
	if a+b != 40 || a == 0 || b == 0 {
		t.Errorf("default %d and mirror %d calls for 40 misses: want 40, shared", a, b)
	}
	if v := gathered(t, h).value(t, "explorer_edge_upstream_account_requests_total", "account", "mirror", "outcome", "ok"); v != float64(b) {
		t.Errorf("upstream_account_requests_total{mirror,ok} = %v, the mirror answered %d", v, b)
	}
}

// TestAccountDiesOthersAnswer: an account whose upstream is gone
// (connections refused) costs no client an error while another answers.
func TestAccountDiesOthersAnswer(t *testing.T) {
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, 10000, 10000))
	m.close()
	if failed := coldMisses(t, h, 0, 40); failed > 0 {
		t.Errorf("%d of 40 misses failed with one account of two dead", failed)
	}
	if ok, why := h.p.Ready(); !ok {
		t.Errorf("not ready with one account alive: %s", why)
	}
}

// TestAccountThrottledTrafficShifts: an account answering 429 with
// Retry-After 30 is locked out; its traffic goes to the other at once and
// it sees no more calls while locked out.
func TestAccountThrottledTrafficShifts(t *testing.T) {
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, 10000, 10000))
	m.SetFaults(sim.Faults{HTTP429: 1, RetryAfter: 30})
	if failed := coldMisses(t, h, 0, 40); failed > 0 {
		t.Errorf("%d of 40 misses failed with one account of two throttled", failed)
	}
	if b := calls(m.Server); b > 1 {
		t.Errorf("the throttled account got %d calls within its Retry-After, want 1", b)
	}
	if a := h.upstreamCalls(); a != 40 {
		t.Errorf("the default account answered %d of 40 misses", a)
	}
	// Both throttled: no account can serve; /readyz says so, and a miss
	// is refused with the first lock-out's Retry-After.
	h.sim.SetFaults(sim.Faults{HTTP429: 1, RetryAfter: 30})
	coldMisses(t, h, 100, 1)
	if ok, why := h.p.Ready(); !strings.Contains(why, "throttled") {
		t.Errorf("both accounts throttled, readiness %v %q", ok, why)
	}
	final := h.sim.FinalizedHeight("CHAINX")
	r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", final-200))
	if r.status != 503 || r.header["Retry-After"] == "" {
		t.Errorf("a miss with every account locked out: %d %v %s", r.status, r.header["Retry-After"], r.body)
	}
}

// TestAccountDroppingConnectionsRetriesElsewhere: an account that drops
// every connection: each miss it is given is retried on the other
// account, with a token of that account, and its breaker opens.
func TestAccountDroppingConnectionsRetriesElsewhere(t *testing.T) {
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, 10000, 10000))
	m.SetFaults(sim.Faults{Drop: 1})
	if failed := coldMisses(t, h, 0, 40); failed > 0 {
		t.Errorf("%d of 40 misses failed with one account of two dropping connections", failed)
	}
	b := calls(m.Server)
	if limit := int64(h.cfg.Upstream.BreakerFailures); b > limit {
		t.Errorf("the dropping account got %d calls, more than its breaker's %d failures", b, limit)
	}
	f := gathered(t, h)
	if tokens := f.value(t, "explorer_edge_upstream_account_requests_total", "account", "default", "outcome", "ok"); tokens != 40 {
		t.Errorf("the default account answered %v of 40 misses", tokens)
	}
}

// TestAccountBudgetsHold: under misses beyond both accounts' rates,
// neither upstream sees more than its rate x span + burst, and together
// they serve about both budgets: a client is refused only when both are
// spent.
func TestAccountBudgetsHold(t *testing.T) {
	const rate, burst = 10, 3
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, rate, burst), func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = rate, burst
	})
	final := h.sim.FinalizedHeight("CHAINX")
	var served, refused, next atomic.Int64
	start := time.Now()
	stop := start.Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", final-next.Add(1)))
				switch {
				case r.status == 200 && r.code() == "0":
					served.Add(1)
				case r.status == 503:
					refused.Add(1)
				default:
					t.Errorf("%d %s", r.status, r.body)
				}
			}
		}()
	}
	wg.Wait()
	span := time.Since(start)
	a, b := h.upstreamCalls(), calls(m.Server)
	limit := int64(rate*span.Seconds()) + burst + 1
	t.Logf("over %v: default %d calls, mirror %d (each at most %d); %d served, %d refused", span.Round(time.Millisecond), a, b, limit, served.Load(), refused.Load())
	if a > limit || b > limit {
		t.Errorf("an account above its rate x span + burst: default %d, mirror %d, limit %d", a, b, limit)
	}
	if one := int64(rate*2) + burst; served.Load() <= one {
		t.Errorf("%d misses served, no more than one account's budget (%d)", served.Load(), one)
	}
}

// TestFleetAccountBudgetsHold: two nodes on one redis-server share each
// account's budget (budget and budget:mirror): under misses beyond both
// rates on both nodes, neither upstream sees more than its rate x span +
// burst in all.
func TestFleetAccountBudgetsHold(t *testing.T) {
	const rate, burst = 10, 3
	rdb := startRedis(t)
	m := startSecondSim(t)
	h, edges := newFleet(t, rdb, 2, withMirror(m, rate, burst), func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = rate, burst
	})
	final := h.sim.FinalizedHeight("CHAINX")
	var served, next atomic.Int64
	start := time.Now()
	stop := start.Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 12 {
		e := edges[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				r := e.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", final-next.Add(1)))
				if r.status == 200 && r.code() == "0" {
					served.Add(1)
				} else if r.status != 503 {
					t.Errorf("%d %s", r.status, r.body)
				}
			}
		}()
	}
	wg.Wait()
	span := time.Since(start)
	a, b := h.upstreamCalls(), calls(m.Server)
	limit := int64(rate*span.Seconds()) + burst + 1
	t.Logf("two nodes over %v: default %d calls, mirror %d (each at most %d); %d served", span.Round(time.Millisecond), a, b, limit, served.Load())
	if a > limit || b > limit {
		t.Errorf("an account above its fleet-wide rate x span + burst: default %d, mirror %d, limit %d", a, b, limit)
	}
	if b == 0 {
		t.Error("the mirror account was never used")
	}
}

// TestAccountsReload: a reload may change an account's rate and
// credentials; adding, renaming or moving an account needs a restart and
// the reload is refused whole.
func TestAccountsReload(t *testing.T) {
	m := startSecondSim(t)
	h := newHarness(t, withMirror(m, 10, 5))
	cfg := h.cfg
	cfg.Upstream.Accounts = append([]config.Account(nil), h.cfg.Upstream.Accounts...)
	cfg.Upstream.Accounts[0].Rate = 40
	if err := h.p.Reload(cfg); err != nil {
		t.Fatalf("a new rate for an account refused: %v", err)
	}
	if v := gathered(t, h).value(t, "explorer_edge_upstream_account_budget_rate", "account", "mirror"); v != 40 {
		t.Errorf("mirror's budget rate %v after the reload, want 40", v)
	}
	renamed := cfg
	renamed.Upstream.Accounts = []config.Account{cfg.Upstream.Accounts[0]}
	renamed.Upstream.Accounts[0].Name = "other"
	if err := h.p.Reload(renamed); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("a renamed account reloaded: %v", err)
	}
	added := cfg
	added.Upstream.Accounts = append(append([]config.Account(nil), cfg.Upstream.Accounts...), config.Account{Name: "third",
		BaseURL: m.url, APIKey: "k", SecretKey: "s", Passphrase: "p", Rate: 1, Burst: 1})
	if err := h.p.Reload(added); err == nil {
		t.Error("an added account reloaded")
	}
}
