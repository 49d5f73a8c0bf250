package proxy

import (
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// TestClientTraceStateNotForwarded: a client's tracestate (32 members,
// 6.5 KB) is not sent upstream: the upstream gets the edge's own trace
// context, the traceparent of the attempt's span, and nothing else. On
// 6858c2c it went verbatim on every call.
func TestClientTraceStateNotForwarded(t *testing.T) {
	h := newHarness(t)
	e, _ := tracedEdge(t, h)
	var members []string
	for i := range 32 {
		members = append(members, "v"+string(rune('a'+i%26))+string(rune('a'+i/26))+"="+strings.Repeat("x", 200))
	}
	state := strings.Join(members, ",")
	if len(state) < 6000 {
		t.Fatalf("tracestate of %d bytes", len(state))
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i, ts := range []string{state, "vendor=short"} {
		target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=" + string(rune('2'+i))
		if r := e.get(target, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01", "tracestate", ts); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		h.rec.mu.Lock()
		got := h.rec.headers[len(h.rec.headers)-1]
		h.rec.mu.Unlock()
		if v := got.Get("Tracestate"); v != "" {
			t.Errorf("the upstream got a tracestate of %d bytes (client's was %d)", len(v), len(ts))
		}
		if tp := got.Get("Traceparent"); !strings.HasPrefix(tp, "00-"+traceID+"-") || strings.Contains(tp, "00f067aa0ba902b7") {
			t.Errorf("the upstream got traceparent %q, want the edge's span in the client's trace", tp)
		}
	}
}

// TestUnverifiedKeyIsNoClients: requests that carry a configured client's
// api key (public: anyone may send it) but no valid signature are not that
// client's, in its metrics or in the access log, also when they are
// refused before admission (an unknown path). On 6858c2c 50 such requests
// to an unknown path were counted and logged as the client's. A signed
// request to an unknown path is still its client's.
func TestUnverifiedKeyIsNoClients(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Log.AccessSample = 1
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: accessKey, SecretKey: accessSecret, Passphrase: accessPass}}
	})
	logs := withLog(h)
	nowhere := "/api/v5/chainx/nowhere"
	webRequests := func() float64 {
		return gathered(t, h).value(t, "explorer_edge_client_requests_total", "client", "web")
	}
	for range 50 {
		if r := h.get(nowhere, signer.HeaderKey, accessKey, signer.HeaderPassphrase, accessPass); r.status != 404 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	if n := webRequests(); n != 0 {
		t.Errorf("50 unsigned requests carrying web's key counted as %v of web's", n)
	}
	for _, l := range logs.Lines(t, "access") {
		if l["client"] != nil {
			t.Fatalf("an unsigned request logged as client %v", l["client"])
		}
	}
	ts := signer.Timestamp(time.Now())
	h.get(nowhere, signer.HeaderKey, accessKey, signer.HeaderPassphrase, accessPass,
		signer.HeaderTimestamp, ts, signer.HeaderSign, signer.Sign(accessSecret, ts, "GET", nowhere))
	if n := webRequests(); n != 1 {
		t.Errorf("a signed request to an unknown path counted %v times as web's, want 1", n)
	}
	lines := logs.Lines(t, "access")
	if last := lines[len(lines)-1]; last["client"] != "web" {
		t.Errorf("a signed request's access line names client %v", last["client"])
	}
}
