package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"explorer-edge/config"
	"explorer-edge/proxy/route"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// docs/openapi.yaml is the API's contract for the frontends that generate
// clients from it. These tests ask a live edge (in front of explorer-sim)
// every route and every documented error, and validate each request and
// each answer (status, headers, body) against the file with kin-openapi,
// so the file cannot drift from the code.
//
// kin-openapi validates OpenAPI 3.1 documents with a JSON Schema 2020-12
// validator (santhosh-tekuri/jsonschema), which openapi3filter turns on by
// itself for 3.1; the file is 3.1.0.

// contract validates exchanges with one edge against docs/openapi.yaml.
type contract struct {
	t      *testing.T
	h      *harness
	doc    *openapi3.T
	router routers.Router
	client *http.Client
}

func newContract(t *testing.T, h *harness) *contract {
	t.Helper()
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("docs/openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	doc.Servers = openapi3.Servers{{URL: "http://" + h.addr}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// No transparent gzip: the answer is validated as it came.
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &contract{t: t, h: h, doc: doc, router: router, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

// apiExchange is one request and what it must give.
type apiExchange struct {
	method  string // "" = GET
	target  string
	headers []string // pairs
	status  int
	code    string // envelope code; "" for a 304
	// specRejects: the request breaks a rule the file states (a limit,
	// a pattern, a required parameter), so its validator must refuse it
	// too. Rules that depend on configuration or the chain (known chains,
	// the 10000-row window) the file states in words only.
	specRejects bool
}

// headersPresent is the security check: a scheme is met when its header
// is there. The alternative without headers (auth.mode "off") always is.
func headersPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.RequestValidationInput.Request.Header.Get(in.SecurityScheme.Name) == "" {
		return fmt.Errorf("header %s missing", in.SecurityScheme.Name)
	}
	return nil
}

// check sends x to the edge and validates the request and the answer
// against the file. It returns the answer's headers and body.
func (c *contract) check(x apiExchange) (http.Header, []byte) {
	t := c.t
	t.Helper()
	method := x.method
	if method == "" {
		method = http.MethodGet
	}
	newReq := func() *http.Request {
		req, err := http.NewRequest(method, "http://"+c.h.addr+x.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(x.headers); i += 2 {
			req.Header.Set(x.headers[i], x.headers[i+1])
		}
		return req
	}
	res, err := c.client.Do(newReq())
	if err != nil {
		t.Fatalf("%s %s: %v", method, x.target, err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Code string `json:"code"`
	}
	plain := body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: gzip: %v", x.target, err)
		}
		if plain, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: gzip: %v", x.target, err)
		}
	}
	json.Unmarshal(plain, &env)
	if res.StatusCode != x.status || env.Code != x.code {
		t.Errorf("%s %s: %d code %q, want %d code %q: %s", method, x.target, res.StatusCode, env.Code, x.status, x.code, plain)
		return res.Header, plain
	}

	req := newReq()
	route, pathParams, err := c.router.FindRoute(req)
	switch {
	case x.status == http.StatusNotFound:
		if !errors.Is(err, routers.ErrPathNotFound) {
			t.Errorf("%s: the file has a route for a path the edge does not serve (%v)", x.target, err)
		}
		c.checkComponent("NotFound", res, plain)
		return res.Header, plain
	case x.status == http.StatusMethodNotAllowed:
		if !errors.Is(err, routers.ErrMethodNotAllowed) {
			t.Errorf("%s %s: the file has an operation for a method the edge refuses (%v)", method, x.target, err)
		}
		c.checkComponent("MethodNotAllowed", res, plain)
		return res.Header, plain
	case err != nil:
		t.Fatalf("%s %s: no route in the file: %v", method, x.target, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: headersPresent, SkipSettingDefaults: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: pathParams, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case x.specRejects && reqErr == nil:
		t.Errorf("%s: the edge answers %d/%s but the file accepts the request", x.target, x.status, x.code)
	case !x.specRejects && reqErr != nil:
		t.Errorf("%s: the edge serves it but the file refuses the request: %v", x.target, reqErr)
	}

	if res.StatusCode == http.StatusNotModified {
		// openapi3filter does not look at 304s: check the headers here.
		ref := route.Operation.Responses.Status(http.StatusNotModified)
		if ref == nil {
			t.Fatalf("%s: 304 not documented", x.target)
		}
		c.checkHeaders("304 of "+x.target, ref.Value, res.Header)
		return res.Header, plain
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(plain)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s: %d answer does not match the file: %v\nheaders %v\nbody %.300s", method, x.target, res.StatusCode, err, res.Header, plain)
	}
	return res.Header, plain
}

// checkComponent validates an answer no operation has (unknown path, other
// method) against the reusable response the file documents for it.
func (c *contract) checkComponent(name string, res *http.Response, body []byte) {
	c.t.Helper()
	ref := c.doc.Components.Responses[name]
	if ref == nil || ref.Value == nil {
		c.t.Fatalf("components.responses.%s missing", name)
	}
	c.checkHeaders(name, ref.Value, res.Header)
	mt := ref.Value.Content.Get(res.Header.Get("Content-Type"))
	if mt == nil || mt.Schema == nil {
		c.t.Fatalf("%s: no schema for %q", name, res.Header.Get("Content-Type"))
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.t.Fatalf("%s: %v: %s", name, err, body)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s: body does not match the file: %v\n%s", name, err, body)
	}
}

// checkHeaders: every required header is there, and every documented one
// that is there matches its schema.
func (c *contract) checkHeaders(what string, r *openapi3.Response, h http.Header) {
	c.t.Helper()
	for name, ref := range r.Headers {
		hdr := ref.Value
		v := h.Get(name)
		if v == "" {
			if hdr.Required {
				c.t.Errorf("%s: required header %s missing (%v)", what, name, h)
			}
			continue
		}
		var val any = v
		if s := hdr.Schema.Value; s.Type.Is("integer") {
			var n json.Number
			if err := json.Unmarshal([]byte(v), &n); err != nil {
				c.t.Errorf("%s: header %s %q is not a number", what, name, v)
				continue
			}
			f, _ := n.Float64()
			val = f
		}
		if err := hdr.Schema.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
			c.t.Errorf("%s: header %s %q does not match the file: %v", what, name, v, err)
		}
	}
}

// TestOpenAPIRoutes: every route's answer (a miss, a hit, a gzip answer,
// a 304 on its ETag) matches docs/openapi.yaml, and so do the client errors.
func TestOpenAPIRoutes(t *testing.T) {
	h := newHarness(t)
	c := newContract(t, h)
	targets := h.targets()
	// The explorer's paths; /edge/v1/events, the edge's own, is
	// TestOpenAPIEvents'.
	api := 0
	for path := range c.doc.Paths.Map() {
		if strings.HasPrefix(path, "/api/") {
			api++
		}
	}
	if len(targets) != api {
		t.Errorf("%d routes asked, the file has %d paths under /api/", len(targets), api)
	}
	for _, name := range route.Names() {
		target := targets[name]
		t.Run(name, func(t *testing.T) {
			c := *c
			c.t = t
			if c.doc.Paths.Find(strings.SplitN(target, "?", 2)[0]) == nil {
				t.Fatalf("%s is not in the file", target)
			}
			c.check(apiExchange{target: target, status: 200, code: "0"})
			hdr, _ := c.check(apiExchange{target: target, status: 200, code: "0"})
			if !strings.HasPrefix(hdr.Get("Cache-Status"), "explorer-edge; hit") {
				t.Errorf("second answer Cache-Status %q, want a hit", hdr.Get("Cache-Status"))
			}
			c.check(apiExchange{target: target, status: 304, headers: []string{"If-None-Match", hdr.Get("ETag")}})
			gz, _ := c.check(apiExchange{target: target, status: 200, code: "0", headers: []string{"Accept-Encoding", "gzip"}})
			if gz.Get("Content-Encoding") != "gzip" && name != "transaction-fills" {
				t.Errorf("Accept-Encoding gzip: Content-Encoding %q", gz.Get("Content-Encoding"))
			}
		})
	}

	block := "/api/v5/chainx/block/block-list?chainShortName=CHAINX"
	hashes := h.sim.CrossHashes("TRADE_ZONE", 21)
	for _, x := range []apiExchange{
		{target: "/api/v5/chainx/block/block-list?limit=5", status: 400, code: "50014", specRejects: true},
		{target: "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX", status: 400, code: "50014", specRejects: true},
		{target: block + "&limit=500", status: 400, code: "50036", specRejects: true},
		{target: block + "&limit=abc", status: 400, code: "50036", specRejects: true},
		{target: block + "&page=0", status: 400, code: "50036", specRejects: true},
		{target: "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=5&protocolType=token_99", status: 400, code: "50036", specRejects: true},
		{target: "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=0x1234", status: 400, code: "50036", specRejects: true},
		{target: "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=0xnothex", status: 400, code: "50036", specRejects: true},
		{target: "/api/v5/chainx/block/block-list?chainShortName=NOPE", status: 400, code: "50036"},
		{target: block + "&page=501&limit=20", status: 400, code: "50036"},
		{target: block + "&limit=2&limit=3", status: 400, code: "50036"},
		{target: "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ","), status: 200, code: "50025", specRejects: true}, // the vendor's status
		{target: block + "&pad=" + strings.Repeat("x", 5000), status: 414, code: "50036"},
		{target: "/api/v5/chainx/block/no-such-route", status: 404, code: "404"},
		{target: "/", status: 404, code: "404"},
		{method: http.MethodPost, target: block, status: 405, code: "50115"},
		{method: http.MethodDelete, target: block, status: 405, code: "50115"},
	} {
		c.check(x)
	}
}

// TestOpenAPIAuthErrors: with auth.mode "signed", each 401 code, and the
// client's 429, match the file.
func TestOpenAPIAuthErrors(t *testing.T) {
	const key, secret, pass = "openapi-key", "openapi-secret", "openapi-pass"
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: key, SecretKey: secret, Passphrase: pass, Rate: 1, Burst: 3}}
	})
	c := newContract(t, h)
	target := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=3"
	signed := func(at time.Time, k, s, p string) map[string]string {
		ts := signer.Timestamp(at)
		return map[string]string{signer.HeaderKey: k, signer.HeaderPassphrase: p, signer.HeaderTimestamp: ts, signer.HeaderSign: signer.Sign(s, ts, "GET", target)}
	}
	pairs := func(m map[string]string, drop string) []string {
		var out []string
		for k, v := range m {
			if k != drop {
				out = append(out, k, v)
			}
		}
		return out
	}
	now := time.Now()
	good := signed(now, key, secret, pass)
	for _, x := range []struct {
		code    string
		headers []string
	}{
		{"50103", pairs(good, signer.HeaderKey)},
		{"50104", pairs(good, signer.HeaderPassphrase)},
		{"50106", pairs(good, signer.HeaderSign)},
		{"50107", pairs(good, signer.HeaderTimestamp)},
		{"50105", pairs(signed(now, key, secret, "wrong"), "")},
		{"50111", pairs(signed(now, "nobody", secret, pass), "")},
		{"50112", append(pairs(good, signer.HeaderTimestamp), signer.HeaderTimestamp, "yesterday")},
		{"50113", pairs(signed(now, key, "not-the-secret", pass), "")},
		{"50102", pairs(signed(now.Add(-time.Hour), key, secret, pass), "")},
	} {
		c.check(apiExchange{target: target, headers: x.headers, status: 401, code: x.code})
	}
	// Burst 3 at 1/s: within a few requests the client is over its rate.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("10 signed requests at once, never a 429")
		}
		x := apiExchange{target: target, headers: pairs(signed(time.Now(), key, secret, pass), ""), status: 200, code: "0"}
		if i >= 3 {
			x.status, x.code = 429, "50011"
			hdr, _ := c.check(x)
			if hdr.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
			break
		}
		c.check(x)
	}
}

