package proxy

import (
	"fmt"
	"strings"
	"testing"

	"explorer-edge/config"
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
