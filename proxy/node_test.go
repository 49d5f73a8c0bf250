package proxy

import (
	"context"
	"errors"
	"explorer-edge/proxy/node"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNodeServesReloadsAndCloses: Start with no options listens where the
// configuration says, asks the upstream its self-check before serving,
// and serves both ports; Reload applies or refuses by key and counts it;
// Close stops both ports, once.
func TestNodeServesReloadsAndCloses(t *testing.T) {
	h := newUpstream(t, nil)
	cfg := h.cfg
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "localhost:0"
	n, err := Start(cfg, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	// The self-check's question and, once, the height reading
	// (upstream/selfcheck.go: learnHeight).
	if calls := h.upstreamCalls(); calls != 2 {
		t.Errorf("%d upstream calls before serving, want the self-check's 2", calls)
	}
	if n.Fleet() != nil || n.Core() == nil || n.Cache() == nil || n.Metrics() == nil {
		t.Fatalf("fleet %v, proxy %v, cache %v, metrics %v", n.Fleet(), n.Core(), n.Cache(), n.Metrics())
	}
	get := func(addr, target string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + target)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if status, body := get(n.AdminAddr(), "/readyz"); status != 200 {
		t.Fatalf("/readyz: %d %s", status, body)
	}
	if status, body := get(n.Addr(), "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=2"); status != 200 || !strings.Contains(body, `"code":"0"`) {
		t.Fatalf("public: %d %s", status, body)
	}

	reloads := func(result string) float64 {
		return testutil.ToFloat64(n.Metrics().ConfigReloads.WithLabelValues(result))
	}
	next := cfg
	next.Upstream.Timeout = 3 * time.Second
	if err := n.Reload(next); err != nil || n.Config().Upstream.Timeout != 3*time.Second || reloads("ok") != 1 {
		t.Fatalf("a reload of upstream.timeout: %v, timeout %s, %v ok", err, n.Config().Upstream.Timeout, reloads("ok"))
	}
	restart := next
	restart.Cache.MaxBytes *= 2
	if err := n.Reload(restart); err == nil || !strings.Contains(err.Error(), "cache.max_bytes") || reloads("error") != 1 {
		t.Fatalf("a reload of cache.max_bytes: %v, %v errors", err, reloads("error"))
	}
	if n.Config().Cache.MaxBytes != cfg.Cache.MaxBytes {
		t.Fatal("a refused reload became the configuration in force")
	}
	n.RefuseReload(errors.New("config.yaml: no such file"))
	if reloads("error") != 2 {
		t.Fatalf("RefuseReload: %v errors, want 2", reloads("error"))
	}

	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	for _, addr := range []string{n.Addr(), n.AdminAddr()} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts after Close", addr)
		}
	}
	for range 2 {
		if err := <-n.Err(); err != nil {
			t.Errorf("a server stopped with %v after Close", err)
		}
	}
}

// TestNodeStartFailsClean: a Start that cannot listen returns the error and
// closes the listener it was given.
func TestNodeStartFailsClean(t *testing.T) {
	h := newUpstream(t, nil)
	taken := listenLoopback(t)
	defer taken.Close()
	given := listenLoopback(t)
	cfg := h.cfg
	cfg.AdminListen = taken.Addr().String()
	if _, err := Start(cfg, node.Options{Listener: given, NoSelfCheck: true}); err == nil {
		t.Fatal("Start on a taken admin address succeeded")
	}
	if _, err := given.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the given listener after a failed Start: %v, want it closed", err)
	}
}
