package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
)

// A frontend's fetch() carries the headers of its tracing (X-Request-Id,
// W3C Trace Context): each makes the call non-simple, so the browser asks a
// preflight first and sends the GET only if the preflight allows every one.
const (
	pageRequestID   = "abc"
	pageTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// warmFinal warms h with a block list (the finalized height) and returns
// the transaction list of a done block below it: a final answer.
func warmFinal(h *harness) string {
	h.t.Helper()
	if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx"); r.status != 200 {
		h.t.Fatalf("block list: %d %s", r.status, r.body)
	}
	final := h.p.truth.Final("CHAINX")
	if final < 10 {
		h.t.Fatalf("finalized height %d", final)
	}
	return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", final-5)
}

// TestCORSPreflightAllowsFrontendHeaders: with cors.allow_origins set and
// the rest default, a preflight asking for X-Request-Id, traceparent and
// tracestate is allowed them (beside the signed client's headers and
// If-None-Match), and every answer to the origin exposes X-Request-Id and
// the RateLimit fields to the page's script.
func TestCORSPreflightAllowsFrontendHeaders(t *testing.T) {
	const app = "https://app.example.com"
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=4"
	h := newHarness(t, withCORS(app))
	r := h.do(fasthttp.MethodOptions, target, "Origin", app, "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "traceparent,tracestate,x-request-id")
	if r.status != 204 || r.header["Access-Control-Allow-Origin"] != app {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	allowed := map[string]bool{}
	for _, name := range strings.Split(r.header["Access-Control-Allow-Headers"], ",") {
		allowed[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, want := range []string{"x-request-id", "traceparent", "tracestate",
		"svc-access-key", "svc-access-sign", "svc-access-timestamp", "svc-access-passphrase", "if-none-match"} {
		if !allowed[want] {
			t.Errorf("Access-Control-Allow-Headers %q does not allow %s", r.header["Access-Control-Allow-Headers"], want)
		}
	}
	for name, r := range map[string]resp{
		"miss":  h.get(target, "Origin", app, "X-Request-Id", pageRequestID),
		"hit":   h.get(target, "Origin", app, "X-Request-Id", pageRequestID),
		"error": h.get("/api/v5/chainx/block/block-list?chainShortName=nochain", "Origin", app, "X-Request-Id", pageRequestID),
	} {
		exposed := map[string]bool{}
		for _, name := range strings.Split(r.header["Access-Control-Expose-Headers"], ",") {
			exposed[strings.ToLower(strings.TrimSpace(name))] = true
		}
		for _, want := range []string{"cache-status", "age", "etag", "retry-after", "x-request-id", "ratelimit", "ratelimit-policy"} {
			if !exposed[want] {
				t.Errorf("%s: Access-Control-Expose-Headers %q does not expose %s", name, r.header["Access-Control-Expose-Headers"], want)
			}
		}
		if r.header["X-Request-Id"] != pageRequestID {
			t.Errorf("%s: X-Request-Id %q", name, r.header["X-Request-Id"])
		}
	}
}

// TestFinalAnswersAreImmutable: a final answer (settled chain data) says
// immutable in its Cache-Control, on the miss and on the hit; a head
// answer does not. The hit still allocates nothing.
func TestFinalAnswersAreImmutable(t *testing.T) {
	h := newHarness(t)
	head := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=4"
	final := warmFinal(h)
	for i, r := range []resp{h.get(final), h.get(final)} {
		cc := r.header["Cache-Control"]
		if r.status != 200 || !strings.HasPrefix(cc, "public, max-age=") || !strings.HasSuffix(cc, ", immutable") {
			t.Errorf("final answer %d: %d, Cache-Control %q, want public, max-age=..., immutable", i, r.status, cc)
		}
	}
	if e := h.cache.GetString(cacheKey(t, h.p, final)); e == nil || e.Class != cache.Final {
		t.Fatalf("%s is not cached as final", final)
	}
	if r := h.get(head); strings.Contains(r.header["Cache-Control"], "immutable") {
		t.Errorf("head answer: Cache-Control %q", r.header["Cache-Control"])
	}
	if testkit.Race {
		return // allocation counts are meaningless under -race
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(final)
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.Header.Set("Accept-Encoding", "gzip")
	for range 1000 {
		ctx.Response.Reset()
		h.p.Handle(&ctx)
	}
	allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset()
		h.p.Handle(&ctx)
	})
	if cc := string(ctx.Response.Header.Peek("Cache-Control")); allocs != 0 || !strings.HasSuffix(cc, ", immutable") {
		t.Fatalf("final hit: %v allocations, Cache-Control %q", allocs, cc)
	}
}

// chromiumFlags run Debian's Chromium headless on a machine with no
// network beyond loopback, as root, with a profile of its own.
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions"}

// browserPage is a page whose script asks edge for each target with the
// given headers and writes, as the body's text, one JSON line per call
// prefixed with RESULT: its status, the headers a cross-origin script can
// read, or the error fetch() threw ("Failed to fetch" when CORS refused).
const browserPage = `<!doctype html><html><head><title>edge from another origin</title></head>
<body>pending<script>
const calls = %s;
Promise.all(calls.map(c => fetch(c.url, {headers: c.headers}).then(async r => {
  const body = await r.json();
  return {name: c.name, status: r.status, code: body.code, requestId: r.headers.get('X-Request-Id'),
    cacheStatus: r.headers.get('Cache-Status'), cacheControl: r.headers.get('Cache-Control')};
}).catch(e => ({name: c.name, error: String(e)})))).then(results => {
  document.body.textContent = results.map(r => 'RESULT ' + JSON.stringify(r)).join('\n');
});
</script></body></html>`

type browserResult struct {
	Name         string `json:"name"`
	Status       int    `json:"status"`
	Code         string `json:"code"`
	RequestID    string `json:"requestId"`
	CacheStatus  string `json:"cacheStatus"`
	CacheControl string `json:"cacheControl"`
	Error        string `json:"error"`
}

var resultLine = regexp.MustCompile(`RESULT (\{[^\n<]*\})`)

// TestBrowserCallsEdgeFromAnotherOrigin: Chromium, headless, loads a page
// from one origin (a second local server) whose script calls the edge
// (explorer-sim behind it) on another, with cors.allow_origins naming the
// page's origin and every other CORS key default. The call carrying
// X-Request-Id and traceparent passes its preflight and reads the edge's
// X-Request-Id (its own, echoed) and Cache-Status; a final answer says
// immutable; a call with a header the edge does not allow fails as the
// browser fails it, so the check is the browser's own.
func TestBrowserCallsEdgeFromAnotherOrigin(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("REQUIRE_CHROMIUM") != "" { // .ci/run installed it
			t.Fatal("REQUIRE_CHROMIUM is set and chromium is not installed")
		}
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run installs it): the browser check is skipped")
	}
	var pageHTML atomic.Pointer[string] // written once the edge's address is known
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if p := pageHTML.Load(); p != nil {
			fmt.Fprint(w, *p)
		}
	}))
	defer page.Close()
	origin := page.URL // http://127.0.0.1:port: another port, another origin
	h := newHarness(t, withCORS(origin))
	final := warmFinal(h)
	edge := "http://" + h.addr
	traced := map[string]string{"X-Request-Id": pageRequestID, "traceparent": pageTraceparent}
	calls := []map[string]any{
		{"name": "traced", "url": edge + "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=3", "headers": traced},
		{"name": "final", "url": edge + final, "headers": traced},
		{"name": "plain", "url": edge + "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=2", "headers": map[string]string{}},
		{"name": "not allowed", "url": edge + "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1",
			"headers": map[string]string{"X-Not-Allowed": "1"}},
	}
	js, _ := json.Marshal(calls)
	html := fmt.Sprintf(browserPage, js)
	pageHTML.Store(&html)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(append([]string{}, chromiumFlags...), "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=10000", "--dump-dom", page.URL+"/")
	cmd := exec.CommandContext(ctx, chromium, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	got := map[string]browserResult{}
	for _, m := range resultLine.FindAllStringSubmatch(string(out), -1) {
		var r browserResult
		if err := json.Unmarshal([]byte(m[1]), &r); err != nil {
			t.Fatalf("result %q: %v", m[1], err)
		}
		got[r.Name] = r
	}
	if len(got) != len(calls) {
		t.Fatalf("the page reported %d of %d calls; DOM:\n%s\nchromium:\n%s", len(got), len(calls), out, stderr.String())
	}
	t.Logf("results: %+v", got)
	if r := got["traced"]; r.Error != "" || r.Status != 200 || r.Code != "0" || r.RequestID != pageRequestID || !strings.HasPrefix(r.CacheStatus, "explorer-edge;") {
		t.Errorf("a call with X-Request-Id and traceparent from %s: %+v", origin, r)
	}
	if r := got["final"]; r.Error != "" || r.Status != 200 || !strings.HasSuffix(r.CacheControl, ", immutable") {
		t.Errorf("a final answer in the browser: %+v", r)
	}
	if r := got["plain"]; r.Error != "" || r.Status != 200 || r.RequestID == "" {
		t.Errorf("a call without extra headers: %+v", r)
	}
	if r := got["not allowed"]; r.Error == "" {
		t.Errorf("a header the edge does not allow passed the browser's check: %+v", r)
	}
}
