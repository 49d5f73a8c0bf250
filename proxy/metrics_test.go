package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// serveAdmin serves the edge's admin handler on a free loopback port until
// the test ends and returns its address.
func (h *harness) serveAdmin() string {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h.p.AdminHandler()}
	go srv.Serve(ln)
	h.t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// adminGet is GET path on the admin listener: status and body.
func adminGet(t testing.TB, admin, path string) (int, []byte) {
	t.Helper()
	res, err := http.Get("http://" + admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// scrapeMetrics reads /metrics in the text format a Prometheus server asks for.
func scrapeMetrics(t testing.TB, admin string) []byte {
	t.Helper()
	status, body := adminGet(t, admin, "/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	return body
}

// metricFamilies is a parsed scrape, by family name.
type metricFamilies map[string]*dto.MetricFamily

func parseMetrics(t testing.TB, text []byte) metricFamilies {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics is not the text format: %v", err)
	}
	return fams
}

// value sums the series of family name whose labels include the given
// name/value pairs: counter, gauge or untyped value, histogram sample count.
// A family that is absent fails the test.
func (f metricFamilies) value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := f[name]
	if !ok {
		t.Fatalf("family %s not exported", name)
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1]
		}) {
			return false
		}
	}
	return true
}

// driveEveryResult sends traffic through every route and makes every cache
// result happen once at least, checking each one's Cache-Status.
func driveEveryResult(t *testing.T, h *harness) {
	t.Helper()
	targets := h.targets() // before the clock moves: heights depend on it
	cross := h.sim.CrossHashes("TRADE_ZONE", 4)
	expect := func(r resp, what, status string) {
		t.Helper()
		if r.status != 200 || !strings.Contains(r.header["Cache-Status"], status) {
			t.Fatalf("%s: %d, Cache-Status %q, want %q (%s)", what, r.status, r.header["Cache-Status"], status, r.body)
		}
	}
	// miss, then hit, on every route (transaction-fills: its hash came
	// with transaction-multi, so both are hits).
	for _, name := range route.Names() {
		h.get(targets[name])
		expect(h.get(targets[name]), name+" again", "explorer-edge; hit; ttl=")
	}

	// stale: the head block list (1 s fresh) 1.5 s later, within the
	// head's 1 s stale_while_revalidate; its refresh runs in the background.
	h.clock.Advance(1500 * time.Millisecond)
	blocks := targets["block-list"]
	expect(h.get(blocks), "stale block-list", "detail=stale-while-revalidate")
	testkit.WaitFor(t, "the background refresh", func() bool {
		return h.cache.GetString(blocks).StateAt(h.clock.Now().UnixNano()) == cache.Fresh
	})

	// stale_error: the holder list (30 s fresh, 30 s stale-while-revalidate)
	// two minutes later is past both but within stale_if_error, and the
	// upstream fails.
	h.clock.Advance(2 * time.Minute)
	h.sim.SetFaults(sim.Faults{HTTP500: 1})
	expect(h.get(targets["position-list"]), "position-list with a failing upstream", "detail=stale-if-error")
	h.sim.ClearFaults()

	// collapsed: followers of a fetch still under way at the upstream,
	// held there until all have joined it.
	gate := h.holdUpstream()
	defer gate.release()
	slow := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"
	var wg sync.WaitGroup
	answers := make([]resp, 5)
	wg.Add(1)
	go func() { defer wg.Done(); answers[0] = h.get(slow) }()
	gate.waitArrived(t, 1)
	for i := 1; i < len(answers); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = h.get(slow) }()
	}
	waitLoading(t, len(answers))
	gate.release()
	wg.Wait()
	expect(answers[0], "collapse leader", "fwd=miss; stored")
	for _, r := range answers[1:] {
		expect(r, "collapse follower", "fwd=miss; collapsed")
	}

	// partial: one hash cached, one not.
	partial := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + cross[0] + "," + cross[3]
	expect(h.get(partial), "transaction-multi half cached", "fwd=partial")
}

