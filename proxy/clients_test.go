package proxy

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// TestXFFAcrossHeaderLines: a proxy that adds its own X-Forwarded-For line
// (HAProxy's option forwardfor) leaves the client's forged line first. The
// edge reads every line as one list and takes the rightmost address that is
// not a trusted proxy, so a client varying its forged line still gets only
// its own burst.
func TestXFFAcrossHeaderLines(t *testing.T) {
	const burst, asks = 3, 20
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Auth.IPRate, c.Auth.IPBurst = 0.001, burst // no refill within the test
		c.Auth.TrustedProxies = []string{"127.0.0.1"}
	})
	path := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1"
	var req strings.Builder
	for i := range asks {
		fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: edge\r\nX-Forwarded-For: 198.51.100.%d\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n", path, i+1)
	}
	allowed := 0
	for _, res := range rawExchange(t, h.addr, req.String(), asks) {
		switch res.StatusCode {
		case 200:
			allowed++
		case 429:
		default:
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	t.Logf("%d of %d allowed (burst %d)", allowed, asks, burst)
	if allowed != burst {
		t.Fatalf("%d of %d requests of one client allowed, want its burst of %d", allowed, asks, burst)
	}
}

// TestClientIP: which address a request is limited under, from its peer and
// its X-Forwarded-For lines.
func TestClientIP(t *testing.T) {
	cfg := config.Default().Auth
	cfg.TrustedProxies = []string{"127.0.0.1", "10.0.0.0/8", "::ffff:192.168.0.0/112", "2001:db8:ff::/48"}
	a, err := newAdmission(cfg, metrics.New(route.Names(), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	f := func(peer string, want string, xff ...string) {
		t.Helper()
		var req fasthttp.Request
		for _, v := range xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 4000}, nil)
		if got := a.clientIP(&ctx).String(); got != want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", peer, xff, got, want)
		}
	}
	f("198.51.100.1", "198.51.100.1", "203.0.113.7") // untrusted peer: its XFF is not believed
	f("127.0.0.1", "127.0.0.1")                      // trusted peer, no XFF
	f("127.0.0.1", "203.0.113.7", "203.0.113.7")
	f("127.0.0.1", "203.0.113.7", "6.6.6.6, 203.0.113.7")
	f("127.0.0.1", "203.0.113.7", "6.6.6.6", "203.0.113.7")                    // HAProxy: a line of its own
	f("127.0.0.1", "203.0.113.7", "6.6.6.6, 7.7.7.7", "203.0.113.7, 10.1.2.3") // trusted hops skipped
	f("127.0.0.1", "203.0.113.7", "203.0.113.7", "10.1.2.3", "")
	f("127.0.0.1", "203.0.113.7", "203.0.113.7,", " , 10.0.0.9")
	f("127.0.0.1", "10.1.2.3", "garbage, 10.1.2.3")    // the last hop vouched for
	f("127.0.0.1", "127.0.0.1", "10.1.2.3, not-an-ip") // ditto
	f("127.0.0.1", "203.0.113.7", "203.0.113.7:5555")  // with a port
	f("127.0.0.1", "2001:db8::1", "[2001:db8::1]:443") // IPv6 with a port
	f("127.0.0.1", "2001:db8::1", "2001:db8::1, 2001:db8:ff:1::2")
	f("127.0.0.1", "203.0.113.7", "203.0.113.7, ::ffff:192.168.1.1") // IPv4-mapped trusted
	f("::ffff:127.0.0.1", "203.0.113.7", "203.0.113.7")              // mapped peer
	f("10.9.9.9", "203.0.113.8", "203.0.113.8")
}

// TestAdmitBehindProxyAllocates nothing for a known IPv4 client.
func TestAdmitBehindProxyAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race")
	}
	cfg := config.Default().Auth
	cfg.IPRate, cfg.IPBurst = 1e9, 1e9
	cfg.TrustedProxies = []string{"127.0.0.1"}
	a, err := newAdmission(cfg, metrics.New(route.Names(), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	var req fasthttp.Request
	req.Header.Add("X-Forwarded-For", "6.6.6.6")
	req.Header.Add("X-Forwarded-For", "203.0.113.7")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}, nil)
	now := time.Now()
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a.admit(&ctx, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per admitted request", allocs)
	}
}
