package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/server"
	"explorer-edge/sim"
)

// exchange writes raw on a new connection and reads every answer until the
// server closes it. open reports that the server had not closed it after
// wait: it is waiting for another request.
func exchange(t *testing.T, addr, raw string, wait time.Duration) (answers []*http.Response, bodies [][]byte, open bool) {
	t.Helper()
	c := dialEdge(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	all, err := io.ReadAll(c)
	var ne net.Error
	open = errors.As(err, &ne) && ne.Timeout()
	br := bufio.NewReader(bytes.NewReader(all))
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(res.Body)
		answers, bodies = append(answers, res), append(bodies, body)
	}
	return answers, bodies, open
}

// Request framing (RFC 9112 section 6.1): a request whose length a front
// proxy could read differently from the edge is refused with 400 and the
// connection closed, so that bytes the edge would take for a second
// request are never answered. No route takes a body, so any
// Transfer-Encoding is refused, with or without Content-Length; so is a
// line ending in a bare LF (a proxy that splits lines on CRLF only sees the
// header after it as part of the one before) and obsolete line folding.
func TestRequestFramingRefused(t *testing.T) {
	h := newHarness(t)
	const blocks = "/api/v5/chainx/block/block-list"
	good := blocks + "?chainShortName=CHAINX&limit=2"
	smuggled := "GET " + blocks + "?chainShortName=CHAINX&limit=3 HTTP/1.1\r\nHost: x\r\n\r\n"
	head := "GET " + good + " HTTP/1.1\r\nHost: x\r\n"
	for _, c := range []struct{ name, raw, why string }{
		{"Content-Length and Transfer-Encoding", head + "Content-Length: 47\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, "Transfer-Encoding"},
		{"Transfer-Encoding and Content-Length", head + "Transfer-Encoding: chunked\r\nContent-Length: 47\r\n\r\n0\r\n\r\n" + smuggled, "Transfer-Encoding"},
		{"Transfer-Encoding alone", head + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, "Transfer-Encoding"},
		{"Transfer-Encoding identity", head + "Content-Length: 0\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled, "Transfer-Encoding"},
		{"Transfer-Encoding after a bare LF", head + "X-Note: a\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, "LF"},
		{"a bare LF between two headers", head + "X-Note: a\nX-Other: b\r\n\r\n" + smuggled, "LF"},
		{"a bare LF ending the headers", head + "X-Note: a\r\n\n" + smuggled, "LF"},
		{"obsolete line folding", head + "X-Note: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, "folding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers, bodies, open := exchange(t, h.addr, c.raw, 5*time.Second)
			if len(answers) == 0 {
				t.Fatalf("no answer (connection open: %v)", open)
			}
			res := answers[0]
			testkit.CheckEnvelope(t, c.name, res.StatusCode, bodies[0], 400, "50036", c.why)
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if !res.Close {
				t.Errorf("the refusal does not say Connection: close")
			}
			if len(answers) > 1 || open {
				t.Errorf("%d answers, connection left open: %v; the request after the refused one must never be answered (second: %d %.80s)",
					len(answers), open, answers[len(answers)-1].StatusCode, bodies[len(bodies)-1])
			}
		})
	}

	// Control: a Content-Length alone frames a request as RFC 9112 wants;
	// the connection stays open for the next one.
	answers, bodies, open := exchange(t, h.addr, head+"Content-Length: 0\r\n\r\n"+smuggled, 500*time.Millisecond)
	if len(answers) != 2 || answers[0].StatusCode != 200 || answers[1].StatusCode != 200 || !open {
		t.Errorf("Content-Length: 0 then a second request: %d answers, open %v", len(answers), open)
		for i := range answers {
			t.Logf("answer %d: %d %.100s", i, answers[i].StatusCode, bodies[i])
		}
	}
}

// Every refusal, those fasthttp makes before the handler included, is an
// envelope of the error table in application/json, and a 405 says which
// methods are allowed (RFC 9110 section 15.5.6).
func TestRefusalsAreEnvelopes(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Server.ReadTimeout = time.Second
		c.Server.MaxHeaderBytes = 8192
	})
	const good = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=2"
	for _, c := range []struct {
		name, raw string
		status    int
		code, why string
	}{
		{"headers over max_header_bytes", "GET " + good + " HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 10000) + "\r\n\r\n", 431, "50036", "8192"},
		{"request line over max_header_bytes", "GET " + good + "&x=" + strings.Repeat("a", 100<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431, "50036", "8192"},
		{"a request line of garbage", "HELLO\r\n\r\n", 400, "50036", "request"},
		{"binary bytes", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "50036", "request"},
		{"a header line without a colon", "GET " + good + " HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, "50036", "request"},
		{"a body of 10 MB", "POST " + good + " HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", 413, "50036", "body"},
		{"headers cut off at read_timeout", "GET " + good + " HTTP/1.1\r\nHost: x\r\n", 408, "50036", "read_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers, bodies, _ := exchange(t, h.addr, c.raw, 5*time.Second)
			if len(answers) != 1 {
				t.Fatalf("%d answers, want 1", len(answers))
			}
			res := answers[0]
			testkit.CheckEnvelope(t, c.name, res.StatusCode, bodies[0], c.status, c.code, c.why)
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
		})
	}
	for _, method := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		res := rawExchange(t, h.addr, method+" "+good+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 1)[0]
		body := readAll(res)
		testkit.CheckEnvelope(t, method, res.StatusCode, body, 405, "50115", "GET")
		if allow := res.Header.Get("Allow"); allow != "GET, HEAD" {
			t.Errorf("%s: Allow %q, want \"GET, HEAD\"", method, allow)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", method, ct)
		}
	}
	// The envelope's msg is JSON-safe whatever the request held.
	answers, bodies, _ := exchange(t, h.addr, "GET /\"\\\x7f HTTP/1.1\r\n\r\n", 5*time.Second)
	if len(answers) != 1 || !json.Valid(bodies[0]) {
		t.Errorf("a request line with quotes and DEL: %d answers %q", len(answers), bodies)
	}
}

// browserRequest is a request as a browser sends it, headers and all.
const browserRequest = "GET /api/v5/chainx/block/block-list?chainShortName=chainx&limit=20 HTTP/1.1\r\n" +
	"Host: edge.example\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
	"Accept: application/json, text/plain, */*\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Origin: https://app.example\r\nConnection: keep-alive\r\nReferer: https://app.example/blocks\r\n" +
	"Sec-Fetch-Dest: empty\r\nSec-Fetch-Mode: cors\r\nSec-Fetch-Site: same-site\r\nTE: trailers\r\n\r\n"

// The framing check reads a request's raw header block on every request:
// a hit with a browser's headers still allocates nothing.
func TestFramingCheckAllocatesNothing(t *testing.T) {
	if testkit.Race {
		t.Skip("allocation counts are meaningless under -race")
	}
	h := newHarness(t)
	if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"); r.status != 200 {
		t.Fatalf("warm: %d", r.status)
	}
	var ctx fasthttp.RequestCtx
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(browserRequest))); err != nil {
		t.Fatal(err)
	}
	if e := server.FramingError(&ctx.Request.Header); e != nil {
		t.Fatalf("a browser's request refused: %v", e)
	}
	allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset()
		h.p.Handle(&ctx)
	})
	if ctx.Response.StatusCode() != 200 || allocs != 0 {
		t.Fatalf("hit with a browser's headers: status %d, %v allocations, want 0", ctx.Response.StatusCode(), allocs)
	}
}

// BenchmarkFramingCheck is the framing check's cost on a browser's request
// (13 header lines).
func BenchmarkFramingCheck(b *testing.B) {
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(browserRequest))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if server.FramingError(&req.Header) != nil {
			b.Fatal("refused")
		}
	}
}
