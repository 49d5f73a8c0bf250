package proxy

import (
	"bytes"
	"encoding/json"
	"explorer-edge/config"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"explorer-edge/sim"
)

// The differential freshness test: explorer-sim on the test clock, the edge
// in front of it with the shipped defaults, and a direct view of the same
// sim. For every route and a set of parameter shapes, ask through the edge
// and directly, move the chain in an irregular pattern, and ask again. The
// edge's bytes must be bytes the upstream said, no older than the edge's
// own headers admit, and within the bound of their class:
//
//   - final (a freshness lifetime of an hour or more): equal to what the
//     upstream says now, at every step, forever;
//   - head: what the upstream said at most 2 blocks ago;
//   - every class: no older than Age says (Age is honest) and served within
//     max-age + stale-while-revalidate of it (the windows it declares).
//
// It finds answers classed final that can still change (a hash list with a
// hash not yet mined) and head answers served many blocks late.

func compactJSON(t testing.TB, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("not JSON: %v: %.200s", err, b)
	}
	return out.String()
}

// cacheControl reads max-age and stale-while-revalidate (seconds; -1 absent).
func cacheControl(v string) (maxAge, swr int64) {
	maxAge, swr = -1, -1
	for _, d := range strings.Split(v, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "max-age":
			maxAge = n
		case "stale-while-revalidate":
			swr = n
		}
	}
	return maxAge, swr
}

