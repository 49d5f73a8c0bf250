package node

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/fleet"
	"explorer-edge/internal/testkit"
	"explorer-edge/metrics"
	"explorer-edge/proxy/server"
	"explorer-edge/proxy/stream"
)

// fakeCore is a request core that answers "public" and "admin" on its two
// servers and records what the node asks of it.
type fakeCore struct {
	parts     Parts
	reloadErr error

	mu         sync.Mutex
	calls      []string
	reloaded   []config.Config
	noted      []error
	draining   bool
	retryEvery time.Duration
	retryDone  chan struct{} // closed when RetrySelfCheck returns
}

func (c *fakeCore) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
}

func (c *fakeCore) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func (c *fakeCore) SelfCheck(context.Context) error { c.note("SelfCheck"); return nil }

func (c *fakeCore) RetrySelfCheck(ctx context.Context, every time.Duration) {
	c.mu.Lock()
	c.retryEvery = every
	c.mu.Unlock()
	c.note("RetrySelfCheck")
	<-ctx.Done()
	close(c.retryDone)
}

func (c *fakeCore) Listener(ln net.Listener, _ server.ListenerConfig) net.Listener { return ln }

func serverSaying(s string) *fasthttp.Server {
	return &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.WriteString(s) }}
}

func (c *fakeCore) NewServer(config.Server) *fasthttp.Server      { return serverSaying("public") }
func (c *fakeCore) NewAdminServer(config.Config) *fasthttp.Server { return serverSaying("admin") }

func (c *fakeCore) Reload(cfg config.Config) error {
	c.note("Reload")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reloaded = append(c.reloaded, cfg)
	return c.reloadErr
}

func (c *fakeCore) NoteReload(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noted = append(c.noted, err)
}

func (c *fakeCore) SetDraining(d bool) {
	c.note("SetDraining")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining = d
}

func (c *fakeCore) Close(context.Context) error { c.note("Close"); return nil }
func (c *fakeCore) Events() *stream.Hub         { return nil }

// testConfig is the default configuration on loopback ports chosen by
// the system.
func testConfig() config.Config {
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.BaseURL = "http://user:secret@127.0.0.1:1"
	return cfg
}

// startFake starts a node on cfg with a fake core; o's Core is set here.
func startFake(t *testing.T, cfg config.Config, o Options) (*Node, *fakeCore) {
	t.Helper()
	fc := &fakeCore{retryDone: make(chan struct{})}
	o.Core = func(_ config.Config, parts Parts) (Core, error) {
		fc.parts = parts
		return fc, nil
	}
	n, err := Start(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n, fc
}

func get(t *testing.T, addr string) string {
	t.Helper()
	code, body, err := fasthttp.GetTimeout(nil, "http://"+addr+"/", 10*time.Second)
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v", addr, code, err)
	}
	return string(body)
}