// TestOpenAPIUpstreamErrors: the 502, 503 and 504 of a failing upstream
// (explorer-sim's faults, on keys never cached), and an upstream error
// envelope passed through, match the file.
func TestOpenAPIUpstreamErrors(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Timeout = 300 * time.Millisecond
		c.Upstream.Retries = 0
		c.Upstream.BreakerFailures = 1 << 20 // the breaker has its own tests
	})
	c := newContract(t, h)
	for i, x := range []struct {
		faults     sim.Faults
		status     int
		code       string
		retryAfter bool
	}{
		{sim.Faults{HTTP500: 1}, 502, "50026", false},
		{sim.Faults{Malformed: 1}, 502, "50026", false},
		{sim.Faults{Hang: 1}, 504, "50004", false},
		{sim.Faults{Envelope: 1, EnvelopeCode: "50036"}, 200, "50036", false},
		// Last: after a 429 no call leaves before its Retry-After.
		{sim.Faults{HTTP429: 1, RetryAfter: 1}, 503, "50001", true},
	} {
		h.sim.SetFaults(x.faults)
		target := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=%d", 10+i)
		hdr, _ := c.check(apiExchange{target: target, status: x.status, code: x.code})
		if x.retryAfter && hdr.Get("Retry-After") == "" {
			t.Errorf("%d/%s without Retry-After", x.status, x.code)
		}
		h.sim.SetFaults(sim.Faults{})
	}
}

