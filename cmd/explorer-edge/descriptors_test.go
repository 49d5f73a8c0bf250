package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// buildEdge compiles this command into a temporary directory, for tests
// that must run it as its own process.
func buildEdge(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "explorer-edge")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is explorer-edge running as a child under a lowered descriptor
// limit.
type process struct {
	cmd    *exec.Cmd
	logs   *testkit.LogBuffer
	exited chan struct{} // closed when the process has ended
	err    error         // its exit status, once exited is closed
}

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startLimited runs bin on the config at path with RLIMIT_NOFILE lowered
// to nofile (soft and hard, as `ulimit -n` sets them) and waits for
// /healthz.
func startLimited(t *testing.T, bin, path, admin string, nofile int) *process {
	t.Helper()
	p := &process{logs: &testkit.LogBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" -config "$1"`, nofile), bin, path)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.alive() {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
			t.Error("explorer-edge did not stop on SIGTERM")
		}
	})
	testkit.WaitFor(t, "/healthz of the limited edge", func() bool {
		if !p.alive() {
			t.Fatalf("explorer-edge exited at start: %v\n%s", p.err, p.logs)
		}
		res, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	return p
}

// flood holds idle connections to one port and notes each one the server
// ends (refuses or closes) while the test still holds it.
type flood struct {
	mu    sync.Mutex
	conns []net.Conn
	ended atomic.Int64
	done  atomic.Bool // the test is closing them: reads that end now are ours
	wg    sync.WaitGroup
}

// open dials n connections to addr, sending nothing. It stops at the first
// dial error (the listener gone) and returns it.
func (f *flood) open(addr string, n int) error {
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			c.SetReadDeadline(time.Now().Add(time.Minute))
			var b [512]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					if !f.done.Load() {
						f.ended.Add(1)
					}
					return
				}
			}
		}()
	}
	return nil
}

func (f *flood) close() {
	f.done.Store(true)
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// refusal reads what a new connection to addr is told at once, without
// sending a request: the answer of a listener at its connection cap.
func refusal(t *testing.T, addr string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s during the flood: %v", addr, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a new connection to %s at the cap: %v", addr, err)
	}
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// Descriptor exhaustion does not kill the edge. Under `ulimit -n 256`,
// idle connections beyond the limit on the public and on the admin port
// used to make accept fail with EMFILE, fasthttp's Serve return and the
// process exit. Now server.max_conns is lowered to what the limit can
// hold, the admin port has its own cap, a connection beyond a cap gets a
// JSON refusal, and once the flood is gone both ports answer again.
func TestDescriptorExhaustionKeepsServing(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the descriptor limit with")
	}
	const nofile, perPort = 256, 300 // each port alone floods past the limit
	bin := buildEdge(t)
	_, upstream, _ := startSim(t, sim.Faults{})
	f := demoEdge(upstream)
	f.listen, f.admin = freeAddr(t), freeAddr(t)
	f.rest = "server: {read_timeout: 60s, idle_timeout: 60s}\nlog: {format: json}\n"
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(f.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startLimited(t, bin, path, f.admin, nofile)
	e := &edge{t: t, file: f} // its get and metric helpers
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("before the flood: %d %s", status, code)
	}

	var public, admin flood
	defer public.close()
	defer admin.close()
	errPublic := public.open(f.listen, perPort)
	errAdmin := admin.open(f.admin, perPort)
	// At most nofile descriptors can be open in the edge: of each port's
	// flood, at least perPort-nofile connections must be ended by it
	// (refused at a cap, or closed because the process is gone).
	testkit.WaitFor(t, "the edge to deal with the flood", func() bool {
		return !p.alive() || (public.ended.Load() >= perPort-nofile && admin.ended.Load() >= perPort-nofile)
	})
	if errPublic != nil || errAdmin != nil || !p.alive() {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("the edge died under %d idle connections per port with ulimit -n %d (dial public: %v, admin: %v; "+
			"ended by the edge: %d public, %d admin); exit: %v\n%s",
			perPort, nofile, errPublic, errAdmin, public.ended.Load(), admin.ended.Load(), p.err, tail(p.logs.String(), 2000))
	}
	t.Logf("flood of %d idle connections per port: %d public and %d admin ended by the edge", perPort, public.ended.Load(), admin.ended.Load())

	// During the flood, a connection beyond a cap is told so in the
	// error table's envelope.
	for _, port := range []struct{ name, addr string }{{"public", f.listen}, {"admin", f.admin}} {
		res, body := refusal(t, port.addr)
		if res.StatusCode != 503 || res.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"code":"50001"`) {
			t.Errorf("%s port at its cap: %d %q %s, want 503 application/json 50001", port.name, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}

	public.close()
	admin.close()
	testkit.WaitFor(t, "both ports to answer after the flood", func() bool {
		res, err := http.Get("http://" + f.admin + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return false
		}
		res, err = http.Get("http://" + f.listen + blocks)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	if !p.alive() {
		t.Fatalf("the edge exited: %v", p.err)
	}
	if n := e.metric("explorer_edge_connections_refused_total", "listener", "public", "reason", "max_conns"); n < perPort-nofile {
		t.Errorf("connections_refused_total{listener=public,reason=max_conns} = %v, want >= %d", n, perPort-nofile)
	}
	if n := e.metric("explorer_edge_connections_refused_total", "listener", "admin", "reason", "max_conns"); n < perPort-nofile {
		t.Errorf("connections_refused_total{listener=admin,reason=max_conns} = %v, want >= %d", n, perPort-nofile)
	}
	if got := p.logs.Count(t, "server.max_conns lowered to fit the descriptor limit"); got != 1 {
		t.Errorf("%d warnings that max_conns was lowered, want 1\n%s", got, p.logs)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		var ee *exec.ExitError
		if p.err != nil && !errors.As(p.err, &ee) {
			t.Errorf("after SIGTERM: %v", p.err)
		} else if p.err != nil {
			t.Errorf("after SIGTERM: exit %v\n%s", p.err, tail(p.logs.String(), 2000))
		}
	case <-time.After(20 * time.Second):
		t.Error("no exit within 20 s of SIGTERM")
	}
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
