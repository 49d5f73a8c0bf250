package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"explorer-edge/internal/testkit"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// These tests run the whole binary's run() in-process against explorer-sim
// and send real signals to the test process: run catches SIGHUP and
// SIGTERM from before it serves, and every test waits for /healthz before
// signalling. They must not run in parallel (a signal reaches every run).

// freeAddr is a loopback address nothing listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startSim serves explorer-sim (auth on, demo account) on a free port and
// records the SVC-ACCESS-SIGN of every request it receives.
func startSim(t testing.TB, f sim.Faults) (*sim.Server, string, func() []string) {
	t.Helper()
	s := sim.New(sim.Config{Auth: true, Credentials: sim.DemoCredentials(), Faults: f})
	var mu sync.Mutex
	var signs []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		signs = append(signs, r.Header.Get(signer.HeaderSign))
		mu.Unlock()
		s.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { s.Close(); hs.Close() })
	return s, "http://" + ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(signs)
	}
}

// edgeFile is a configuration file for run.
type edgeFile struct {
	listen, admin     string
	upstream          string // base_url
	key, secret, pass string // upstream credentials
	more              string // further upstream keys, indented by two spaces
	rest              string // further top-level YAML
}

func (f edgeFile) yaml() string {
	return fmt.Sprintf(`listen: %q
admin_listen: %q
shutdown_timeout: 10s
upstream:
  base_url: %q
  api_key: %q
  secret_key: %q
  passphrase: %q
  rate: 1000
  burst: 1000
  retry_backoff: 5ms
%s
%s
`, f.listen, f.admin, f.upstream, f.key, f.secret, f.pass, f.more, f.rest)
}

// edge is run() serving a config file, as main runs it.
type edge struct {
	t    *testing.T
	file edgeFile
	path string
	logs *testkit.LogBuffer
	stop chan struct{}
	once sync.Once
	done chan struct{} // closed when run has returned
	err  error         // what run returned
}

