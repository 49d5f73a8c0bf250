package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"explorer-edge/sim"
)

// child is a process the soak started, in a process group of its own, with
// its output in a file.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when it has exited and been waited for
	waitErr error
}

func startChild(name, bin string, args []string, logPath string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		f.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop ends the child's process group: SIGTERM, then SIGKILL if it is not
// gone within 5 s. It returns once the child has been waited for.
func (c *child) stop() {
	if c == nil || !c.alive() {
		return
	}
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.exited
	}
}

// kill ends the child's process group at once.
func (c *child) kill() {
	if c == nil || !c.alive() {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.exited
}

// startOnFreePorts starts a child on n loopback addresses free a moment
// before and waits until it answers on the URL start returns. A port can be
// taken in between by another process (go test runs packages side by
// side); a child that exits before it is ready is started again on new
// ports, three times at most.
func startOnFreePorts(ctx context.Context, n int, start func(addrs []string) (*child, string, error)) (*child, error) {
	var err error
	for range 3 {
		addrs := make([]string, n)
		for i := range addrs {
			if addrs[i], err = freeAddr(); err != nil {
				return nil, err
			}
		}
		var c *child
		var ready string
		if c, ready, err = start(addrs); err != nil {
			return nil, err
		}
		if err = waitReady(ctx, c, ready); err == nil {
			return c, nil
		}
		exited := !c.alive()
		c.kill()
		if !exited {
			return nil, err // alive but not answering: no port clash
		}
	}
	return nil, err
}

// freeAddr is a loopback address nothing listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200, the child exits, or 15 s pass.
func waitReady(ctx context.Context, c *child, url string) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := hc.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after 15 s: %v (output in %s)", c.name, url, err, c.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
			return fmt.Errorf("%s exited at start: %v (output in %s)", c.name, c.waitErr, c.logPath)
		case <-tick.C:
		}
	}
}

// The edge's TTLs in the soak: every class of every route between 1 and 4
// seconds, so that keys go fresh, stale and expired many times a minute.
var soakTTLs = []struct {
	route                           string
	head, final, volatile, negative string
}{
	{routePosition, "1s", "2s", "2s", "1s"},
	{routeBlocks, "1s", "4s", "1s", "1s"},
	{routeTxList, "1s", "3s", "2s", "1s"},
	{routeMulti, "1s", "3s", "2s", "1s"},
	{routeFills, "2s", "3s", "2s", "2s"},
	{routeInternal, "1s", "4s", "2s", "2s"},
}

// maxResponseBytes is the edge's upstream.max_response_bytes in the soak;
// the largest real answer here is about 100 KB (see oversizedBytes).
const maxResponseBytes = 1 << 20

// edgeParams are what differ between the soak's edges and runs.
type edgeParams struct {
	listen, admin, upstream string
	maxBytes                int64   // cache.max_bytes
	rate                    float64 // upstream.rate, the fleet's
	burst                   int
	redis                   string          // shared.redis_addr; "" single node
	nodes                   int             // nodes sharing it
	otlp                    string          // tracing.otlp_endpoint; "" tracing off
	traceRatio              float64         // tracing.sample_ratio
	omit                    map[string]bool // keys left out, for an edge older than them
}

// edgeConfig is the edge's configuration file for the soak. The per-client
// settings (auth, server.max_conns_per_ip) are those the hostile clients
// test; 127.0.0.1 is the trusted proxy the load comes through.
func edgeConfig(p edgeParams) string {
	var b strings.Builder
	opt := func(key, format string, args ...any) {
		if !p.omit[key] {
			fmt.Fprintf(&b, format, args...)
		}
	}
	fmt.Fprintf(&b, `# explorer-edge configuration written by bench/soak
listen: %q
admin_listen: %q
upstream:
  base_url: %q
  api_key: %q
  secret_key: %q
  passphrase: %q
  timeout: 500ms
  rate: %g              # the fleet's; the soak asks for more (checked against rate x time + burst)
  burst: %d
  budget_wait: 250ms
  max_conns: 64
  max_response_bytes: %d
  retries: 1
  retry_backoff: 50ms
  retry_max_time: 2s
  breaker_failures: 5
  breaker_open_for: 1s
cache:
  max_bytes: %d
  stale_while_revalidate: 2s
  stale_if_error: 6s
  ttl:
`, p.listen, p.admin, p.upstream, sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase, p.rate, p.burst, maxResponseBytes, p.maxBytes)
	for _, t := range soakTTLs {
		fmt.Fprintf(&b, "    %s: {head: %s, final: %s, volatile: %s, negative: %s}\n", t.route, t.head, t.final, t.volatile, t.negative)
	}
	fmt.Fprintf(&b, "auth:\n  ip_rate: %d\n  ip_burst: %d\n  trusted_proxies: [\"127.0.0.1/32\"]\n", ipRate, ipBurst)
	opt("auth.ip_max_tracked", "  ip_max_tracked: %d\n", ipTracked)
	b.WriteString("server:\n  read_timeout: 10s\n")
	opt("server.max_conns_per_ip", "  max_conns_per_ip: %d\n", connsPerIP)
	if p.redis != "" {
		// lock_wait: a holder's fetch ends within retry_max_time (2 s).
		fmt.Fprintf(&b, "shared:\n  redis_addr: %q\n  prefix: \"soak:\"\n  lock_wait: 2s\n  local_share: %g\n", p.redis, 1/float64(max(p.nodes, 1)))
	}
	if p.otlp != "" {
		// At 1 (the default) every request is traced; a client's sampled
		// traceparent is followed at any ratio.
		opt("tracing", "tracing:\n  otlp_endpoint: %q\n  sample_ratio: %g\n", p.otlp, p.traceRatio)
	}
	b.WriteString("log:\n  level: warn\n  format: json\n")
	return b.String()
}

// scanPanics returns the lines of the edge's output that tell of a panic, a
// panic the edge recovered (logged "panic recovered", a bug all the same) or
// a fatal runtime error.
func scanPanics(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadString('\n')
		if strings.Contains(line, "panic:") || strings.Contains(line, "panic recovered") || strings.Contains(line, "fatal error:") {
			out = append(out, strings.TrimSpace(line))
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}
