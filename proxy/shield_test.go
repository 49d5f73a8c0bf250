package proxy

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

func TestUpstreamBudgetHolds(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Rate = 20
		c.Upstream.Burst = 20
	})
	start := time.Now() // the bucket starts full at the edge's start
	final := h.sim.FinalizedHeight("CHAINX")
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				key := (w*131 + i*17) % 400 // hundreds of distinct keys
				r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=5", final-int64(key)))
				switch {
				case r.status == 200 && r.code() == "0":
					served.Add(1)
				case r.status == 503 && r.code() == "50001" && r.header["Retry-After"] != "":
					refused.Add(1)
				default:
					t.Errorf("neither data nor a well-formed 503: %d %q %s", r.status, r.header["Retry-After"], r.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	budget := 20*elapsed + 20
	calls := float64(h.upstreamCalls())
	t.Logf("%d served, %d refused, %.0f upstream calls in %.2f s (budget %.0f)", served.Load(), refused.Load(), calls, elapsed, budget)
	if calls > budget {
		t.Fatalf("%.0f upstream calls exceed the budget of %.0f", calls, budget)
	}
	if refused.Load() == 0 || served.Load() == 0 {
		t.Fatalf("expected both served and refused requests under overload")
	}
}

func TestUpstream429IsHonoured(t *testing.T) {
	h := newHarness(t, func(c *config.Config, s *sim.Config) {
		s.Faults = sim.Faults{HTTP429: 1, RetryAfter: 1}
	})
	list := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", height)
	}
	final := h.sim.FinalizedHeight("CHAINX")
	throttledAt := time.Now()
	r := h.get(list(final))
	if r.status != 503 || r.code() != "50001" || r.header["Retry-After"] == "" {
		t.Fatalf("429 from upstream: client got %d %s Retry-After %q", r.status, r.body, r.header["Retry-After"])
	}
	if n := h.upstreamCalls(); n != 1 {
		t.Fatalf("429 was retried: %d calls", n)
	}
	if rate := counterValue(t, h, "explorer_edge_upstream_budget_rate"); rate >= h.cfg.Upstream.Rate {
		t.Fatalf("budget rate %v not lowered after a 429", rate)
	}
	h.sim.ClearFaults()
	// Until Retry-After has passed, nothing goes upstream.
	for i := int64(1); time.Since(throttledAt) < 800*time.Millisecond; i++ {
		r := h.get(list(final - i))
		if r.status != 503 || h.upstreamCalls() != 1 {
			if time.Since(throttledAt) < time.Second {
				t.Fatalf("upstream called %v after a 429 with Retry-After 1: %d calls", time.Since(throttledAt), h.upstreamCalls())
			}
		}
	}
	testkit.WaitFor(t, "the upstream to be called again", func() bool { return h.get(list(final-500)).status == 200 })
	if since := time.Since(throttledAt); since < time.Second {
		t.Fatalf("called again after %v, before Retry-After", since)
	}
}

func TestBreakerOpensAndCloses(t *testing.T) {
	h := newHarness(t, func(c *config.Config, s *sim.Config) {
		c.Upstream.BreakerFailures = 3
		c.Upstream.BreakerOpenFor = 300 * time.Millisecond
		c.Upstream.Retries = 0
		s.Faults = sim.Faults{HTTP500: 1}
	})
	final := h.sim.FinalizedHeight("CHAINX")
	list := func(i int) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", final-int64(i))
	}
	for i := 0; i < 3; i++ {
		if r := h.get(list(i)); r.status != 502 || r.code() != "50026" {
			t.Fatalf("failing upstream: %d %s", r.status, r.body)
		}
	}
	if counterValue(t, h, "explorer_edge_breaker_state") != 2 {
		t.Fatal("breaker not open after 3 failures")
	}
	calls := h.upstreamCalls()
	for i := 3; i < 20; i++ {
		if r := h.get(list(i)); r.status != 503 || r.code() != "50001" {
			t.Fatalf("open breaker: %d %s, want 503 50001", r.status, r.body)
		}
	}
	if h.upstreamCalls() != calls {
		t.Fatalf("open breaker let %d calls through", h.upstreamCalls()-calls)
	}
	h.sim.ClearFaults()
	testkit.WaitFor(t, "a probe to close the breaker", func() bool { return h.get(list(30)).status == 200 })
	if counterValue(t, h, "explorer_edge_breaker_state") != 0 {
		t.Fatal("breaker not closed after a good probe")
	}
}

// sign is a test-local HMAC written from the description in docs/design.md, not
// the signer package: Base64(HMAC-SHA256(secret, ts + "GET" + requestPath)).
func sign(secret, ts, requestPath string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "GET" + requestPath))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

