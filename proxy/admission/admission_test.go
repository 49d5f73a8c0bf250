package admission

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	clientKey    = "web-key-1"
	clientSecret = "C0FFEE0000000000000000000000BEEF"
	clientPass   = "web-pass-phrase"
)

var fuzzChains = []string{"CHAINX", "TRADE_ZONE"}

type nopStats struct{}

func (nopStats) Bytes() int64         { return 0 }
func (nopStats) Entries() int64       { return 0 }
func (nopStats) Evictions() int64     { return 0 }
func (nopStats) MaxBytes() int64      { return 0 }
func (nopStats) IdentityBytes() int64 { return 0 }

func sign(secret, ts, requestPath string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "GET" + requestPath))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// FuzzVerify: no header set is accepted unless it carries the client's
// exact signature of the request target; nothing panics.
func FuzzVerify(f *testing.F) {
	m := metrics.New(route.Names(), fuzzChains, nopStats{})
	a, err := New(config.Auth{Mode: "signed", MaxSkew: 30 * time.Second, Clients: []config.Client{
		{Name: "web", APIKey: clientKey, SecretKey: clientSecret, Passphrase: clientPass}}}, m)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ts := "2026-01-02T03:04:05.000Z"
	uri := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	f.Add(clientKey, clientPass, sign(clientSecret, ts, uri), ts, uri)
	f.Add(clientKey, clientPass, "x", "2026-01-02T03:04:05Z", uri)
	f.Add("", "", "", "", "/")
	f.Fuzz(func(t *testing.T, key, pass, sig, stamp, target string) {
		var h fasthttp.RequestHeader
		h.SetRequestURI(target)
		h.Set("SVC-ACCESS-KEY", key)
		h.Set("SVC-ACCESS-PASSPHRASE", pass)
		h.Set("SVC-ACCESS-SIGN", sig)
		h.Set("SVC-ACCESS-TIMESTAMP", stamp)
		c, err := a.verify(&h, now)
		if err != nil {
			if err.Status != 401 {
				t.Fatalf("status %d", err.Status)
			}
			return
		}
		if c.Name != "web" || string(h.Peek("SVC-ACCESS-SIGN")) != sign(clientSecret, string(h.Peek("SVC-ACCESS-TIMESTAMP")), string(h.RequestURI())) {
			t.Fatalf("accepted a request without the client's signature: %q %q %q", sig, stamp, target)
		}
	})
}

// TestClientIP: which address a request is limited under, from its peer and
// its X-Forwarded-For lines.
func TestClientIP(t *testing.T) {
	cfg := config.Default().Auth
	cfg.TrustedProxies = []string{"127.0.0.1", "10.0.0.0/8", "::ffff:192.168.0.0/112", "2001:db8:ff::/48"}
	a, err := New(cfg, metrics.New(route.Names(), nil, nil))
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
		if got := a.ClientIP(&ctx).String(); got != want {
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
	if testkit.Race {
		t.Skip("allocation counts mean nothing under -race")
	}
	cfg := config.Default().Auth
	cfg.IPRate, cfg.IPBurst = 1e9, 1e9
	cfg.TrustedProxies = []string{"127.0.0.1"}
	a, err := New(cfg, metrics.New(route.Names(), nil, nil))
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
		if _, err := a.Admit(&ctx, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per admitted request", allocs)
	}
}
