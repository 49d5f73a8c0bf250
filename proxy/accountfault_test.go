package proxy

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// faultyAccount is an upstream that answers every API question with one
// fixed status and envelope: an account whose upstream fails in a way
// that is not a broken connection.
type faultyAccount struct {
	url     string
	calls   atomic.Int64
	handler http.Handler
}

func startFaultyAccount(t *testing.T, status int, body string) *faultyAccount {
	t.Helper()
	f := &faultyAccount{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	})
	hs := &http.Server{Handler: f.handler}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	f.url = "http://" + ln.Addr().String()
	return f
}

func withFaultyAccount(f *faultyAccount) harnessOpt {
	return func(c *config.Config, _ *sim.Config) {
		c.Upstream.Accounts = []config.Account{{Name: "faulty", BaseURL: f.url, APIKey: mirrorCreds.APIKey,
			SecretKey: mirrorCreds.SecretKey, Passphrase: mirrorCreds.Passphrase, Rate: 10000, Burst: 10000}}
	}
}

// TestFailingAccountIsAvoided: with two accounts, one answering a failure
// envelope (HTTP 200 with 50026), a refusal of questions the other answers
// (50036), or a refusal of its credentials (HTTP 401 with 50113), no
// client sees the fault: each call it fails is asked at once of the other
// account, the faulty account's error ratio rises and its breaker opens,
// and /readyz names it. On 6858c2c half the misses failed, the error
// ratio stayed 0 and the breaker closed.
func TestFailingAccountIsAvoided(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"failure envelope 50026", `{"code":"50026","msg":"System error","data":[]}`, 200},
		{"refusal 50036 of a valid question", `{"code":"50036","msg":"Parameter height error","data":[]}`, 200},
		{"credentials refused 401 50113", `{"code":"50113","msg":"Invalid signature","data":[]}`, 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFaultyAccount(t, c.status, c.body)
			h := newHarness(t, withFaultyAccount(f))
			if failed := coldMisses(t, h, 0, 40); failed > 0 {
				t.Errorf("%d of 40 misses failed with one account of two faulty", failed)
			}
			if f.calls.Load() == 0 {
				t.Fatal("the faulty account was never asked: the test proves nothing")
			}
			mf := gathered(t, h)
			if v := mf.value(t, "explorer_edge_upstream_account_error_ratio", "account", "faulty"); v == 0 {
				t.Errorf("faulty account's error ratio 0 after %d faulty answers", f.calls.Load())
			}
			if n := f.calls.Load(); n > 2 {
				t.Errorf("the faulty account got %d calls: it is not avoided", n)
			}
			if ok, why := h.p.Ready(); !ok || !strings.Contains(why, "faulty") {
				t.Errorf("readyz %v %q: want ready, naming the failing account", ok, why)
			}
			if strings.Contains(c.body, "50036") {
				return // alone, an account's refusal cannot be told from the question's
			}
			// Alone, the account's failures open its breaker.
			alone := newHarnessWrapped(t, func(http.Handler) http.Handler { return f.handler })
			for i := range alone.cfg.Upstream.BreakerFailures {
				alone.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", i+2))
			}
			if v := gathered(t, alone).value(t, "explorer_edge_upstream_account_breaker_state", "account", "default"); v != 2 {
				t.Errorf("alone, the account's breaker is %v after %d faulty answers, want 2 (open)", v, alone.cfg.Upstream.BreakerFailures)
			}
			if ok, why := alone.p.Ready(); ok {
				t.Errorf("readyz ok (%q) with the only account failing and nothing cached", why)
			}
		})
	}
}

// TestRefusalBothAccountsGiveIsCached: a refusal both accounts give is the
// question's: cached for the negative time like a refusal of one account,
// after one confirming call, and the accounts stay healthy.
func TestRefusalBothAccountsGiveIsCached(t *testing.T) {
	const refusal = `{"code":"50036","msg":"Parameter height error","data":[]}`
	f := startFaultyAccount(t, 200, refusal)
	var refused atomic.Int64
	h := newHarnessWrapped(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			refused.Add(1)
			w.Write([]byte(refusal))
		})
	}, withFaultyAccount(f))
	target := "/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=1"
	for i := range 3 {
		if r := h.get(target); r.status != 200 || r.code() != "50036" {
			t.Fatalf("ask %d: %d %s, want the refusal as the upstream gave it", i, r.status, r.body)
		}
	}
	if n := refused.Load() + f.calls.Load(); n != 2 {
		t.Errorf("%d upstream calls for a refusal asked 3 times with two accounts, want 2 (asked, confirmed, then cached)", n)
	}
	mf := gathered(t, h)
	for _, a := range []string{"default", "faulty"} {
		if v := mf.value(t, "explorer_edge_upstream_account_error_ratio", "account", a); v != 0 {
			t.Errorf("account %s error ratio %v after a refusal both gave", a, v)
		}
	}
}

// TestCredentialsRefusalNeverReachesClients: an upstream that refuses the
// edge's own credentials (HTTP 401, 50113) is a 502 envelope saying so,
// never the upstream's 401 "Invalid signature" (the client's credentials
// are not in question); counted as outcome="credentials", logged at error
// once per account and interval.
func TestCredentialsRefusalNeverReachesClients(t *testing.T) {
	h := newHarnessWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(401)
			w.Write([]byte(`{"code":"50113","msg":"Invalid signature","data":[]}`))
		})
	})
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	h.start()
	for i := range 3 {
		r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=" + string(rune('3'+i)))
		if r.status != 502 || r.code() != "50026" || !strings.Contains(string(r.body), "credentials") {
			t.Errorf("%d %s, want 502 50026 naming the edge's credentials", r.status, r.body)
		}
		if strings.Contains(string(r.body), "Invalid signature") {
			t.Errorf("the upstream's credential refusal reached the client: %s", r.body)
		}
	}
	if v := gathered(t, h).value(t, "explorer_edge_upstream_account_requests_total", "account", "default", "outcome", "credentials"); v < 3 {
		t.Errorf("upstream_account_requests_total{outcome=credentials} = %v after 3 refused calls", v)
	}
	lines := logs.Lines(t, "upstream credentials refused")
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["account"] != "default" {
		t.Errorf("credential refusal lines %v, want one at ERROR naming the account", lines)
	}
}