// TestStartServesAndCloses: Start builds the core's parts, asks the
// upstream self-check before serving and keeps retrying it, serves the
// core's public and admin servers on their ports, and Close drains them,
// closes the core, ends the retries and returns the same result again.
func TestStartServesAndCloses(t *testing.T) {
	var level slog.LevelVar
	registered := false
	cfg := testConfig()
	n, fc := startFake(t, cfg, Options{Level: &level, Register: func(m *metrics.Metrics) { registered = m != nil }})
	if fc.parts.Cache == nil || fc.parts.Metrics == nil || fc.parts.Logger == nil || fc.parts.Shared != nil || fc.parts.Disk != nil || fc.parts.Tracer != nil {
		t.Errorf("parts of a single node without a disk tier: %+v", fc.parts)
	}
	if n.Cache() != fc.parts.Cache || n.Metrics() != fc.parts.Metrics || n.Fleet() != nil || n.Disk() != nil || n.Core() != Core(fc) {
		t.Errorf("the node's accessors are not the parts the core was given")
	}
	if !registered {
		t.Errorf("Options.Register was not called with the node's metrics")
	}
	if get(t, n.Addr()) != "public" || get(t, n.AdminAddr()) != "admin" {
		t.Errorf("the ports do not serve the core's servers")
	}
	if c := fc.called(); len(c) < 1 || c[0] != "SelfCheck" {
		t.Errorf("calls %v: the self-check first, before serving", c)
	}
	testkit.WaitFor(t, "the self-check's retries", func() bool { return slices.Contains(fc.called(), "RetrySelfCheck") })
	if fc.retryEvery != selfCheckEvery {
		t.Errorf("self-check retried every %v", fc.retryEvery)
	}
	addr := n.Addr()
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-fc.retryDone // the retries end with the node
	for range 2 {
		if err := <-n.Err(); err != nil {
			t.Errorf("a server's Serve returned %v after Drain, want nil", err)
		}
	}
	if c := fc.called(); !slices.Contains(c, "SetDraining") || !slices.Contains(c, "Close") || slices.Index(c, "SetDraining") > slices.Index(c, "Close") {
		t.Errorf("calls %v: drain, then close the core", c)
	}
	if !fc.draining {
		t.Errorf("the core was not told it drains")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the public port still accepts after Close")
	}
	before := len(fc.called())
	if err := n.Close(context.Background()); err != nil || len(fc.called()) != before {
		t.Errorf("a second Close: %v, and it asked the core again", err)
	}
}

// TestNoSelfCheck: with NoSelfCheck the upstream is not asked at start.
func TestNoSelfCheck(t *testing.T) {
	n, fc := startFake(t, testConfig(), Options{NoSelfCheck: true})
	get(t, n.Addr())
	if c := fc.called(); slices.Contains(c, "SelfCheck") || slices.Contains(c, "RetrySelfCheck") {
		t.Errorf("calls %v with NoSelfCheck", c)
	}
	n.Close(context.Background())
}

// TestStartFailsWhole: a core that cannot be made fails Start with its
// error, and the listeners given are closed (nothing is left open for
// the caller to find).
func TestStartFailsWhole(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	want := errors.New("no core today")
	var typedNil *fakeCore
	n, err := Start(testConfig(), Options{Listener: ln, AdminListener: admin,
		Core: func(config.Config, Parts) (Core, error) { return typedNil, want }})
	if n != nil || !errors.Is(err, want) {
		t.Fatalf("Start = %v, %v; want the core's error", n, err)
	}
	for _, l := range []net.Listener{ln, admin} {
		if c, err := l.Accept(); err == nil {
			c.Close()
			t.Errorf("listener %s left open by a failed Start", l.Addr())
		}
	}
	// A port taken: the listener the options did not give fails Start.
	busy, _ := net.Listen("tcp", "127.0.0.1:0")
	defer busy.Close()
	cfg := testConfig()
	cfg.AdminListen = busy.Addr().String()
	fc := &fakeCore{retryDone: make(chan struct{})}
	if _, err := Start(cfg, Options{NoSelfCheck: true, Core: func(config.Config, Parts) (Core, error) { return fc, nil }}); err == nil {
		t.Fatalf("Start on a port in use succeeded")
	}
	if !slices.Contains(fc.called(), "Close") {
		t.Errorf("a Start that failed after the core was made did not close it")
	}
}

