package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// The fault matrix: for every fault explorer-sim can inject, every route is
// asked for a key in each state (fresh, stale within stale_while_revalidate,
// expired within stale_if_error, cold). A client gets either the right data
// (equal to what an unfaulted sim answers for that query at that time) or
// the documented envelope; nothing of a failure is cached.

// keyState is where a key stands in the cache when the fault begins.
type keyState int

const (
	stateFresh   keyState = iota
	stateStale            // past its TTL, within stale_while_revalidate
	stateExpired          // past stale_while_revalidate, within stale_if_error
	stateCold             // never asked
	numStates
)

var stateNames = [numStates]string{"fresh", "stale", "expired", "cold"}

// matrixFault is one row of the matrix and what it must give.
type matrixFault struct {
	name   string
	faults sim.Faults
	// ok: the upstream still answers correctly (only slower).
	ok bool
	// Otherwise a cold key gets status and code, and an expired key its
	// stale copy with Cache-Status detail stale-if-error-<reason>.
	status int
	code   string
	reason string
	// answered: the envelope is the upstream's answer to the question (a
	// code of the client's side), so an expired key gets it too, not its
	// stale copy, and it is cached for the negative time (matrixNegative)
	// on the routes cached per request; per-hash routes never cache it.
	answered bool
}

var matrixFaults = []matrixFault{
	{name: "slow", faults: sim.Faults{Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond}, ok: true},
	{name: "latency-spike", faults: sim.Faults{Latency: 2 * time.Second}, status: 504, code: "50004", reason: "timeout"},
	{name: "http500", faults: sim.Faults{HTTP500: 1}, status: 502, code: "50026", reason: "upstream-error"},
	{name: "http429", faults: sim.Faults{HTTP429: 1, RetryAfter: 1}, status: 503, code: "50001", reason: "quota"},
	{name: "envelope", faults: sim.Faults{Envelope: 1}, status: 502, code: "50026", reason: "upstream-envelope"}, // the edge's own failure, not the envelope with 200
	{name: "envelope-client-code", faults: sim.Faults{Envelope: 1, EnvelopeCode: "50036"}, status: 200, code: "50036", answered: true},
	{name: "hang", faults: sim.Faults{Hang: 1}, status: 504, code: "50004", reason: "timeout"},
	{name: "drop", faults: sim.Faults{Drop: 1}, status: 502, code: "50026", reason: "upstream-error"},
	{name: "malformed", faults: sim.Faults{Malformed: 1}, status: 502, code: "50026", reason: "malformed"},
	{name: "truncated", faults: sim.Faults{Truncated: 1}, status: 502, code: "50026", reason: "malformed"},
	{name: "oversized", faults: sim.Faults{Oversized: 1, OversizedBytes: 2 << 20}, status: 502, code: "50026", reason: "too-large"},
}

// matrixTTL is every class's fresh time in the matrix; stale_while_revalidate
// is as long again, stale_if_error an hour.
const matrixTTL = 10 * time.Second

// matrixNegative is the negative time: how long a refusal is cached.
const matrixNegative = time.Second

func matrixConfig(c *config.Config, _ *sim.Config) {
	for _, name := range route.Names() {
		c.Cache.TTL[name] = config.PerClass{Head: matrixTTL, Final: matrixTTL, Volatile: matrixTTL, Negative: matrixNegative}
	}
	c.Cache.StaleWhileRevalidate = config.SameForAll(matrixTTL)
	c.Cache.StaleIfError = time.Hour
	c.Upstream.Timeout = 400 * time.Millisecond
	c.Upstream.Retries = 1
	c.Upstream.BreakerFailures = 1 << 20 // the breaker has its own test
	c.Upstream.MaxResponseBytes = 1 << 20
}