const (
	clientKey    = "web-key-1"
	clientSecret = "C0FFEE0000000000000000000000BEEF"
	clientPass   = "web-pass-phrase"
)

func signedClients(c *config.Config, _ *sim.Config) {
	c.Auth.Mode = "signed"
	c.Auth.Clients = []config.Client{{Name: "web", APIKey: clientKey, SecretKey: clientSecret, Passphrase: clientPass}}
}

func TestClientAuth(t *testing.T) {
	h := newHarness(t, signedClients)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 2)
	path := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	now := time.Now().UTC()
	ts := now.Format("2006-01-02T15:04:05.000Z")
	headers := func(key, pass, sig, ts string) []string {
		var hs []string
		for _, kv := range [][2]string{{"SVC-ACCESS-KEY", key}, {"SVC-ACCESS-PASSPHRASE", pass}, {"SVC-ACCESS-SIGN", sig}, {"SVC-ACCESS-TIMESTAMP", ts}} {
			if kv[1] != "" {
				hs = append(hs, kv[0], kv[1])
			}
		}
		return hs
	}
	good := sign(clientSecret, ts, path)
	old := now.Add(-time.Minute).Format("2006-01-02T15:04:05.000Z")
	cases := []struct {
		name    string
		headers []string
		code    string
	}{
		{"no key", headers("", clientPass, good, ts), "50103"},
		{"no passphrase", headers(clientKey, "", good, ts), "50104"},
		{"no sign", headers(clientKey, clientPass, "", ts), "50106"},
		{"no timestamp", headers(clientKey, clientPass, good, ""), "50107"},
		{"wrong passphrase", headers(clientKey, "nope", good, ts), "50105"},
		{"unknown key", headers("stranger", clientPass, good, ts), "50111"},
		{"bad timestamp", headers(clientKey, clientPass, good, "2020-12-08 09:08:57"), "50112"},
		{"expired timestamp", headers(clientKey, clientPass, sign(clientSecret, old, path), old), "50102"},
		{"bad signature", headers(clientKey, clientPass, sign("other-secret", ts, path), ts), "50113"},
		{"signature of another path", headers(clientKey, clientPass, sign(clientSecret, ts, path+"&page=2"), ts), "50113"},
	}
	for _, c := range cases {
		r := h.get(path, c.headers...)
		if r.status != 401 || r.code() != c.code {
			t.Errorf("%s: %d %s, want 401 %s", c.name, r.status, r.body, c.code)
		}
	}
	if h.upstreamCalls() != 0 {
		t.Fatal("unauthenticated requests reached the upstream")
	}

	accepted := []string{
		path,
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hashes[0] + "," + hashes[1], // comma left unencoded
		"/api/v5/chainx/tz/cross/transaction-multi?txId=" + hashes[1] + "%2C" + hashes[0] + "&chainShortName=trade_zone",
	}
	for _, p := range accepted {
		for _, ts := range []string{ts, now.Format("2006-01-02T15:04:05Z"), now.Format("2006-01-02T15:04:05.0Z"), now.Format("2006-01-02T15:04:05.00Z")} {
			r := h.get(p, headers(clientKey, clientPass, sign(clientSecret, ts, p), ts)...)
			if r.status != 200 || r.code() != "0" {
				t.Errorf("%s at %s: %d %s", p, ts, r.status, r.body)
			}
		}
	}
	// A cached answer is never given to an unauthenticated caller.
	if r := h.get(path); r.status != 401 {
		t.Fatalf("cached key answered an unsigned request: %d", r.status)
	}
}