// startEdge writes f (listen addresses filled in) and runs run on it until
// the test ends; it returns once /healthz answers.
func startEdge(t *testing.T, f edgeFile) *edge {
	t.Helper()
	f.listen, f.admin = freeAddr(t), freeAddr(t)
	e := &edge{t: t, file: f, path: filepath.Join(t.TempDir(), "config.yaml"), logs: &testkit.LogBuffer{},
		stop: make(chan struct{}), done: make(chan struct{})}
	e.write(f.yaml())
	cfg, err := loadConfig(e.path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		e.err = run(cfg, e.path, e.logs, e.stop)
		close(e.done)
	}()
	t.Cleanup(func() {
		e.once.Do(func() { close(e.stop) })
		select {
		case <-e.done:
		case <-time.After(15 * time.Second):
			t.Error("run did not return after stop")
		}
	})
	testkit.WaitFor(t, "/healthz", func() bool {
		select {
		case <-e.done:
			t.Fatalf("run returned early: %v\n%s", e.err, e.logs)
		default:
		}
		res, err := http.Get("http://" + f.admin + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	return e
}

func (e *edge) write(text string) {
	e.t.Helper()
	if err := os.WriteFile(e.path, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// signal sends sig to this process, where run catches it.
func (e *edge) signal(sig syscall.Signal) {
	e.t.Helper()
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		e.t.Fatal(err)
	}
}

// get is GET target on the public listener: status, envelope code, headers.
func (e *edge) get(target string, headers ...string) (int, string, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+e.file.listen+target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", target, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var env struct {
		Code string `json:"code"`
	}
	json.Unmarshal(body, &env)
	return res.StatusCode, env.Code, res.Header
}

// metric sums the series of family name with the given label pairs.
func (e *edge) metric(name string, labels ...string) float64 {
	e.t.Helper()
	res, err := http.Get("http://" + e.file.admin + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	mf, ok := fams[name]
	if !ok {
		e.t.Fatalf("no family %s", name)
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			})
		}
		if match {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// reloads waits until config_reloads_total{result} reaches n.
func (e *edge) reloads(result string, n float64) {
	e.t.Helper()
	testkit.WaitFor(e.t, fmt.Sprintf("config_reloads_total{result=%q} = %v", result, n), func() bool {
		return e.metric("explorer_edge_config_reloads_total", "result", result) >= n
	})
	if got := e.metric("explorer_edge_config_reloads_total", "result", result); got != n {
		e.t.Fatalf("config_reloads_total{result=%q} = %v, want %v", result, got, n)
	}
}

func demoEdge(upstream string) edgeFile {
	return edgeFile{upstream: upstream, key: sim.DemoAPIKey, secret: sim.DemoSecretKey, pass: sim.DemoPassphrase}
}

const blocks = "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"

func TestSIGHUPReloadsCredentials(t *testing.T) {
	s, url, _ := startSim(t, sim.Faults{})
	wrong := edgeFile{upstream: url, key: "not-the-key", secret: "00000000000000000000000000000000", pass: "not-the-passphrase"}
	e := startEdge(t, wrong)
	if status, code, _ := e.get(blocks); status != 502 || code != "50026" {
		t.Fatalf("wrong upstream credentials: %d %s, want 502 50026 (the edge's credentials refused; the sim's 401 is never passed on)", status, code)
	}
	right := demoEdge(url)
	right.listen, right.admin = e.file.listen, e.file.admin
	e.write(right.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("after reload: %d %s", status, code)
	}
	if n := s.Stats().APIKeys[sim.DemoAPIKey]; n != 1 {
		t.Fatalf("sim saw the reloaded key %d times, want 1 (keys %v)", n, s.Stats().APIKeys)
	}
	if !strings.Contains(e.logs.String(), `"msg":"config reloaded"`) {
		t.Fatalf("no reload logged:\n%s", e.logs)
	}
}

func TestSIGHUPReloadsTTLsAndLogLevel(t *testing.T) {
	s, url, _ := startSim(t, sim.Faults{})
	tokens := s.TokenContracts("CHAINX")
	holders := func(i int) string {
		return "/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + tokens[i]
	}
	maxAge := func(h http.Header) string {
		v, _, _ := strings.Cut(strings.TrimPrefix(h.Get("Cache-Control"), "public, max-age="), ",")
		return v
	}
	f := demoEdge(url)
	e := startEdge(t, f)
	if _, _, h := e.get(holders(0)); maxAge(h) != "30" && maxAge(h) != "29" {
		t.Fatalf("default position-list TTL: Cache-Control %q, want max-age 29 or 30", h.Get("Cache-Control"))
	}
	f.listen, f.admin = e.file.listen, e.file.admin
	f.rest = "cache:\n  ttl:\n    position-list: {volatile: 5s}\nlog: {level: warn}\n"
	e.write(f.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	calls := e.logs.Count(t, "upstream call")
	if _, _, h := e.get(holders(1)); maxAge(h) != "5" && maxAge(h) != "4" {
		t.Fatalf("reloaded position-list TTL: Cache-Control %q on a fresh fill, want max-age 4 or 5", h.Get("Cache-Control"))
	}
	// log.level reloads too: at warn, a good upstream call (info) is not logged.
	if calls == 0 || e.logs.Count(t, "upstream call") != calls {
		t.Fatalf("upstream call lines %d before the reload to warn, %d after", calls, e.logs.Count(t, "upstream call"))
	}
}

func TestSIGHUPRefusesBrokenConfig(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	good := demoEdge(url)
	e := startEdge(t, good)
	good.listen, good.admin = e.file.listen, e.file.admin
	// Every broken file also carries wrong credentials: if any part of it
	// were applied, the next request would answer 502 (credentials refused).
	broken := good
	broken.key, broken.secret, broken.pass = "other-key", "11111111111111111111111111111111", "other-passphrase"
	invalidValue := broken
	invalidValue.more = "  timeout: -1s"
	unknownKey := broken
	unknownKey.rest = "no_such_key: 1"
	chains := broken
	chains.rest = `chains: ["CHAINX"]`
	breaker := broken
	breaker.more = "  breaker_failures: 9"
	format := broken
	format.rest = "log: {format: text}"
	server := broken
	server.rest = "server: {max_conns: 5}"
	cases := []struct{ name, text string }{
		{"invalid YAML", broken.yaml() + "\nupstream: [\n"},
		{"invalid value", invalidValue.yaml()},
		{"unknown key", unknownKey.yaml()},
		{"chains (restart only)", chains.yaml()},
		{"upstream breaker (restart only)", breaker.yaml()},
		{"log format (restart only)", format.yaml()},
		{"server limits (restart only)", server.yaml()},
	}
	for i, c := range cases {
		e.write(c.text)
		e.signal(syscall.SIGHUP)
		e.reloads("error", float64(i+1))
		if status, code, _ := e.get(blocks + fmt.Sprintf("&page=%d", i+1)); status != 200 || code != "0" {
			t.Fatalf("%s: the edge answers %d %s after a refused reload", c.name, status, code)
		}
	}
	if n := e.metric("explorer_edge_config_reloads_total", "result", "ok"); n != 0 {
		t.Fatalf("%v reloads counted ok", n)
	}
	refused := 0
	for _, l := range e.logs.Lines(t, "") {
		if msg, _ := l["msg"].(string); strings.Contains(msg, "refused") && l["level"] == "ERROR" && l["err"] != nil {
			refused++
		}
	}
	if refused != len(cases) {
		t.Fatalf("%d refusals logged, want %d:\n%s", refused, len(cases), e.logs)
	}
}

func TestWatchConfigReloadsOnWrite(t *testing.T) {
	s, url, _ := startSim(t, sim.Faults{})
	f := edgeFile{upstream: url, key: "not-the-key", secret: "00000000000000000000000000000000", pass: "not-the-passphrase",
		rest: "watch_config: true"}
	e := startEdge(t, f)
	if status, _, _ := e.get(blocks); status != 502 {
		t.Fatalf("wrong credentials: %d, want 502 (the edge's credentials refused)", status)
	}
	right := demoEdge(url)
	right.listen, right.admin, right.rest = e.file.listen, e.file.admin, f.rest
	e.write(right.yaml()) // truncate, then write: one reload once the file settles
	e.reloads("ok", 1)
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("after the file changed: %d %s", status, code)
	}
	if n := e.metric("explorer_edge_config_reloads_total", "result", "error"); n != 0 {
		t.Fatalf("watch reloaded a half-written file (%v refused reloads)", n)
	}
	if s.Stats().APIKeys[sim.DemoAPIKey] != 1 {
		t.Fatalf("sim keys %v", s.Stats().APIKeys)
	}
}

// TestSIGTERMDrainsInFlightRequests: requests in flight when SIGTERM arrives
// all get their answers, /readyz says draining meanwhile, and run returns nil.
func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	// The requests are held at the upstream until /readyz has said
	// draining (with a 1 s delay a busy machine could see them answered,
	// and the drain over, first).
	s := startHeldSim(t)
	defer s.release()
	f := demoEdge(s.url)
	// Eight distinct limits of the newest page, eight upstream calls to
	// hold: without block pages (cache.block_pages), which would answer
	// all eight from one page of 100.
	f.rest = "log: {access_sample: 1}\ncache: {block_pages: false}"
	e := startEdge(t, f)
	const n = 8
	s.holdWhere(func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/block-list") && strings.HasPrefix(r.URL.Query().Get("limit"), "4")
	})
	type result struct {
		status int
		code   string
		err    error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			res, err := http.Get(fmt.Sprintf("http://%s/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", e.file.listen, 41+i))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer res.Body.Close()
			var env struct {
				Code string `json:"code"`
			}
			err = json.NewDecoder(res.Body).Decode(&env)
			results <- result{res.StatusCode, env.Code, err}
		}()
	}
	// Every request is inside the edge, waiting on the upstream.
	s.waitArrived(t, n)
	e.signal(syscall.SIGTERM)
	testkit.WaitFor(t, "/readyz to say draining", func() bool {
		res, err := http.Get("http://" + e.file.admin + "/readyz")
		if err != nil {
			t.Fatalf("admin listener gone while requests are in flight: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 503 && strings.Contains(string(b), "draining")
	})
	s.release()
	for range n {
		r := <-results
		if r.err != nil || r.status != 200 || r.code != "0" {
			t.Errorf("in-flight request: %d %q %v", r.status, r.code, r.err)
		}
	}
	select {
	case <-e.done:
		if e.err != nil {
			t.Fatalf("run: %v", e.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the drain")
	}
	// Each handler writes its access line before it returns, and run may
	// return only once every handler has: all n lines are there already.
	answered := 0
	for _, l := range e.logs.Lines(t, "") {
		if l["msg"] == "access" && l["status"] == 200.0 {
			answered++
		}
	}
	if answered != n {
		t.Errorf("run returned with %d of %d in-flight requests answered", answered, n)
	}
	if _, err := net.DialTimeout("tcp", e.file.listen, time.Second); err == nil {
		t.Error("the public listener still accepts after the drain")
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"draining"`) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("drain not logged:\n%s", logs)
	}
}

// TestLogsHoldNoSecrets runs signed client traffic, upstream failures and
// reloads at debug level with every request in the access log, then checks
// that the log is JSON lines, has one line per upstream call, and holds no
// secret: neither side's secret keys or passphrases, nor any signature.
func TestLogsHoldNoSecrets(t *testing.T) {
	const (
		clientKey    = "logs-web-key"
		clientSecret = "7C1E5EC7C1E5EC7C1E5EC7C1E5EC7C1E"
		clientPass   = "logs-web-passphrase"
	)
	s, url, upstreamSigns := startSim(t, sim.Faults{})
	f := demoEdge(url)
	f.more = "  retries: 1\n  breaker_failures: 100"
	clients := func(rate int) string {
		return fmt.Sprintf(`auth:
  mode: signed
  clients:
    - {name: web, api_key: %q, secret_key: %q, passphrase: %q, rate: %d, burst: 1000}
log:
  level: debug
  access_sample: 1
`, clientKey, clientSecret, clientPass, rate)
	}
	f.rest = clients(1000)
	e := startEdge(t, f)
	f.listen, f.admin = e.file.listen, e.file.admin

	var sent []string // every SVC-ACCESS-SIGN and passphrase the test sent
	requests := 0
	get := func(target, secret, pass string) int {
		ts := signer.Timestamp(time.Now())
		sig := signer.Sign(secret, ts, "GET", target)
		sent = append(sent, sig, pass)
		requests++
		status, _, _ := e.get(target, signer.HeaderKey, clientKey, signer.HeaderPassphrase, pass,
			signer.HeaderTimestamp, ts, signer.HeaderSign, sig)
		return status
	}
	cross := s.CrossHashes("TRADE_ZONE", 6)
	multi := func(i int) string {
		return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + cross[i] + "," + cross[i+1]
	}
	list := func(limit int) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=%d", limit)
	}
	for _, target := range []string{list(1), multi(0), list(1), multi(0)} { // misses, then hits
		if status := get(target, clientSecret, clientPass); status != 200 {
			t.Fatalf("%s: %d", target, status)
		}
	}
	for _, c := range []struct{ secret, pass string }{{"wrong-secret-0000", clientPass}, {clientSecret, "wrong-passphrase"}} {
		if status := get(list(2), c.secret, c.pass); status != 401 {
			t.Fatalf("bad credentials: %d", status)
		}
	}
	for i, fault := range []sim.Faults{{HTTP500: 1}, {Malformed: 1}, {Envelope: 1, EnvelopeCode: "50030"}} {
		s.SetFaults(fault)
		get(list(10+i), clientSecret, clientPass)
		get(multi(2+i), clientSecret, clientPass)
	}
	s.ClearFaults()

	f.rest = clients(500)
	e.write(f.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	e.write(strings.Replace(f.yaml(), "level: debug", "level: nope", 1))
	e.signal(syscall.SIGHUP)
	e.reloads("error", 1)
	if status := get(list(3), clientSecret, clientPass); status != 200 {
		t.Fatalf("after reloads: %d", status)
	}

	lines := e.logs.Lines(t, "") // fails on a line that is not JSON
	for _, l := range lines {
		if l["time"] == nil || l["level"] == nil || l["msg"] == nil {
			t.Errorf("log line without time, level or msg: %v", l)
		}
	}
	secrets := append(append(sent, upstreamSigns()...), sim.DemoSecretKey, sim.DemoPassphrase, clientSecret, clientPass)
	slices.Sort(secrets)
	secrets = slices.Compact(secrets)
	logs := e.logs.String()
	for _, secret := range secrets {
		if secret != "" && strings.Contains(logs, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}

	calls := s.Stats().RequestsTotal
	if got := e.logs.Count(t, "upstream call"); int64(got) != calls {
		t.Errorf("%d upstream call lines for %d calls the sim received", got, calls)
	}
	var sentOutcomes float64
	for _, o := range []string{"ok", "error_envelope", "credentials", "not_found", "status_5xx", "status_429", "timeout", "connection", "malformed", "too_large"} { // every outcome of a call sent (50030 "no permission" is credentials)
		sentOutcomes += e.metric("explorer_edge_upstream_requests_total", "outcome", o)
	}
	if int64(sentOutcomes) != calls {
		t.Errorf("upstream_requests_total counts %v calls, the sim received %d", sentOutcomes, calls)
	}
	if got := e.logs.Count(t, "access"); got != requests {
		t.Errorf("%d access lines for %d requests", got, requests)
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}
