package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/server"
	"explorer-edge/sim"
)

// serveAdmin serves h's admin server (NewAdminServer) on a new listener
// guarded by AdminListener, a connection of its health reserve living
// hold; it returns the address.
func serveAdmin(t *testing.T, h *harness, hold time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lc := server.AdminListener(h.cfg)
	lc.HealthHold = hold
	l := h.p.Listener(ln, lc)
	srv := h.p.NewAdminServer(h.cfg)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// TestAdminServerLogsAsThePublicOne: a request the admin server cannot
// read, carrying the purge token, is answered with an envelope, and
// fasthttp's line about it goes to the edge's logger (JSON, at debug
// level) with the token withheld; fasthttp's own logger printed the
// request, token included, in plain text on stderr.
func TestAdminServerLogsAsThePublicOne(t *testing.T) {
	const token = "admin-server-purge-token-012345"
	h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Admin.PurgeToken = token })
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.start()
	addr := serveAdmin(t, h, server.HealthHold)
	for _, req := range []string{
		"POST /purge HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + token + "\x01\r\n\r\n",
		"POST /purge HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + token + "\r\nno colon here\r\n\r\n",
	} {
		res := rawExchange(t, addr, req, 1)[0]
		testkit.CheckEnvelope(t, "a malformed request", res.StatusCode, readAll(res), 400, "50036", "Malformed request")
	}
	testkit.WaitFor(t, "fasthttp's 2 lines", func() bool { return logs.Count(t, "fasthttp") == 2 })
	if strings.Contains(logs.String(), token) {
		t.Fatalf("the log holds the purge token:\n%s", logs.String())
	}
}

// TestAdminHealthReserve: beyond admin_max_conns the admin listener takes
// server.HealthReserve more connections, each for one /healthz or /readyz; any
// other request on one is refused, a connection beyond the reserve too,
// and one that asks nothing is closed after its hold, its place given
// back.
func TestAdminHealthReserve(t *testing.T) {
	const maxConns = 2
	h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.AdminMaxConns = maxConns })
	open := h.m.ConnsOpen.WithLabelValues("admin")
	refused := h.m.ConnsRefused.WithLabelValues("admin", "max_conns")

	t.Run("probes only", func(t *testing.T) {
		addr := serveAdmin(t, h, time.Minute)
		holdIdle(t, addr, nil, maxConns)
		testkit.WaitFor(t, "the cap reached", func() bool { return testutil.ToFloat64(open) == maxConns })
		for _, path := range []string{"/healthz", "/readyz"} {
			res := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", 1)[0]
			if res.StatusCode != 200 || !res.Close {
				t.Errorf("GET %s at the cap: %d, close %v; want 200 and the connection closed", path, res.StatusCode, res.Close)
			}
		}
		for _, req := range []string{"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "POST /purge HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"} {
			res := rawExchange(t, addr, req, 1)[0]
			what := req[:strings.Index(req, " HTTP")] + " at the cap"
			testkit.CheckEnvelope(t, what, res.StatusCode, readAll(res), 503, "50001", "/healthz and /readyz only")
			if !res.Close {
				t.Errorf("%s: the connection is kept", what)
			}
		}
		testkit.WaitFor(t, "the reserve's places given back", func() bool { return testutil.ToFloat64(open) == maxConns })
		// The reserve full, a connection is refused as at any cap.
		holdIdle(t, addr, nil, server.HealthReserve)
		testkit.WaitFor(t, "the reserve full", func() bool { return testutil.ToFloat64(open) == maxConns+server.HealthReserve })
		res, body := told(t, addr, nil)
		testkit.CheckEnvelope(t, "beyond the reserve", res.StatusCode, body, 503, "50001", "connections open")
		if n := testutil.ToFloat64(refused); n != 1 {
			t.Errorf("connections_refused_total{admin,max_conns} = %v, want 1", n)
		}
	})
	testkit.WaitFor(t, "every place given back", func() bool { return testutil.ToFloat64(open) == 0 })

	t.Run("idle in the reserve", func(t *testing.T) {
		addr := serveAdmin(t, h, 50*time.Millisecond)
		holdIdle(t, addr, nil, maxConns)
		// Every place of the cap taken before the next connection comes:
		// else it may take a place of the cap, not of the reserve.
		testkit.WaitFor(t, "the cap full", func() bool { return testutil.ToFloat64(open) == maxConns })
		c := holdIdle(t, addr, nil, 1)[0]
		// Closed by the edge at the end of its hold, not by the deadline
		// here. Most runs read nothing before EOF; on a loaded machine
		// the server may answer the read that timed out before it
		// closes (seen once in a clean-clone CI run), which is still
		// the edge closing it: what counts is EOF, then the place back.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := io.ReadAll(bufio.NewReader(c)); err != nil {
			t.Fatalf("an idle connection of the reserve: read %q, %v; want EOF, closed by the edge", got, err)
		}
		testkit.WaitFor(t, "its place given back", func() bool { return testutil.ToFloat64(open) == maxConns })
		if status := getOnNewConn(t, addr, "/healthz"); status != 200 {
			t.Errorf("GET /healthz in the place given back: %d", status)
		}
	})
}