// TestReload: a reload changing only keys a reload applies is applied
// (the core's, the level, GET /config's note, config_reloads_total{ok});
// one changing a key that needs a restart, or that the core refuses, is
// refused whole, the configuration in force serving on; RefuseReload
// records a reload that failed before.
func TestReload(t *testing.T) {
	var level slog.LevelVar
	cfg := testConfig()
	n, fc := startFake(t, cfg, Options{Level: &level, NoSelfCheck: true})
	m := n.Metrics()

	next := n.Config()
	next.Log.Level = "debug"
	next.Upstream.Rate = cfg.Upstream.Rate + 1
	if err := n.Reload(next); err != nil {
		t.Fatalf("Reload of reloadable keys: %v", err)
	}
	if n.Config().Upstream.Rate != next.Upstream.Rate || level.Level() != slog.LevelDebug || len(fc.reloaded) != 1 || fc.noted[0] != nil {
		t.Errorf("reload not applied: rate %v level %v core reloads %d notes %v", n.Config().Upstream.Rate, level.Level(), len(fc.reloaded), fc.noted)
	}
	if v := testutil.ToFloat64(m.ConfigReloads.WithLabelValues("ok")); v != 1 {
		t.Errorf("config_reloads_total{ok} = %v", v)
	}

	restart := n.Config()
	restart.Listen = "127.0.0.1:1"
	restart.Upstream.Rate++
	err := n.Reload(restart)
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("Reload changing listen: %v, want refused naming the key", err)
	}
	if len(fc.reloaded) != 1 || n.Config().Upstream.Rate != next.Upstream.Rate || n.Config().Listen != cfg.Listen {
		t.Errorf("a refused reload reached the core or changed the configuration in force")
	}
	fc.reloadErr = errors.New("core says no")
	again := n.Config()
	again.Upstream.Rate++
	if err := n.Reload(again); !errors.Is(err, fc.reloadErr) || n.Config().Upstream.Rate != next.Upstream.Rate {
		t.Errorf("a reload the core refused: %v, rate %v", err, n.Config().Upstream.Rate)
	}
	n.RefuseReload(errors.New("config file does not parse"))
	if v := testutil.ToFloat64(m.ConfigReloads.WithLabelValues("error")); v != 3 {
		t.Errorf("config_reloads_total{error} = %v, want 3", v)
	}
	if len(fc.noted) != 4 || fc.noted[1] == nil || fc.noted[3] == nil || !strings.Contains(fc.noted[3].Error(), "does not parse") {
		t.Errorf("GET /config's notes: %v", fc.noted)
	}
	if got := changedKeys(nil); got == nil || len(got) != 0 {
		t.Errorf("changedKeys(nil) = %#v, want [] (logged as [], not null)", got)
	}
}

// TestDiskTier: with cache.disk_path the core gets the disk tier, which
// Close closes (its file can be opened again); a path whose file cannot be
// opened does not stop the node: no tier, and the reason for /readyz.
func TestDiskTier(t *testing.T) {
	cfg := testConfig()
	cfg.Cache.DiskPath = t.TempDir()
	n, fc := startFake(t, cfg, Options{NoSelfCheck: true})
	if fc.parts.Disk == nil || n.Disk() != fc.parts.Disk || fc.parts.DiskOff != "" {
		t.Fatalf("disk tier: %v, off %q", fc.parts.Disk, fc.parts.DiskOff)
	}
	n.Close(context.Background())
	n2, fc2 := startFake(t, cfg, Options{NoSelfCheck: true})
	if fc2.parts.Disk == nil {
		t.Errorf("the disk tier's file is still held after Close: %s", fc2.parts.DiskOff)
	}
	n2.Close(context.Background())

	bad := testConfig()
	bad.Cache.DiskPath = t.TempDir()
	if err := os.Mkdir(filepath.Join(bad.Cache.DiskPath, "disk.db"), 0o755); err != nil { // a directory where the file goes
		t.Fatal(err)
	}
	n3, fc3 := startFake(t, bad, Options{NoSelfCheck: true})
	if fc3.parts.Disk != nil || n3.Disk() != nil || fc3.parts.DiskOff == "" {
		t.Errorf("a disk path whose file cannot be opened: tier %v, reason %q", fc3.parts.Disk, fc3.parts.DiskOff)
	}
	if get(t, n3.Addr()) != "public" {
		t.Errorf("the node does not serve without its disk tier")
	}
}

