package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/node"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// clock is a test clock shared by explorer-sim (chain time) and the edge
// (cache time). It stands still unless moved, so answers are repeatable.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// recorder keeps the request targets explorer-sim received, and holds them
// at its gate while a test has one set (holdUpstream).
type recorder struct {
	mu      sync.Mutex
	targets []string
	headers []http.Header
	gate    atomic.Pointer[upstreamGate]
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/api/") {
			r.mu.Lock()
			r.targets = append(r.targets, req.RequestURI)
			r.headers = append(r.headers, req.Header.Clone())
			r.mu.Unlock()
			if g := r.gate.Load(); g != nil && !g.pass(req) {
				return // the edge gave up on the call while it was held
			}
		}
		h.ServeHTTP(w, req)
	})
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.targets...)
}

// harness is explorer-sim and an edge (Start) on free loopback ports.
type harness struct {
	t     testing.TB
	sim   *sim.Server
	rec   *recorder
	clock *clock
	cfg   config.Config
	node  *node.Node
	p     *Proxy           // the node's request core
	m     *metrics.Metrics // node.Metrics()
	cache *cache.Cache     // node.Cache()
	addr  string           // node.Addr()
	hc    *fasthttp.Client
	log   *slog.Logger // the edge's logger (NodeOptions.Logger); set before start, nil discards
}

type harnessOpt func(*config.Config, *sim.Config)

// newHarness starts explorer-sim (auth on, demo credentials, the test
// clock) and an edge in front of it; both stop at the end of the test.
func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessWrapped(t, nil, opts...)
}

// newHarnessWrapped is newHarness with wrap around explorer-sim's handler,
// for tests that need an upstream misbehaving in ways the sim does not.
func newHarnessWrapped(t testing.TB, wrap func(http.Handler) http.Handler, opts ...harnessOpt) *harness {
	t.Helper()
	h := newUpstream(t, wrap, opts...)
	h.start()
	return h
}

// newUpstream is newHarnessWrapped without an edge: explorer-sim and the
// configuration, for tests that start their edges themselves (a fleet).
func newUpstream(t testing.TB, wrap func(http.Handler) http.Handler, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, rec: &recorder{}, clock: newClock()}
	scfg := sim.Config{Auth: true, Credentials: sim.DemoCredentials(), Now: h.clock.Now}
	cfg := config.Default()
	cfg.Upstream.APIKey = sim.DemoAPIKey
	cfg.Upstream.SecretKey = sim.DemoSecretKey
	cfg.Upstream.Passphrase = sim.DemoPassphrase
	cfg.Upstream.Rate = 10000
	cfg.Upstream.Burst = 10000
	cfg.Upstream.Timeout = 2 * time.Second
	cfg.Upstream.RetryBackoff = 5 * time.Millisecond
	// Never listened on: startNode gives Start listeners on free ports.
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:1"
	cfg.Cache.MaxBytes = 64 << 20
	for _, o := range opts {
		o(&cfg, &scfg)
	}
	h.sim = sim.New(scfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handler := h.sim.Handler()
	if wrap != nil {
		handler = wrap(handler)
	}
	hs := &http.Server{Handler: h.rec.wrap(handler)}
	go hs.Serve(ln)
	t.Cleanup(func() { h.sim.Close(); hs.Close() })
	cfg.Upstream.BaseURL = "http://" + ln.Addr().String()
	h.cfg = cfg
	return h
}

// sibling is another harness in front of h's explorer-sim, with h's clock
// and configuration, for a further edge that startNode starts.
func (h *harness) sibling() *harness {
	return &harness{t: h.t, sim: h.sim, rec: h.rec, clock: h.clock, cfg: h.cfg}
}

// start starts an edge for h.cfg as the binary does.
func (h *harness) start() { h.startNode(NodeOptions{}) }

// startWith is start with extend changing the edge's options
// (NodeOptions.Extend); the function extend returns runs at cleanup,
// after the edge closed.
func (h *harness) startWith(extend func(*Options) (cleanup func())) {
	cleanup := func() {}
	h.t.Cleanup(func() { cleanup() })
	h.startNode(NodeOptions{Extend: func(o *Options) { cleanup = extend(o) }})
}

// NodeOptions are node.Options and, beside them, Extend: it changes the
// proxy's options (Options) just before New, to put in a collaborator of
// the test's: a budget that counts, a tier that panics or wraps the
// fleet's.
type NodeOptions struct {
	node.Options
	Extend func(*Options)
}

// startNode starts an edge for h.cfg with Start, serving on free loopback
// ports through the production listeners and servers, and closes it at
// the end of the test. The harness sets o's Logger (h.log), Now (the test
// clock), listeners and NoSelfCheck: the self-check's calls would count in
// upstreamCalls (the self-check tests call SelfCheck).
func (h *harness) startNode(o NodeOptions) *node.Node {
	t := h.t
	t.Helper()
	if err := h.cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	o.Logger, o.Now, o.NoSelfCheck = h.log, h.clock.Now, true
	o.Listener, o.AdminListener = listenLoopback(t), listenLoopback(t)
	o.Core = func(cfg config.Config, parts node.Parts) (node.Core, error) {
		opts := OptionsOf(parts)
		if o.Extend != nil {
			o.Extend(&opts)
		}
		p, err := New(cfg, opts)
		h.p = p
		return p, err
	}
	n, err := Start(h.cfg, o.Options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	h.node, h.m, h.cache, h.addr = n, n.Metrics(), n.Cache(), n.Addr()
	h.hc = &fasthttp.Client{MaxConnsPerHost: 512, ReadTimeout: 10 * time.Second}
	return n
}

func listenLoopback(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// resp is a response as a client saw it.
type resp struct {
	status int
	header map[string]string
	body   []byte
}

func (r resp) code() string {
	var env struct {
		Code string `json:"code"`
	}
	json.Unmarshal(r.body, &env)
	return env.Code
}

// get sends GET target to the edge with optional header pairs.
func (h *harness) get(target string, headers ...string) resp {
	h.t.Helper()
	return h.do(fasthttp.MethodGet, target, headers...)
}

func (h *harness) do(method, target string, headers ...string) resp {
	h.t.Helper()
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + h.addr + target)
	req.URI().DisablePathNormalizing = true
	req.Header.SetMethod(method)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if err := h.hc.DoTimeout(req, res, 10*time.Second); err != nil {
		h.t.Fatalf("%s %s: %v", method, target, err)
	}
	r := resp{status: res.StatusCode(), header: map[string]string{}, body: bytes.Clone(res.Body())}
	for k, v := range res.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r
}

// simGet asks explorer-sim directly, signed with the demo account.
func (h *harness) simGet(target string) []byte {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.cfg.Upstream.BaseURL+target, nil)
	ts := signer.Timestamp(time.Now())
	req.Header.Set(signer.HeaderKey, sim.DemoAPIKey)
	req.Header.Set(signer.HeaderPassphrase, sim.DemoPassphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, signer.Sign(sim.DemoSecretKey, ts, "GET", target))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return b.Bytes()
}

// upstreamCalls is the number of API requests explorer-sim received.
func (h *harness) upstreamCalls() int64 { return h.sim.Stats().RequestsTotal }