// TestOpenAPIUnavailable: the 503 of an open breaker carries Retry-After
// (until the breaker half-opens), that of an unreachable upstream none;
// the file allows both.
func TestOpenAPIUnavailable(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Retries = 0
		c.Upstream.BreakerFailures = 1
		c.Upstream.BreakerOpenFor = time.Minute
	})
	c := newContract(t, h)
	h.sim.SetFaults(sim.Faults{HTTP500: 1})
	c.check(apiExchange{target: "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=7", status: 502, code: "50026"})
	hdr, body := c.check(apiExchange{target: "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=8", status: 503, code: "50001"})
	if !strings.Contains(string(body), "circuit open") || hdr.Get("Retry-After") == "" {
		t.Errorf("want the breaker's 503 with Retry-After: %v %s", hdr, body)
	}

	// A second edge whose upstream refuses connections.
	h.cfg.Upstream.BaseURL = "http://127.0.0.1:1"
	h.cfg.Upstream.BreakerFailures = 1 << 20
	h.start()
	c = newContract(t, h)
	hdr, body = c.check(apiExchange{target: "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=9", status: 503, code: "50001"})
	if !strings.Contains(string(body), "unreachable") || hdr.Get("Retry-After") != "" {
		t.Errorf("want the unreachable upstream's 503 without Retry-After: %v %s", hdr, body)
	}
}

// TestOpenAPIEvents: the stream's refusals match docs/openapi.yaml (its
// 200 is a stream without end, read by the TestEvents tests).
func TestOpenAPIEvents(t *testing.T) {
	h := newHarness(t, withStream)
	c := newContract(t, h)
	c.check(apiExchange{target: "/edge/v1/events", status: 400, code: "50014", specRejects: true})
	c.check(apiExchange{target: "/edge/v1/events?chains=NOPE", status: 400, code: "50036"})
}
