package admission

import (
	"net"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// ClientKey and PeerKey group by auth.ip_v6_prefix, as the per-IP rate
// does: a request's client and a connection's peer of one group share one
// key, whatever the part of the address past the prefix; a trusted proxy
// is not counted as a peer; IPv4-mapped addresses are their IPv4.
func TestClientKeyAndPeerKeyGroupByPrefix(t *testing.T) {
	cfg := config.Default().Auth
	cfg.IPv6Prefix = 48
	cfg.TrustedProxies = []string{"127.0.0.1", "2001:db8:ff::/48"}
	a, err := New(cfg, metrics.New(route.Names(), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	clientKey := func(peer string, xff string) netip.Addr {
		var req fasthttp.Request
		if xff != "" {
			req.Header.Add("X-Forwarded-For", xff)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 4000}, nil)
		return a.ClientKey(&ctx)
	}
	for _, c := range []struct{ peer, xff, want string }{
		{"2001:db8:1:2::1", "", "2001:db8:1::"},
		{"2001:db8:1:ffff:1:2:3:4", "", "2001:db8:1::"},
		{"127.0.0.1", "2001:db8:1:77::9", "2001:db8:1::"}, // behind a trusted proxy
		{"2001:db8:ff:1::1", "2001:db8:1:78::9", "2001:db8:1::"},
		{"127.0.0.1", "::ffff:203.0.113.7", "203.0.113.7"},
		{"::ffff:198.51.100.2", "", "198.51.100.2"},
	} {
		if got := clientKey(c.peer, c.xff); got != netip.MustParseAddr(c.want) {
			t.Errorf("ClientKey(peer %s, X-Forwarded-For %q) = %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	for _, c := range []struct {
		peer    string
		want    string
		counted bool
	}{
		{"2001:db8:1:2::1", "2001:db8:1::", true},
		{"2001:db8:1:3::1", "2001:db8:1::", true},
		{"::ffff:198.51.100.2", "198.51.100.2", true},
		{"127.0.0.1", "", false},
		{"::ffff:127.0.0.1", "", false},
		{"2001:db8:ff:9::1", "", false},
	} {
		key, counted := a.PeerKey(netip.MustParseAddr(c.peer))
		if counted != c.counted || (counted && key != netip.MustParseAddr(c.want)) {
			t.Errorf("PeerKey(%s) = %s, %v; want %s, %v", c.peer, key, counted, c.want, c.counted)
		}
	}
}
