package proxy

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// vendorEnvelope is an upstream in front of explorer-sim that, while
// code is set, answers every API question with the vendor's envelope for
// it with status, as the vendor's table documents them (many with HTTP
// 200); with code empty the sim answers.
type vendorEnvelope struct {
	status atomic.Int64
	code   atomic.Pointer[string]
	calls  atomic.Int64 // envelopes answered
}

func (v *vendorEnvelope) set(status int, code string) {
	v.status.Store(int64(status))
	v.code.Store(&code)
}

func (v *vendorEnvelope) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := v.code.Load()
		if c == nil || *c == "" || !strings.HasPrefix(r.URL.Path, "/api/") {
			next.ServeHTTP(w, r)
			return
		}
		v.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(v.status.Load()))
		fmt.Fprintf(w, `{"code":%q,"msg":"vendor words for %s","data":[]}`, *c, *c)
	})
}

// TestVendorBusyIsAFailure: 50013 "system is busy, please try again later"
// comes with HTTP 200. It is met as the upstream failing, not passed to
// clients as an answer: another account is asked at once (no client sees
// it), a stale copy stands in for it, and alone without a copy it is
// retried within upstream.retries, then the client gets the edge's own
// 503 50001 naming 50013, never stored. Before the vendor's table it was passed through as an HTTP 200
// answer after one call, a stale copy at hand or not.
func TestVendorBusyIsAFailure(t *testing.T) {
	t.Run("another account", func(t *testing.T) {
		f := startFaultyAccount(t, 200, `{"code":"50013","msg":"System is busy, please try again later.","data":[]}`)
		h := newHarness(t, withFaultyAccount(f))
		if failed := coldMisses(t, h, 0, 30); failed > 0 {
			t.Errorf("%d of 30 misses failed with one account of two busy", failed)
		}
		if f.calls.Load() == 0 {
			t.Fatal("the busy account was never asked: the test proves nothing")
		}
		if v := gathered(t, h).value(t, "explorer_edge_upstream_account_error_ratio", "account", "faulty"); v == 0 {
			t.Errorf("busy account's error ratio 0 after %d busy answers", f.calls.Load())
		}
	})
	t.Run("stale copy and alone", func(t *testing.T) {
		v := &vendorEnvelope{}
		h := newHarnessWrapped(t, v.wrap, func(c *config.Config, _ *sim.Config) {
			c.Cache.StaleWhileRevalidate = config.SameForAll(time.Second)
			c.Cache.StaleIfError = time.Minute
			c.Upstream.BreakerFailures = 1 << 20
		})
		target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"
		good := h.get(target)
		if good.status != 200 || good.code() != "0" {
			t.Fatalf("first ask: %d %s", good.status, good.body)
		}
		v.set(200, "50013")
		h.clock.Advance(5 * time.Second) // expired, within stale_if_error
		r := h.get(target)
		if r.status != 200 || r.code() != "0" || string(r.body) != string(good.body) ||
			!strings.Contains(r.header["Cache-Status"], "detail=stale-if-error-upstream-envelope") {
			t.Errorf("busy with a stale copy: %d %q %.100s, want the stale copy", r.status, r.header["Cache-Status"], r.body)
		}
		// Alone and without a copy: retried, then a failure.
		other := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=9"
		for i := range 3 {
			before := v.calls.Load()
			r := h.get(other)
			n := v.calls.Load() - before
			if r.status != 503 || r.code() != "50001" || !strings.Contains(string(r.body), "50013") || r.header["Cache-Control"] != "no-store" {
				t.Errorf("ask %d alone without a copy: %d %s %q, want the edge's 503 50001 naming 50013, not stored", i+1, r.status, r.body, r.header["Cache-Control"])
			}
			if n != int64(1+h.cfg.Upstream.Retries) {
				t.Errorf("ask %d cost %d calls, want %d (retried within upstream.retries)", i+1, n, 1+h.cfg.Upstream.Retries)
			}
		}
	})
}

// TestVendorAccountFailures: codes that say the vendor holds the account
// back, whatever HTTP status carries them (50043 "frozen by risk control"
// with 200, 50100 "API frozen" with 400, 50030 "no permission" with 403,
// 50007 "account blocked" with 200), take the account out as a 401 does:
// with two accounts every question is answered by the other, the faulty
// account's error ratio rises and /readyz names it; alone, the client gets
// the edge's 502 50026 about its own credentials, never the vendor's
// envelope, counted as outcome="credentials" (the alert's). Before the
// vendor's table only HTTP 401 and 50102-50113 did: a frozen key was
// asked every question and its envelope passed to clients.
func TestVendorAccountFailures(t *testing.T) {
	for _, c := range []struct {
		code   string
		status int
	}{{"50043", 200}, {"50100", 400}, {"50030", 403}, {"50007", 200}} {
		t.Run(c.code, func(t *testing.T) {
			body := `{"code":"` + c.code + `","msg":"the vendor's words","data":[]}`
			f := startFaultyAccount(t, c.status, body)
			h := newHarness(t, withFaultyAccount(f))
			if failed := coldMisses(t, h, 0, 30); failed > 0 {
				t.Errorf("%d of 30 misses failed with one account of two refused", failed)
			}
			if f.calls.Load() == 0 {
				t.Fatal("the refused account was never asked: the test proves nothing")
			}
			if n := f.calls.Load(); n > 2 {
				t.Errorf("the refused account got %d calls: it is not taken out", n)
			}
			if ok, why := h.p.Ready(); !ok || !strings.Contains(why, "faulty") {
				t.Errorf("readyz %v %q: want ready, naming the refused account", ok, why)
			}

			alone := newHarnessWrapped(t, func(http.Handler) http.Handler { return f.handler })
			for i := range 3 {
				r := alone.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", i+2))
				if r.status != 502 || r.code() != "50026" || !strings.Contains(string(r.body), "credentials") ||
					strings.Contains(string(r.body), "vendor's words") {
					t.Errorf("alone, ask %d: %d %s, want the edge's 502 50026 about its credentials", i+1, r.status, r.body)
				}
			}
			if v := gathered(t, alone).value(t, "explorer_edge_upstream_account_requests_total", "account", "default", "outcome", "credentials"); v < 3 {
				t.Errorf("upstream_account_requests_total{outcome=credentials} = %v after 3 refused calls", v)
			}
		})
	}
}