// matrixTargets gives each route one distinct key per state: per-hash
// routes share cache items, so no two keys name the same hash.
func matrixTargets(s *sim.Server) map[string][numStates]string {
	tok := s.TokenContracts("CHAINX")[1]
	cross := s.CrossHashes("TRADE_ZONE", 12)
	internal := s.InternalTxHashes("CHAINX", 4)
	height := s.FinalizedHeight("CHAINX") - 3
	out := map[string][numStates]string{}
	for st := range numStates {
		i := int(st)
		set := out
		add := func(route, target string) {
			v := set[route]
			v[st] = target
			set[route] = v
		}
		add("position-list", fmt.Sprintf("/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=%s&limit=%d", tok, i+1))
		add("block-list", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=%d", i+1))
		add("transaction-list", fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&limit=%d", height, i+1))
		add("transaction-multi", "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId="+cross[2*i]+","+cross[2*i+1])
		add("transaction-fills", "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+cross[8+i])
		add("internal-transaction-multi", "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId="+internal[i])
	}
	return out
}

// reference answers as explorer-sim without faults, at the harness's time.
func (h *harness) reference() func(target string) []byte {
	ref := sim.New(sim.Config{Now: h.clock.Now})
	h.t.Cleanup(func() { ref.Close() })
	return func(target string) []byte {
		w := httptest.NewRecorder()
		ref.Handler().ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		if w.Code != 200 {
			h.t.Fatalf("reference %s: %d %s", target, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
}

// perHashRoute reports whether the route of that name is cached per hash.
func perHashRoute(name string) bool {
	for _, r := range route.Table {
		if r.Name == name {
			return r.PerHash
		}
	}
	panic("no route " + name)
}

// sameJSON compares two JSON documents by value (the per-hash routes
// reassemble their answers, so bytes may be spelled differently).
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestFaultMatrix(t *testing.T) {
	for _, f := range matrixFaults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // the faults are mostly waiting
			// Each route's own question meets the fault: block-list's
			// newest-first keys asked as they are (cache.block_pages off),
			// not assembled from a page of 100 another key fetched.
			h := newHarness(t, matrixConfig, withBlockPagesOff)
			want := h.reference()
			targets := matrixTargets(h.sim)
			routes := route.Names()

			// Fill expired keys first, stale ones after 2.5 TTLs, fresh ones
			// after 4: then expired are 4 TTLs old, stale 1.5, fresh 0.
			good := map[string][]byte{}
			fill := func(st keyState) {
				for _, name := range routes {
					target := targets[name][st]
					r := h.get(target)
					if r.status != 200 || !sameJSON(r.body, want(target)) {
						t.Fatalf("fill %s: %d %.200s", target, r.status, r.body)
					}
					good[target] = r.body
				}
			}
			fill(stateExpired)
			h.clock.Advance(matrixTTL * 5 / 2)
			fill(stateStale)
			h.clock.Advance(matrixTTL * 3 / 2)
			fill(stateFresh)

			h.sim.SetFaults(f.faults)
			// Fresh keys first, every route: no background refresh (a stale
			// key starts one) is under way while their calls are counted.
			for st := range numStates {
				for _, name := range routes {
					target := targets[name][st]
					before := h.upstreamCalls()
					r := h.get(target)
					cs := r.header["Cache-Status"]
					where := fmt.Sprintf("%s %s key (%s): %d %q %.200s", name, stateNames[st], target, r.status, cs, r.body)
					switch {
					case st == stateFresh:
						if r.status != 200 || !bytes.Equal(r.body, good[target]) || !strings.HasPrefix(cs, "explorer-edge; hit; ttl=") || strings.Contains(cs, "detail") {
							t.Errorf("%s: want the fresh hit", where)
						}
						if n := h.upstreamCalls() - before; n != 0 {
							t.Errorf("%s: a fresh hit cost %d upstream calls", where, n)
						}
					case st == stateStale:
						if r.status != 200 || !bytes.Equal(r.body, good[target]) || !strings.Contains(cs, "detail=stale-while-revalidate") {
							t.Errorf("%s: want the stale copy while it revalidates", where)
						}
					case f.ok:
						if r.status != 200 || !sameJSON(r.body, want(target)) || !strings.Contains(cs, "fwd=") {
							t.Errorf("%s: want the upstream's answer, fetched", where)
						}
					case st == stateExpired && !f.answered:
						if r.status != 200 || !bytes.Equal(r.body, good[target]) || !strings.Contains(cs, "detail=stale-if-error-"+f.reason) {
							t.Errorf("%s: want the stale copy with detail stale-if-error-%s", where, f.reason)
						}
					default: // cold, or expired when the upstream answered
						if r.status != f.status || r.code() != f.code {
							t.Errorf("%s: want %d with code %s", where, f.status, f.code)
						}
						if cc := r.header["Cache-Control"]; f.answered && !perHashRoute(name) {
							if cc != fmt.Sprintf("public, max-age=%d", matrixNegative/time.Second) || !strings.Contains(cs, "stored") {
								t.Errorf("%s: a refusal not stored for the negative time", where)
							}
						} else if cc != "no-store" {
							t.Errorf("%s: stored", where)
						}
						if f.status == 503 && r.header["Retry-After"] == "" {
							t.Errorf("%s: 503 without Retry-After", where)
						}
						var env struct {
							Msg  *string          `json:"msg"`
							Data *json.RawMessage `json:"data"`
						}
						if json.Unmarshal(r.body, &env) != nil || env.Msg == nil || env.Data == nil || string(*env.Data) != "[]" {
							t.Errorf("%s: not a well-formed envelope", where)
						}
					}
				}
			}

			// The upstream is well again: every key now gives the right
			// data, and a key that failed is fetched, not a cached failure.
			h.sim.ClearFaults()
			if f.answered {
				h.clock.Advance(matrixNegative) // the cached refusals expire
			}
			testkit.WaitFor(t, "the upstream to be callable again", func() bool {
				return h.get(targets["block-list"][stateCold]).status == 200
			})
			for _, name := range routes {
				for st := range numStates {
					target := targets[name][st]
					r := h.get(target)
					cs := r.header["Cache-Status"]
					where := fmt.Sprintf("after the fault, %s %s key: %d %q %.200s", name, stateNames[st], r.status, cs, r.body)
					if r.status != 200 {
						t.Errorf("%s: not data", where)
						continue
					}
					switch {
					case st == stateFresh:
						if !bytes.Equal(r.body, good[target]) {
							t.Errorf("%s: the fresh copy changed", where)
						}
					case st == stateStale:
						// the stale copy, or the refresh's answer if it ran since
						if !bytes.Equal(r.body, good[target]) && !sameJSON(r.body, want(target)) {
							t.Errorf("%s: neither the stale copy nor the upstream's answer", where)
						}
					default:
						if !sameJSON(r.body, want(target)) {
							t.Errorf("%s: not the upstream's answer", where)
						}
						if name != "block-list" || st != stateCold { // that one was asked by the wait
							if !f.ok && !strings.Contains(cs, "fwd=") {
								t.Errorf("%s: a key that failed was not fetched again", where)
							}
						}
					}
				}
			}
		})
	}
}
