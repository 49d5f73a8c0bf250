package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"explorer-edge/sim"
)

// malformed sends n requests fasthttp cannot parse to addr, each on its
// own connection, carrying token as a bearer token: one with a control
// character in the Authorization value, one with a header line without a
// colon after it, one with a broken request line.
func malformed(t *testing.T, addr, token string, n int) {
	t.Helper()
	reqs := []string{
		"POST /purge HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + token + "\x01\r\n\r\n",
		"POST /purge HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + token + "\r\nno colon here\r\nContent-Length: 0\r\n\r\n",
		"POST /purge HTTP/1.1 extra\r\nHost: edge\r\nAuthorization: Bearer " + token + "\r\nContent-Length: x\r\n\r\n",
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, reqs[i%len(reqs)])
				io.Copy(io.Discard, c) // the answer, up to the server's close
				c.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("sending malformed requests: %v", err)
	}
}

// TestAdminPortLogHoldsNoToken: requests to the admin port that fasthttp
// cannot parse, carrying the purge token, are logged as the public port's
// are: JSON lines of the edge's logger, the token withheld, and at the
// default level not at all (a client causes them at will). Before, the
// admin server had fasthttp's own logger: 2,000 such requests gave 2,000
// plain-text lines on stderr quoting the token. The edge runs as its own
// process, so every line it writes anywhere is seen.
func TestAdminPortLogHoldsNoToken(t *testing.T) {
	const token = "admin-log-purge-token-0123456789"
	bin := buildEdge(t)
	_, upstream, _ := startSim(t, sim.Faults{})
	for _, c := range []struct {
		level string
		n     int
		most  int // lines about the requests that may go out
	}{
		{level: "info", n: 2000, most: 5},
		// Debug lines, asked for while diagnosing, all go out.
		{level: "debug", n: 200, most: 200},
	} {
		t.Run(c.level, func(t *testing.T) {
			f := demoEdge(upstream)
			f.listen, f.admin = freeAddr(t), freeAddr(t)
			f.rest = fmt.Sprintf("admin: {purge_token: %s}\nlog: {format: json, level: %s}\n", token, c.level)
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(f.yaml()), 0o600); err != nil {
				t.Fatal(err)
			}
			p := startLimited(t, bin, path, f.admin, 4096)
			malformed(t, f.admin, token, c.n)
			// Every line is read once the process has ended (SIGTERM: it
			// drains and exits 0).
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				t.Fatal("no exit within 20 s of SIGTERM")
			}
			logs := p.logs.String()
			if strings.Contains(logs, token) {
				t.Errorf("the log holds the purge token:\n%s", tail(logs, 3000))
			}
			lines := p.logs.Lines(t, "") // fails on a line that is not JSON
			// Lines of the edge's own: starting, listening, draining.
			started := 0
			for _, l := range lines {
				if l["msg"] != "fasthttp" {
					started++
				}
			}
			if got := len(lines) - started; got > c.most {
				t.Errorf("%d lines for %d malformed requests at level %s, want at most %d:\n%s", got, c.n, c.level, c.most, tail(logs, 3000))
			}
			if c.level == "debug" && p.logs.Count(t, "fasthttp") == 0 {
				t.Errorf("no fasthttp line at level debug:\n%s", tail(logs, 3000))
			}
		})
	}
}