// futureInternalHash is the hash of a transaction with internal
// transactions in a block that the chain mines blocksAhead blocks from now,
// found with a second view of the same chain whose clock runs ahead.
func futureInternalHash(t *testing.T, h *harness, chain string, blocksAhead int64) (string, int64) {
	t.Helper()
	ahead := time.Duration(blocksAhead) * time.Second
	future := sim.New(sim.Config{Now: func() time.Time { return h.clock.Now().Add(ahead) }})
	defer future.Close()
	head := h.sim.Head(chain)
	for _, hash := range future.InternalTxHashes(chain, 400) {
		req := httptest.NewRequest("GET", "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName="+chain+"&txId="+hash, nil)
		rec := httptest.NewRecorder()
		future.ServeHTTP(rec, req)
		var env struct {
			Data []struct {
				TransactionList []struct {
					Height string `json:"height"`
				} `json:"transactionList"`
			} `json:"data"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || len(env.Data) == 0 || len(env.Data[0].TransactionList) == 0 {
			continue
		}
		height, _ := strconv.ParseInt(env.Data[0].TransactionList[0].Height, 10, 64)
		if height > head+1 {
			return hash, height
		}
	}
	t.Fatalf("no transaction with internal transactions above head %d", head)
	return "", 0
}

// oracle is a second view of the harness's chain (same seed and defaults)
// on a clock of its own, to ask what the upstream said at any past moment.
type oracle struct {
	at  time.Time
	sim *sim.Server
}

func newOracle(prof *sim.Profile) *oracle {
	o := &oracle{}
	o.sim = sim.New(sim.Config{Now: func() time.Time { return o.at }, Profile: prof})
	return o
}

func (o *oracle) said(t testing.TB, target string, at time.Time) string {
	o.at = at
	rec := httptest.NewRecorder()
	o.sim.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
	return compactJSON(t, rec.Body.Bytes())
}

// grain is the resolution at which the test looks at the upstream's past;
// the clock moves in multiples of it.
const grain = 500 * time.Millisecond

// TestDifferentialFreshness runs under each reading of the points the
// vendor's documentation leaves open (docs/explorer-readings.md): the
// sim's old readings, the vendor's, and every other one at once (blocks
// without a state, so finality by depth; cross-chain ids other than the
// hash asked; records whose updateTime moves; "no data" codes).
func TestDifferentialFreshness(t *testing.T) {
	for _, prof := range []struct {
		name  string
		depth int64
	}{{"today", 0}, {"vendor", 0}, {"every", 12}} {
		t.Run(prof.name, func(t *testing.T) {
			p := sim.MustProfile(prof.name)
			h := newHarness(t, func(c *config.Config, s *sim.Config) {
				s.Profile = &p
				if prof.depth > 0 {
					c.ChainFinalityDepth = map[string]int64{"CHAINX": prof.depth, "TRADE_ZONE": prof.depth}
				}
			})
			o := newOracle(&p)
			defer o.sim.Close()
			// The profile set at the same chain time as the harness's sim
			// (update-moves counts from then).
			o.at = h.clock.Now()
			o.sim.SetProfile(p)
			differentialFreshness(t, h, o)
		})
	}
}

func differentialFreshness(t *testing.T, h *harness, o *oracle) {
	const chain, other = "CHAINX", "TRADE_ZONE"
	head := h.sim.Head(chain)
	mined := h.sim.InternalTxHashes(chain, 3)
	unmined, minedAt := futureInternalHash(t, h, chain, 6)
	plain := h.sim.TxHashes(chain, head-40) // mostly transfers: no internal rows
	cross := h.sim.CrossHashes(other, 4)
	token := h.sim.TokenContracts(chain)[0]
	unknown := h.sim.UnknownHash(1)

	const bl = "/api/v5/chainx/block/block-list?chainShortName="
	const tl = "/api/v5/chainx/block/transaction-list?chainShortName="
	const itm = "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName="
	newest := bl + chain // the page the tip promise is about
	targets := []string{
		// The newest pages, of both chains.
		newest,
		bl + chain + "&limit=5&page=2",
		bl + other + "&limit=3",
		// Pages at settled heights; one near the bottom of the window.
		bl + chain + "&height=" + fmt.Sprint(head-50) + "&limit=2",
		bl + chain + "&height=" + fmt.Sprint(head-9995) + "&limit=1",
		// A block's transactions: settled, newest, not yet mined.
		tl + chain + "&height=" + fmt.Sprint(head-30),
		tl + chain + "&height=" + fmt.Sprint(head) + "&limit=5",
		tl + chain + "&height=" + fmt.Sprint(head+3),
		tl + other + "&height=" + fmt.Sprint(h.sim.Head(other)-20) + "&protocolType=internal",
		// Hash lists: mined, mined with one not yet mined, with one that
		// has no internal transactions, unknown.
		itm + chain + "&txId=" + strings.Join(mined, ","),
		itm + chain + "&txId=" + mined[0] + "," + unmined,
		itm + chain + "&txId=" + unmined,
		itm + chain + "&txId=" + mined[1] + "," + plain[0],
		itm + chain + "&txId=" + unknown,
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=" + other + "&txId=" + strings.Join(cross, ","),
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=" + other + "&txId=" + cross[0] + "," + unknown,
		"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=" + other + "&txid=" + cross[3],
		"/api/v5/chainx/token/position-list?chainShortName=" + chain + "&tokenContractAddress=" + token + "&limit=3",
	}
	// Irregular steps: steady polling, idle spells, sub-block steps. About
	// three minutes of chain time, so the unmined hash gets mined and
	// settles, and holder amounts move three times.
	steps := []time.Duration{0}
	for _, d := range []time.Duration{grain, time.Second, 4 * time.Second, 8 * time.Second, 3 * grain, 2 * time.Second} {
		for range 6 {
			steps = append(steps, d)
		}
	}
	start := h.clock.Now()
	// The first failure of each kind on each target, and how many.
	type kind struct{ target, what string }
	count := map[kind]int{}
	var kinds []kind
	for i, step := range steps {
		h.clock.Advance(step)
		now := h.clock.Now()
		for _, target := range targets {
			direct := compactJSON(t, h.simGet(target))
			if o.said(t, target, now) != direct {
				t.Fatalf("the oracle disagrees with the upstream on %s", target)
			}
			r := h.get(target)
			msg := judge(t, o, target, start, now, compactJSON(t, r.body), direct, r, target == newest)
			if msg == "" {
				continue
			}
			k := kind{target, msg[:strings.IndexAny(msg+" ", " ")+8]}
			if count[k]++; count[k] == 1 {
				kinds = append(kinds, k)
				t.Errorf("step %d (+%s, head %d, unmined hash mined at %d): %s\n  %s\n  Cache-Status: %s, Age: %s, Cache-Control: %s",
					i, step, h.sim.Head(chain), minedAt, msg, target, r.header["Cache-Status"], r.header["Age"], r.header["Cache-Control"])
			}
		}
	}
	for _, k := range kinds {
		t.Logf("%d x %s...: %s", count[k], k.what, k.target)
	}
	if h.sim.Head(chain) < minedAt+3 {
		t.Fatalf("the test did not run long enough for the unmined hash to settle")
	}
}

// judge says what is wrong with the edge's answer got at now ("" if
// nothing); direct is what the upstream says now.
func judge(t testing.TB, o *oracle, target string, start, now time.Time, got, direct string, r resp, tip bool) string {
	if got == direct {
		return ""
	}
	maxAge, swr := cacheControl(r.header["Cache-Control"])
	if maxAge >= 3600 {
		return fmt.Sprintf("answer with a freshness lifetime of %ds (final) differs from the upstream's now", maxAge)
	}
	// Walk back to the last moment the upstream said these bytes: they
	// have been out of date since the moment after it.
	outdated := now
	for at := now.Add(-grain); ; at = at.Add(-grain) {
		if at.Before(start) {
			return "bytes the upstream never said"
		}
		if o.said(t, target, at) == got {
			break
		}
		outdated = at
	}
	late := now.Sub(outdated)
	age, _ := strconv.ParseInt(r.header["Age"], 10, 64)
	switch {
	case late > time.Duration(age+1)*time.Second:
		return fmt.Sprintf("out of date for %s but Age says %ds", late, age)
	case tip && late > 2*time.Second:
		return fmt.Sprintf("the newest page is %s (more than 2 blocks) behind the upstream", late)
	case maxAge <= 2 && late > 2*time.Second:
		return fmt.Sprintf("head answer %s (more than 2 blocks) behind the upstream", late)
	case swr >= 0 && late > time.Duration(maxAge+swr+1)*time.Second:
		return fmt.Sprintf("out of date for %s, beyond max-age %d + stale-while-revalidate %d", late, maxAge, swr)
	}
	return ""
}