// TestMetricsPassPromtool scrapes /metrics after every route and every cache
// result and runs `promtool check metrics` on it (docs/operations.md, Metrics).
func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	h := newHarness(t)
	admin := h.serveAdmin()
	driveEveryResult(t, h)
	text := scrapeMetrics(t, admin)

	fams := parseMetrics(t, text)
	for _, route := range route.Names() {
		if fams.value(t, "explorer_edge_requests_total", "route", route, "code", "0") == 0 {
			t.Errorf("requests_total{route=%q,code=\"0\"} did not move", route)
		}
	}
	for _, result := range []string{"hit", "miss", "stale", "stale_error", "collapsed", "partial"} {
		if fams.value(t, "explorer_edge_cache_results_total", "result", result) == 0 {
			t.Errorf("cache_results_total{result=%q} did not move", result)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// designFamilies are the families docs/operations.md, Metrics promises.
var designFamilies = []string{
	"explorer_edge_requests_total", "explorer_edge_request_duration_seconds", "explorer_edge_cache_results_total",
	"explorer_edge_cache_bytes", "explorer_edge_cache_entries", "explorer_edge_cache_evictions_total",
	"explorer_edge_upstream_requests_total", "explorer_edge_upstream_duration_seconds",
	"explorer_edge_upstream_budget_tokens", "explorer_edge_upstream_throttled_total", "explorer_edge_breaker_state",
	"explorer_edge_client_rejections_total",
}

// TestMetricsMoveWithTraffic checks that every promised family (docs/operations.md, Metrics) is exported
// and that each moves as the traffic says.
func TestMetricsMoveWithTraffic(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: "metrics-web-key", SecretKey: "metrics-web-secret", Passphrase: "metrics-web-pass"}}
	})
	admin := h.serveAdmin()
	signed := func(target, secret string) []string {
		ts := signer.Timestamp(time.Now())
		return []string{signer.HeaderKey, "metrics-web-key", signer.HeaderPassphrase, "metrics-web-pass",
			signer.HeaderTimestamp, ts, signer.HeaderSign, signer.Sign(secret, ts, "GET", target)}
	}
	get := func(target string) resp { return h.get(target, signed(target, "metrics-web-secret")...) }
	scrape := func() metricFamilies { return parseMetrics(t, scrapeMetrics(t, admin)) }
	// moved fails unless each (family, labels) differs between a and b by want.
	type delta struct {
		name   string
		labels []string
		want   float64 // 0: any rise
	}
	moved := func(step string, a, b metricFamilies, ds ...delta) {
		t.Helper()
		for _, d := range ds {
			got := b.value(t, d.name, d.labels...) - a.value(t, d.name, d.labels...)
			if (d.want == 0 && got <= 0) || (d.want != 0 && got != d.want) {
				t.Errorf("%s: %s%v moved by %v, want %v (0 = any rise)", step, d.name, d.labels, got, d.want)
			}
		}
	}

	m0 := scrape()
	for _, name := range designFamilies {
		if _, ok := m0[name]; !ok {
			t.Errorf("family %s missing before any traffic", name)
		}
	}
	// A chain no one asked a block list of has no finalized height: no
	// series, not a height of 0.
	if _, ok := m0["explorer_edge_chain_final_height"]; ok {
		t.Fatal("chain_final_height exported before any block list")
	}

	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	if r := get(blocks); r.status != 200 || !strings.Contains(r.header["Cache-Status"], "fwd=miss") {
		t.Fatalf("miss: %d %q %s", r.status, r.header["Cache-Status"], r.body)
	}
	m1 := scrape()
	moved("miss", m0, m1,
		delta{"explorer_edge_cache_results_total", []string{"route", "block-list", "result", "miss"}, 1},
		delta{"explorer_edge_upstream_requests_total", []string{"route", "block-list", "outcome", "ok"}, 1},
		delta{"explorer_edge_upstream_duration_seconds", []string{"route", "block-list"}, 1},
		delta{"explorer_edge_requests_total", []string{"route", "block-list", "code", "0"}, 1},
		delta{"explorer_edge_request_duration_seconds", []string{"route", "block-list"}, 1},
		delta{"explorer_edge_cache_entries", nil, 0},
		delta{"explorer_edge_cache_bytes", nil, 0},
	)
	if got, want := m1.value(t, "explorer_edge_chain_final_height", "chain", "CHAINX"), float64(h.sim.FinalizedHeight("CHAINX")); got != want {
		t.Errorf("chain_final_height{chain=CHAINX} = %v, want the sim's %v", got, want)
	}

	if r := get(blocks); !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") {
		t.Fatalf("hit: %q", r.header["Cache-Status"])
	}
	m2 := scrape()
	moved("hit", m1, m2,
		delta{"explorer_edge_cache_results_total", []string{"route", "block-list", "result", "hit"}, 1},
		delta{"explorer_edge_requests_total", []string{"route", "block-list", "code", "0"}, 1},
	)
	if a, b := m1.value(t, "explorer_edge_upstream_requests_total"), m2.value(t, "explorer_edge_upstream_requests_total"); a != b {
		t.Errorf("a hit counted %v upstream calls", b-a)
	}

	bad := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=500"
	if r := get(bad); r.code() != "50036" {
		t.Fatalf("bad limit: %d %s", r.status, r.body)
	}
	if r := h.get(blocks, signed(blocks, "not-the-secret")...); r.code() != "50113" {
		t.Fatalf("bad signature: %d %s", r.status, r.body)
	}
	m3 := scrape()
	moved("bad parameter and bad signature", m2, m3,
		delta{"explorer_edge_requests_total", []string{"route", "block-list", "code", "50036"}, 1},
		delta{"explorer_edge_requests_total", []string{"route", "block-list", "code", "50113"}, 1},
		delta{"explorer_edge_client_rejections_total", []string{"reason", "auth"}, 1},
	)

	for _, name := range []string{"explorer_edge_upstream_budget_tokens", "explorer_edge_breaker_state",
		"explorer_edge_upstream_throttled_total", "explorer_edge_cache_evictions_total"} {
		m3.value(t, name) // present
	}
	if tokens := m3.value(t, "explorer_edge_upstream_budget_tokens"); tokens <= 0 || tokens > float64(h.cfg.Upstream.Burst) {
		t.Errorf("upstream_budget_tokens = %v, want within (0, %d]", tokens, h.cfg.Upstream.Burst)
	}
	if st := m3.value(t, "explorer_edge_breaker_state"); st != 0 {
		t.Errorf("breaker_state = %v with a healthy upstream, want 0", st)
	}
}