// TestFleetConfig: the shared tier's settings are taken from shared.*
// and upstream.*: every address of a list, trimmed, empty ones dropped.
func TestFleetConfig(t *testing.T) {
	c := config.Default()
	c.Shared.RedisAddr = " 10.0.0.1:6379 ,,10.0.0.2:6379, "
	c.Shared.RedisUsername, c.Shared.RedisPassword, c.Shared.RedisTLS, c.Shared.RedisCluster = "u", "p", true, true
	c.Shared.Prefix, c.Shared.LocalShare = "ee:", 0.25
	c.Shared.Timeout, c.Shared.LockTTL, c.Shared.LockWait = time.Second, 2*time.Second, 3*time.Second
	c.Upstream.Rate, c.Upstream.Burst, c.Upstream.MaxResponseBytes = 7, 9, 1234
	f := FleetConfig(c)
	want := fleet.Config{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}, Username: "u", Password: "p", TLS: true, Cluster: true,
		Timeout: time.Second, LockTTL: 2 * time.Second, LockWait: 3 * time.Second, Prefix: "ee:", Rate: 7, Burst: 9, LocalShare: 0.25, MaxBody: 1234}
	if !slices.Equal(f.Addrs, want.Addrs) {
		t.Errorf("addresses %q, want %q", f.Addrs, want.Addrs)
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("FleetConfig = %+v\nwant %+v", f, want)
	}
}

// TestRedactURL: a password in upstream.base_url never reaches the log.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:secret@host:1/api": "http://user:xxxxx@host:1/api",
		"https://host/x":                "https://host/x",
		"http://[::1":                   "(unparsable)",
	} {
		if got := redactURL(in); got != want || strings.Contains(got, "secret") {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFleetNode: with shared.redis_addr the core gets the shared tier,
// connected with Options.Fleet's changes, and Close closes it; Redis
// being down is no error at start.
func TestFleetNode(t *testing.T) {
	addr := startRedis(t)
	cfg := testConfig()
	cfg.Shared.RedisAddr = addr
	cfg.Shared.Timeout = 5 * time.Second // a loaded machine under -race
	n, fc := startFake(t, cfg, Options{NoSelfCheck: true, Fleet: func(c *fleet.Config) { c.Prefix = "h12test:" }})
	if fc.parts.Shared == nil || n.Fleet() != fc.parts.Shared {
		t.Fatalf("fleet mode without the shared tier")
	}
	now := time.Now()
	set := func(key string) {
		n.Fleet().Set(cache.NewItem(key, []byte(`{"code":"0","data":[]}`), cache.Final, now, time.Hour, 0, 0), now)
	}
	set("k1")
	if got := redisDo(t, addr, "EXISTS h12test:{k1}"); got != ":1" {
		t.Errorf("an entry stored through the node's shared tier is not under Options.Fleet's prefix: EXISTS = %q", got)
	}
	n.Close(context.Background())
	set("k2") // closed: nothing reaches Redis
	if got := redisDo(t, addr, "EXISTS h12test:{k2}"); got != ":0" {
		t.Errorf("the shared tier still writes after Close: EXISTS = %q", got)
	}

	down := testConfig()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down.Shared.RedisAddr = ln.Addr().String()
	ln.Close() // nothing listens there now
	n2, fc2 := startFake(t, down, Options{NoSelfCheck: true})
	if fc2.parts.Shared == nil || get(t, n2.Addr()) != "public" {
		t.Errorf("a node whose Redis is down does not start alone")
	}
}

// startRedis runs redis-server on a free loopback port until the test
// ends, as proxy/fleet_test.go does; skipped without redis-server.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("fleet mode needs redis-server on PATH (Debian: apt-get install redis-server); skipped")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testkit.WaitFor(t, "redis-server to answer PING", func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line == "+PONG\r\n"
	})
	return addr
}

// redisDo sends one inline command and returns the first line of the
// answer, without its CRLF.
func redisDo(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(line, "\r\n")
}