func TestClientRateLimits(t *testing.T) {
	t.Run("per client", func(t *testing.T) {
		h := newHarness(t, func(c *config.Config, s *sim.Config) {
			signedClients(c, s)
			c.Auth.Clients[0].Rate, c.Auth.Clients[0].Burst = 0.5, 3
		})
		path := "/api/v5/chainx/block/block-list?chainShortName=chainx"
		get := func() resp {
			ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
			return h.get(path, "SVC-ACCESS-KEY", clientKey, "SVC-ACCESS-PASSPHRASE", clientPass,
				"SVC-ACCESS-TIMESTAMP", ts, "SVC-ACCESS-SIGN", sign(clientSecret, ts, path))
		}
		for i := 0; i < 3; i++ {
			if r := get(); r.status != 200 {
				t.Fatalf("within burst: %d %s", r.status, r.body)
			}
		}
		r := get()
		if r.status != 429 || r.code() != "50011" || r.header["Retry-After"] == "" {
			t.Fatalf("over the client's rate: %d %s Retry-After %q", r.status, r.body, r.header["Retry-After"])
		}
	})
	t.Run("per IP, proxies trusted only when configured", func(t *testing.T) {
		h := newHarness(t, func(c *config.Config, _ *sim.Config) {
			c.Auth.IPRate, c.Auth.IPBurst = 0.5, 2
			c.Auth.TrustedProxies = []string{"127.0.0.1"}
		})
		path := "/api/v5/chainx/block/block-list?chainShortName=chainx"
		for _, ip := range []string{"203.0.113.1", "203.0.113.2"} {
			for i := 0; i < 2; i++ {
				if r := h.get(path, "X-Forwarded-For", "10.9.9.9, "+ip); r.status != 200 {
					t.Fatalf("%s within burst: %d", ip, r.status)
				}
			}
			if r := h.get(path, "X-Forwarded-For", ip); r.status != 429 || r.code() != "50011" {
				t.Fatalf("%s over its rate: %d %s", ip, r.status, r.body)
			}
		}
		h2 := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Auth.IPRate, c.Auth.IPBurst = 0.5, 2 })
		h2.get(path, "X-Forwarded-For", "203.0.113.1")
		h2.get(path, "X-Forwarded-For", "203.0.113.2")
		if r := h2.get(path, "X-Forwarded-For", "203.0.113.3"); r.status != 429 {
			t.Fatalf("X-Forwarded-For of an untrusted peer was believed: %d", r.status)
		}
	})
}

func TestServerHardening(t *testing.T) {
	h := newHarness(t, withBlockPagesOff, func(c *config.Config, _ *sim.Config) {
		c.Server.ReadTimeout = 300 * time.Millisecond
		c.Server.IdleTimeout = 300 * time.Millisecond
		c.Server.MaxHeaderBytes = 4096
		c.Server.MaxURLBytes = 1024
		c.Upstream.MaxResponseBytes = 4096
	})
	path := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1"

	// Slowloris: connections that send a header byte now and then are cut
	// off at read_timeout while other clients are served.
	var conns []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n", path)
		conns = append(conns, c)
	}
	if r := h.get(path); r.status != 200 {
		t.Fatalf("a normal client was hurt by slow ones: %d", r.status)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		// Keep trickling; the server must close the connection anyway.
		c.Write([]byte("X-A: 1\r\n"))
		buf := make([]byte, 1024)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("slow connection was not cut off")
				}
				break
			}
		}
	}

	// Oversized URL and headers.
	long := path + "&x=" + strings.Repeat("a", 2000)
	if r := h.get(long); r.status != 414 {
		t.Fatalf("long URL: %d %s", r.status, r.body)
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", path, strings.Repeat("b", 8000))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if strings.Contains(line, " 200 ") {
		t.Fatalf("oversized headers were served: %q", line)
	}
	if r := h.get(path); r.status != 200 {
		t.Fatalf("normal client after oversized ones: %d", r.status)
	}

	// An upstream answer above max_response_bytes is an error, not a
	// memory blow-up.
	r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=100")
	if r.status != 502 || r.code() != "50026" {
		t.Fatalf("oversized upstream answer: %d %s", r.status, r.body)
	}
}

// Only the six routes, with canonical queries, ever reach the upstream.
func TestClientCannotSteerTheUpstream(t *testing.T) {
	h := newHarness(t)
	for _, target := range []string{
		"/api/v5/chainx/block/block-list/../../../../sim/stats",
		"/api/v5/chainx/block/../block/block-list?chainShortName=chainx&page=1",
		"//sim/faults",
		"/api/v5/chainx/block/block-list%2F..%2F..%2Fsim?chainShortName=chainx",
		"/api/v5/chainx/block/block-list?chainShortName=chainx&base_url=http://evil",
	} {
		h.get(target, "Host", "evil.example", "X-Forwarded-Host", "evil.example")
	}
	// An absolute-form request target names another host.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://evil.example/api/v5/chainx/block/block-list?chainShortName=chainx&limit=2 HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, _ := bufio.NewReader(c).ReadString('\n'); !strings.Contains(line, " 200 ") {
		t.Fatalf("absolute-form request: %q", line)
	}
	if len(h.rec.all()) == 0 {
		t.Fatal("nothing reached the upstream; the test checks nothing")
	}
	for _, got := range h.rec.all() {
		ok := false
		for _, r := range route.Table {
			if strings.HasPrefix(got, r.Path+"?chainShortName=") {
				ok = true
			}
		}
		if !ok || strings.Contains(got, "evil") || strings.Contains(got, "..") {
			t.Errorf("upstream received %q", got)
		}
	}
}