// TestVendorNoDataIsCachedNegative: a "no data" answer (50040 "no data for
// this block height" with 200, 50044 "data does not exist" with 400) is
// deterministic: asked 100 times it costs one upstream call per negative
// lifetime, each ask getting the upstream's status and body. A code
// outside the vendor's table is passed through as it came and never
// cached: each ask is a call. Before the vendor's table every ask of a
// "no data" question was a call.
func TestVendorNoDataIsCachedNegative(t *testing.T) {
	for _, c := range []struct {
		code   string
		status int
		asks   int
		calls  int64 // per negative lifetime
	}{{"50040", 200, 100, 1}, {"50044", 400, 100, 1}, {"59999", 200, 5, 5}} {
		t.Run(c.code, func(t *testing.T) {
			v := &vendorEnvelope{}
			v.set(c.status, c.code)
			h := newHarnessWrapped(t, v.wrap)
			target := "/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=123"
			for range 2 { // two negative lifetimes
				before := v.calls.Load()
				for i := range c.asks {
					r := h.get(target)
					if r.status != c.status || r.code() != c.code {
						t.Fatalf("ask %d: %d %s, want the upstream's %d %s", i+1, r.status, r.body, c.status, c.code)
					}
				}
				if n := v.calls.Load() - before; n != c.calls {
					t.Errorf("%d asks of a %s answer cost %d upstream calls, want %d", c.asks, c.code, n, c.calls)
				}
				h.clock.Advance(route.TTLs(&route.Table[route.TransactionList], h.cfg.Cache.TTL).For(cache.Negative))
			}
		})
	}
}

// TestVendorCodesThroughTheSim: every code of explorer-sim's copy of the
// vendor's table comes, with the vendor's HTTP status, through the real
// edge as its class says: a failure is the edge's own 502/503/504, never
// the code; an account failure the edge's 502 50026 about its
// credentials; a refusal or "no data" the upstream's status and body,
// then a hit. The edge's table and the sim's agree on every code and
// status.
func TestVendorCodesThroughTheSim(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.BreakerFailures = 1 << 20 // every code in turn on one account
		c.Upstream.Retries = 0
	})
	codes := sim.VendorCodes()
	// 50011 comes with 429, whose Retry-After locks the account out: last.
	last := func(v sim.VendorCode) int {
		if v.Code == "50011" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(codes, func(a, b sim.VendorCode) int { return cmp.Compare(last(a), last(b)) })
	for i, v := range codes {
		e := envelope.Vendor(v.Code)
		if e == nil || e.Status != v.Status {
			t.Errorf("%s: the edge's table has %+v, the sim's status %d", v.Code, e, v.Status)
			continue
		}
		h.sim.SetFaults(sim.Faults{Envelope: 1, EnvelopeCode: v.Code, EnvelopeVendor: true})
		target := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", i+1)
		r := h.get(target)
		switch class := envelope.ClassOf(v.Status, v.Code); class {
		case envelope.ClassFailure:
			if r.status < 502 || r.status > 504 || !slices.Contains([]string{"50001", "50004", "50026"}, r.code()) {
				t.Errorf("%s (%d, %v): %d %s, want the edge's own failure", v.Code, v.Status, class, r.status, r.body)
			}
		case envelope.ClassAccount:
			if r.status != 502 || r.code() != "50026" || !strings.Contains(string(r.body), "credentials") {
				t.Errorf("%s (%d, %v): %d %s, want the edge's 502 50026 about its credentials", v.Code, v.Status, class, r.status, r.body)
			}
		case envelope.ClassRefusal, envelope.ClassNoData:
			if r.status != v.Status || r.code() != v.Code {
				t.Errorf("%s (%d, %v): %d %s, want the upstream's", v.Code, v.Status, class, r.status, r.body)
			}
			before := h.upstreamCalls()
			if again := h.get(target); again.status != v.Status || again.code() != v.Code || h.upstreamCalls() != before {
				t.Errorf("%s (%v) asked again: %d %s and %d calls, want a hit", v.Code, class, again.status, again.body, h.upstreamCalls()-before)
			}
		default:
			t.Errorf("%s: class %v", v.Code, class)
		}
	}
}

// TestVendorNoDataProfile: explorer-sim's nodata-code reading answers a
// height above the head with 50040 under HTTP 200, as the vendor does:
// asked 100 times, one upstream call per negative lifetime.
func TestVendorNoDataProfile(t *testing.T) {
	p, err := sim.ParseProfile("nodata-code")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(_ *config.Config, s *sim.Config) { s.Profile = &p })
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.sim.Head("CHAINX")+1000)
	for range 2 {
		before := h.upstreamCalls()
		for i := range 100 {
			if r := h.get(target); r.status != 200 || r.code() != "50040" {
				t.Fatalf("ask %d: %d %s, want the sim's 200 50040", i+1, r.status, r.body)
			}
		}
		if n := h.upstreamCalls() - before; n != 1 {
			t.Errorf("100 asks above the head cost %d upstream calls, want 1", n)
		}
		h.clock.Advance(route.TTLs(&route.Table[route.TransactionList], h.cfg.Cache.TTL).For(cache.Negative))
	}
}
