package proxy

import (
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// TestBatchStaleHashDoesNotRefuseMissingOne: a hash
// with no copy waits for the budget (budget_wait) whether it is asked
// alone or beside a stale hash. Beside one it was refused at once (503,
// 50001): the batch took "another hash of this request is stale" for
// "this question has a stale copy", which waits for no token.
func TestBatchStaleHashDoesNotRefuseMissingOne(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = 2, 1
		c.Upstream.BudgetWait = 3 * time.Second
	})
	multi := func(hs ...string) string {
		return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hs, ",")
	}
	stale, missing := h.sim.UnknownHash(1), h.sim.UnknownHash(2)
	// Negative answers: 5 s fresh, then 5 s stale_while_revalidate.
	if r := h.get(multi(stale)); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.clock.Advance(6 * time.Second)

	// Alone, a missing hash waits for a token: the budget is spent by the
	// one before it (burst 1), the next token is 0.5 s away.
	if r := h.get(multi(h.sim.UnknownHash(3))); r.status != 200 {
		t.Fatalf("first miss: %d %s", r.status, r.body)
	}
	if r := h.get(multi(h.sim.UnknownHash(4))); r.status != 200 {
		t.Fatalf("a missing hash alone, the budget spent: %d %s; want 200 after a wait", r.status, r.body)
	}

	// Beside a stale hash, the budget spent again just before.
	start := time.Now()
	r := h.get(multi(stale, missing))
	if r.status != 200 || r.code() != "0" {
		t.Fatalf("a missing hash beside a stale one, the budget spent: %d %s after %s; want 200 after a wait", r.status, r.body, time.Since(start))
	}
	asked := false
	for _, target := range h.rec.all() {
		asked = asked || strings.Contains(target, missing)
	}
	if !asked {
		t.Fatal("the missing hash was never asked of the upstream")
	}
}

// TestBatchJoinerNotDecidedByOpener: a request whose hash
// has no copy joins a group that a stale hash's refresh opened; the call
// waits for the budget for it. The opener's "I have a copy" was the
// group's, and the joiner was refused at once.
func TestBatchJoinerNotDecidedByOpener(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate, c.Upstream.Burst = 2, 1
		c.Upstream.BudgetWait = 3 * time.Second
		c.Cache.BatchWindow = 150 * time.Millisecond
	})
	multi := func(hs ...string) string {
		return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hs, ",")
	}
	stale, missing := h.sim.UnknownHash(1), h.sim.UnknownHash(2)
	if r := h.get(multi(stale)); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.clock.Advance(6 * time.Second) // stale: negative, 5 s fresh
	// The budget spent: the next token is 0.5 s away, after the window.
	if r := h.get(multi(h.sim.UnknownHash(3))); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}

	// Asked by another route (its own whole key is not cached): the hash
	// is served stale and refreshed by a batch call.
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + stale
	if r := h.get(fills); r.status != 200 || !strings.Contains(r.header["Cache-Status"], "stale-while-revalidate") {
		t.Fatalf("stale hash: %d %q", r.status, r.header["Cache-Status"])
	}
	opened := func() bool { // the refresh's group is gathering
		h.p.work.batch.mu.Lock()
		defer h.p.work.batch.mu.Unlock()
		g := h.p.work.batch.open["TRADE_ZONE"]
		return g != nil && len(g.hashes) == 1 && g.hashes[0] == stale
	}
	testkit.WaitFor(t, "the stale hash's refresh to open a group", opened)
	start := time.Now()
	r := h.get(multi(missing))
	if r.status != 200 || r.code() != "0" {
		t.Fatalf("a missing hash joining a refresh's group, the budget spent: %d %s after %s; want 200 after a wait", r.status, r.body, time.Since(start))
	}
}
