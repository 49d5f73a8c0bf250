package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// noKeepAlive asks on a new connection each time and closes it after the
// answer, as the kubelet's probes do.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// adminGet is GET path on a new connection to the admin port: status and
// body.
func adminGet(t *testing.T, e *edge, path string) (int, string) {
	t.Helper()
	res, err := noKeepAlive.Get("http://" + e.file.admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestHealthAtAdminConnectionCap: admin_max_conns connections held idle on
// the admin port (a scraper's pool, a leak, a flood) do not fail the
// probes: /healthz, /readyz and -healthcheck are answered on a few places
// kept beyond the cap, which serve nothing else. Before, they were refused
// 503 like any connection beyond the cap, and a liveness probe would have
// restarted a healthy edge.
func TestHealthAtAdminConnectionCap(t *testing.T) {
	const adminMaxConns = 64 // the default
	_, url, _ := startSim(t, sim.Faults{})
	e := startEdge(t, demoEdge(url))
	// Only the connections of this test on the admin port: the one that
	// asks for the count, at most.
	http.DefaultClient.CloseIdleConnections()
	testkit.WaitFor(t, "the admin port's connections closed", func() bool {
		_, body := adminGet(t, e, "/metrics")
		return strings.Contains(body, `explorer_edge_connections_open{listener="admin"} 1`+"\n")
	})

	var idle flood
	defer idle.close()
	if err := idle.open(e.file.admin, adminMaxConns); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := adminGet(t, e, path); status != 200 {
			t.Errorf("GET %s with %d idle connections open: %d %s", path, adminMaxConns, status, body)
		}
	}
	var out bytes.Buffer
	if rc := cli([]string{"-config", e.path, "-healthcheck"}, &out, &out); rc != 0 {
		t.Errorf("-healthcheck with %d idle connections open: exit %d\n%s", adminMaxConns, rc, out.String())
	}
	// The places beyond the cap serve the probes only.
	if status, body := adminGet(t, e, "/metrics"); status != 503 || !strings.Contains(body, `"code":"50001"`) {
		t.Errorf("GET /metrics beyond the cap: %d %s, want 503 50001", status, body)
	}
	if t.Failed() {
		t.Logf("log:\n%s", tail(e.logs.String(), 3000))
	}
}
