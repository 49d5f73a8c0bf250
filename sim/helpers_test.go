package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"explorer-edge/signer"
)

// clock is an injectable chain clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start runs a Server on a free port for the test's duration.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startClocked runs an unauthenticated Server on an injected clock.
func startClocked(t *testing.T) (*Server, *clock) {
	t.Helper()
	c := newClock()
	return start(t, Config{Now: c.Now}), c
}

// client returns an HTTP client without keep-alive, so a dropped connection
// is never retried transparently on a fresh one.
func client(t *testing.T, timeout time.Duration) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// envelope decodes the body as the API envelope.
func (a answer) envelope(t *testing.T) (code, msg string, data []any) {
	t.Helper()
	var e struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
		Data []any  `json:"data"`
	}
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("body is not an envelope: %v: %.300s", err, a.body)
	}
	if e.Data == nil {
		t.Fatalf("envelope without data array: %.300s", a.body)
	}
	return e.Code, e.Msg, e.Data
}

// ok decodes a success envelope.
func (a answer) ok(t *testing.T) []any {
	t.Helper()
	code, msg, data := a.envelope(t)
	if a.status != 200 || code != "0" || msg != "" {
		t.Fatalf("want 200 code 0, got %d %s %q", a.status, code, msg)
	}
	return data
}

func do(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, body}
}

// get asks s for pathQuery, unsigned.
func get(t *testing.T, s *Server, pathQuery string) answer {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL()+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, client(t, 10*time.Second), req)
}

// signed builds a request signed with creds at timestamp ts.
func signed(t *testing.T, s *Server, pathQuery string, creds signer.Credentials, ts string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL()+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(signer.HeaderKey, creds.APIKey)
	req.Header.Set(signer.HeaderPassphrase, creds.Passphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, signer.Sign(creds.SecretKey, ts, "GET", pathQuery))
	return req
}

// object asserts v is a JSON object.
func object(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("want a JSON object, got %T", v)
	}
	return m
}

// list returns the array field name of a data element.
func list(t *testing.T, data []any, name string) []any {
	t.Helper()
	if len(data) != 1 {
		t.Fatalf("want one data element, got %d", len(data))
	}
	l, ok := object(t, data[0])[name].([]any)
	if !ok {
		t.Fatalf("field %s is not an array: %v", name, object(t, data[0])[name])
	}
	return l
}

func field(t *testing.T, v any, name string) string {
	t.Helper()
	s, ok := object(t, v)[name].(string)
	if !ok {
		t.Fatalf("field %s is not a string: %v", name, object(t, v)[name])
	}
	return s
}

func join(hashes []string) string { return strings.Join(hashes, ",") }
