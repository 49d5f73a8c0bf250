package proxy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/purge"
	"explorer-edge/sim"
)

var vclBackend = regexp.MustCompile(`\.host = "[^"]*";\s*\.port = "[^"]*";`)

// startVarnish runs varnishd on addr with the shipped VCL
// (deploy/varnish/explorer-edge.vcl), its backend the edge at edge, and
// stops it at the end of the test. Without varnishd the test is skipped,
// unless REQUIRE_VARNISH is set (.ci/run installs it).
func startVarnish(t *testing.T, addr, edge string) {
	t.Helper()
	bin, err := exec.LookPath("varnishd")
	if err != nil {
		if os.Getenv("REQUIRE_VARNISH") != "" {
			t.Fatal("REQUIRE_VARNISH is set and varnishd is not installed")
		}
		t.Skip("varnishd not installed (Debian: varnish, varnish-modules)")
	}
	vcl, err := os.ReadFile("../deploy/varnish/explorer-edge.vcl")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(edge)
	vcl = vclBackend.ReplaceAll(vcl, []byte(fmt.Sprintf(`.host = "%s"; .port = "%s";`, host, port)))
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.vcl")
	if err := os.WriteFile(path, vcl, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// -j none: one user for every process (the tests run as root or as
	// the user owning dir); -F: in the foreground, a child of the test.
	cmd := exec.Command(bin, "-F", "-j", "none", "-n", filepath.Join(dir, "work"), "-a", addr, "-f", path, "-s", "malloc,32m")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	c := &fasthttp.Client{}
	testkit.WaitFor(t, "varnishd to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("varnishd exited: %s", out.String())
		default:
		}
		var req fasthttp.Request
		var res fasthttp.Response
		req.SetRequestURI("http://" + addr + "/")
		req.Header.SetMethod("PURGE")
		req.Header.Set("xkey-purge", "none")
		return c.DoTimeout(&req, &res, time.Second) == nil && res.StatusCode() == 200
	})
}

// viaVarnish asks Varnish at addr for target and returns its X-Cache
// (HIT or MISS) and status.
func viaVarnish(t *testing.T, addr, target string) (string, int) {
	t.Helper()
	var req fasthttp.Request
	var res fasthttp.Response
	req.SetRequestURI("http://" + addr + target)
	req.Header.Set("Accept-Encoding", "gzip")
	if err := (&fasthttp.Client{}).DoTimeout(&req, &res, 10*time.Second); err != nil {
		t.Fatalf("GET %s through Varnish: %v", target, err)
	}
	if len(res.Header.Peek("xkey")) > 0 || len(res.Header.Peek("CDN-Cache-Control")) > 0 {
		t.Fatalf("Varnish passed the CDN's headers on to the client: %s", res.Header.String())
	}
	return string(res.Header.Peek("X-Cache")), res.StatusCode()
}

// TestVarnishPurgedByTheEdge: Varnish with the shipped VCL in front of
// the edge keeps the edge's answers (a second ask is a Varnish hit), and
// an operator purge of each selector (url, heights, route with chain,
// all) and a reorganization's purge remove what they select from Varnish,
// through the edge's purge sender (cdn.provider varnish, xkey-purge),
// while an answer they do not select stays.
func TestVarnishPurgedByTheEdge(t *testing.T) {
	vaddr := freeAddr(t)
	h := newUpstream(t, nil, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.CDN.TagHeader, c.CDN.Provider, c.CDN.Endpoints = "xkey", "varnish", []string{"http://" + vaddr + "/"}
		c.CDN.ResendAfter, c.CDN.Rate, c.CDN.Burst = 50*time.Millisecond, 1000, 1000
	})
	h.start()
	startVarnish(t, vaddr, h.addr)
	final := warmFinal(h)
	fin := h.p.truth.Final("CHAINX")
	far := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", fin-300)
	list := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=5", fin-400)

	cached := func(target string) {
		t.Helper()
		viaVarnish(t, vaddr, target)
		if xc, st := viaVarnish(t, vaddr, target); xc != "HIT" || st != 200 {
			t.Fatalf("%s: X-Cache %q, status %d: Varnish does not keep the edge's answer", target, xc, st)
		}
	}
	purgedFromVarnish := func(what, target string) {
		t.Helper()
		testkit.WaitFor(t, what+" to leave Varnish", func() bool {
			xc, _ := viaVarnish(t, vaddr, target)
			return xc == "MISS"
		})
	}
	stays := func(what, target string) {
		t.Helper()
		if xc, _ := viaVarnish(t, vaddr, target); xc != "HIT" {
			t.Fatalf("%s purged %s from Varnish too", what, target)
		}
	}

	for _, c := range []struct {
		selector     string
		purged, kept string
	}{
		{`{"url":"` + final + `"}`, final, far},
		{fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, fin-5, fin-5), final, far},
		{`{"route":"transaction-list","chain":"chainx"}`, far, list},
		{`{"all":true}`, list, ""},
	} {
		// The purges before have been sent again (cdn.resend_after):
		// their resends would purge what this case keeps.
		testkit.WaitFor(t, "the purges before to be sent and sent again", h.p.cdn.Idle)
		cached(c.purged)
		if c.kept != "" {
			cached(c.kept)
		}
		h.purge(c.selector)
		purgedFromVarnish(c.selector, c.purged)
		if c.kept != "" {
			stays(c.selector, c.kept)
		}
	}

	// A reorganization's purge: every answer from the fork up, in one
	// request to each cache, and one more after cdn.resend_after.
	testkit.WaitFor(t, "the purges before to be sent and sent again", h.p.cdn.Idle)
	cached(final)
	cached(far)
	ok := func() float64 { return testutil.ToFloat64(h.m.CDN.Requests.WithLabelValues("ok")) }
	before := ok()
	if _, err := h.p.purges.PurgeAt(purge.Replaced(h.p.settings.Load().chains, "CHAINX", fin-10, h.clock.Now().UnixNano()), h.clock.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	purgedFromVarnish("a reorganization from "+fmt.Sprint(fin-10), final)
	stays("a reorganization from "+fmt.Sprint(fin-10), far)

	testkit.WaitFor(t, "the reorganization's resend", func() bool { return ok() >= before+2 })
	if n := ok() - before; n != 2 {
		t.Fatalf("a reorganization cost %v purge requests, want 2 (one, and its resend)", n)
	}
	if !strings.Contains(h.get(final).header["Xkey"], "ee-all") {
		t.Fatal("the edge's answer has no xkey header")
	}
}