// TestMetricsSeriesBounded: a stranger's input never makes a new series.
func TestMetricsSeriesBounded(t *testing.T) {
	h := newHarness(t)
	admin := h.serveAdmin()
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx") // every family in use
	before := parseMetrics(t, scrapeMetrics(t, admin))
	for i := range 20 {
		junk := fmt.Sprintf("x%d", i)
		h.get("/api/v5/chainx/" + junk)
		h.get("/api/v5/chainx/block/block-list?chainShortName=" + junk + "&" + junk + "=1")
		h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit="+junk, "SVC-ACCESS-KEY", junk, "X-Forwarded-For", junk)
		h.do("DELETE", "/"+junk)
	}
	after := parseMetrics(t, scrapeMetrics(t, admin))
	// Go runtime families may grow (GC pauses, new size classes); the
	// edge's own may not.
	count := func(f metricFamilies) int {
		n := 0
		for name, mf := range f {
			if strings.HasPrefix(name, "explorer_edge_") {
				n += len(mf.GetMetric())
			}
		}
		return n
	}
	if count(after) != count(before) {
		t.Fatalf("junk requests made %d new series", count(after)-count(before))
	}
	if after.value(t, "explorer_edge_requests_total", "route", "unknown", "code", "404") != 40 {
		t.Errorf("unknown paths not counted under route=\"unknown\"")
	}
}

// TestReadyz: not ready while draining, or while the breaker is open and the
// cache holds nothing to serve; /healthz stays ok throughout.
func TestReadyz(t *testing.T) {
	// withBlockPagesOff: each limit asked opens the breaker by its own
	// call, not answered from a page of 100 held.
	failing := func(c *config.Config, s *sim.Config) {
		c.Upstream.BreakerFailures = 2
		c.Upstream.Retries = 0
		c.Upstream.BreakerOpenFor = time.Minute
	}
	check := func(t *testing.T, admin string, wantStatus int, wantBody string) {
		t.Helper()
		status, body := adminGet(t, admin, "/readyz")
		if status != wantStatus || !strings.Contains(string(body), wantBody) {
			t.Fatalf("/readyz: %d %q, want %d %q", status, body, wantStatus, wantBody)
		}
		if status, _ := adminGet(t, admin, "/healthz"); status != 200 {
			t.Fatalf("/healthz: %d, want 200 whatever the upstream does", status)
		}
	}
	openBreaker := func(t *testing.T, h *harness) {
		t.Helper()
		h.sim.SetFaults(sim.Faults{HTTP500: 1})
		for i := range 2 {
			if r := h.get(fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", 30+i)); r.status != 502 {
				t.Fatalf("failing upstream: %d %s", r.status, r.body)
			}
		}
	}

	t.Run("draining", func(t *testing.T) {
		h := newHarness(t)
		admin := h.serveAdmin()
		check(t, admin, 200, "ok")
		h.p.SetDraining(true)
		check(t, admin, 503, "draining")
		h.p.SetDraining(false)
		check(t, admin, 200, "ok")
	})
	t.Run("breaker open, cache empty", func(t *testing.T) {
		h := newHarness(t, failing, withBlockPagesOff)
		admin := h.serveAdmin()
		check(t, admin, 200, "ok")
		openBreaker(t, h)
		check(t, admin, 503, "breaker open")
	})
	t.Run("breaker open, cache usable", func(t *testing.T) {
		h := newHarness(t, failing, withBlockPagesOff)
		admin := h.serveAdmin()
		if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx"); r.status != 200 {
			t.Fatalf("fill: %d", r.status)
		}
		openBreaker(t, h)
		if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=40"); r.code() != "50001" {
			t.Fatalf("breaker not open: %d %s", r.status, r.body)
		}
		check(t, admin, 200, "ok")
	})
}
