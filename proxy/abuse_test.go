package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

// dialEdge opens a connection that closes at the end of the test and
// gives up after 10 seconds.
func dialEdge(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// rawExchange writes request (whole, as bytes) on a new connection and
// reads the answers to n requests from it, in order.
func rawExchange(t *testing.T, addr, request string, n int) []*http.Response {
	t.Helper()
	c := dialEdge(t, addr)
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for range n {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(out)+1, n, err)
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("answer %d body: %v", len(out)+1, err)
		}
		res.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, res)
	}
	return out
}

func readAll(r *http.Response) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

// Clients that misbehave on purpose get clear errors or are cut off, and
// the edge keeps answering well-behaved clients with the right data.
func TestClientAbuse(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Server.ReadTimeout = time.Second
		c.Server.IdleTimeout = time.Second
		c.Server.MaxHeaderBytes = 8192
	})
	want := h.reference()
	const blocks = "/api/v5/chainx/block/block-list"
	good := blocks + "?chainShortName=CHAINX&limit=2"
	wellBehaved := func(t *testing.T) {
		t.Helper()
		// A new client: its own connection, not one kept from before.
		hc := &fasthttp.Client{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
		defer hc.CloseIdleConnections()
		for i := 0; i < 5; i++ {
			status, body, err := hc.Get(nil, "http://"+h.addr+good)
			if err != nil || status != 200 || !sameJSON(body, want(good)) {
				t.Fatalf("a well-behaved client got %d %v %.200s", status, err, body)
			}
		}
	}

	t.Run("thousands of idle connections", func(t *testing.T) {
		// Both ends of every connection are in this process: 2 fds each.
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		silentN := min(2000, int(lim.Cur)/2-1000)
		if silentN < 500 {
			t.Skipf("RLIMIT_NOFILE %d is too low for a thousand idle connections", lim.Cur)
		}
		var silent, kept []net.Conn
		defer func() {
			for _, c := range append(silent, kept...) {
				c.Close()
			}
		}()
		for i := 0; i < silentN; i++ {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			silent = append(silent, c)
		}
		for i := 0; i < 500; i++ { // one request each, then idle
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			kept = append(kept, c)
			io.WriteString(c, "GET "+good+" HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		for _, c := range kept {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("keep-alive request among idle connections: %v", err)
			}
		}
		wellBehaved(t)
		// Idle connections are closed by the server (read_timeout,
		// idle_timeout), not held forever.
		for _, c := range append(silent, kept...) {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("an idle connection was never closed by the server")
				}
			}
		}
		wellBehaved(t)
	})

	t.Run("invalid UTF-8 and percent-encoding", func(t *testing.T) {
		for _, c := range []struct {
			query, param string
		}{
			{"chainShortName=%ff%fe", "chainShortName"},
			{"chainShortName=\xff\xfeX", "chainShortName"},
			{"chainShortName=CHAINX&limit=%zz", "limit"},
			{"chainShortName=CHAINX&limit=%", "limit"},
			{"chainShortName=CHAINX&limit=2%00", "limit"},
			{"chainShortName=CHAINX&height=%E2%82%AC", "height"},
			{"chainShortName=CHAINX&height=\xe2\x82", "height"},
		} {
			res := rawExchange(t, h.addr, "GET "+blocks+"?"+c.query+" HTTP/1.1\r\nHost: x\r\n\r\n", 1)[0]
			testkit.CheckEnvelope(t, c.query, res.StatusCode, readAll(res), 400, "50036", c.param)
		}
		// Percent-encoded spellings of a valid query are that query.
		for _, q := range []string{"chainShortName=CHAIN%58&limit=2", "chain%53hortName=chainx&limit=%32", "chainShortName=%20CHAINX%20&limit=2"} {
			res := rawExchange(t, h.addr, "GET "+blocks+"?"+q+" HTTP/1.1\r\nHost: x\r\n\r\n", 1)[0]
			if body := readAll(res); res.StatusCode != 200 || !sameJSON(body, want(good)) {
				t.Errorf("%s: %d %.200s", q, res.StatusCode, body)
			}
		}
		res := rawExchange(t, h.addr, "GET "+blocks+"%zz?chainShortName=CHAINX HTTP/1.1\r\nHost: x\r\n\r\n", 1)[0]
		if body := readAll(res); res.StatusCode != 404 || !json.Valid(body) {
			t.Errorf("path with a bad escape: %d %s", res.StatusCode, body)
		}
		wellBehaved(t)
	})

	t.Run("repeated and conflicting parameters", func(t *testing.T) {
		for _, q := range []string{"chainShortName=CHAINX&limit=2&limit=2", "chainShortName=CHAINX&chainShortName=chainx&limit=2&limit=%202"} {
			if r := h.get(blocks + "?" + q); r.status != 200 || !sameJSON(r.body, want(good)) {
				t.Errorf("%s: %d %.200s", q, r.status, r.body)
			}
		}
		for _, c := range []struct{ target, param string }{
			{blocks + "?chainShortName=CHAINX&limit=2&limit=3", "limit"},
			{blocks + "?chainShortName=CHAINX&chainShortName=TRADE_ZONE", "chainShortName"},
			{blocks + "?chainShortName=CHAINX&limit=2&limit=", "limit"},
			{"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + h.sim.CrossHashes("TRADE_ZONE", 1)[0] + "&txId=" + h.sim.UnknownHash(1), "txId"},
		} {
			r := h.get(c.target)
			testkit.CheckEnvelope(t, c.target, r.status, r.body, 400, "50036", c.param)
		}
		wellBehaved(t)
	})

	t.Run("HTTP/1.0", func(t *testing.T) {
		c := dialEdge(t, h.addr)
		io.WriteString(c, "GET "+good+" HTTP/1.0\r\n\r\n")
		all, err := io.ReadAll(c) // the server closes after one answer
		if err != nil {
			t.Fatalf("HTTP/1.0 connection not closed after the answer: %v", err)
		}
		res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(all))), nil)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(res); res.StatusCode != 200 || !sameJSON(body, want(good)) {
			t.Fatalf("HTTP/1.0: %d %.200s", res.StatusCode, body)
		}
		wellBehaved(t)
	})

	t.Run("pipelined", func(t *testing.T) {
		other := blocks + "?chainShortName=CHAINX&limit=3"
		reqs := []string{good, blocks + "?chainShortName=CHAINX&limit=999", other, "/nope", good}
		var w strings.Builder
		for _, r := range reqs {
			w.WriteString("GET " + r + " HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		res := rawExchange(t, h.addr, w.String(), len(reqs))
		for i, r := range []struct {
			status int
			body   []byte
		}{{200, want(good)}, {400, nil}, {200, want(other)}, {404, nil}, {200, want(good)}} {
			body := readAll(res[i])
			if res[i].StatusCode != r.status || (r.body != nil && !sameJSON(body, r.body)) || !json.Valid(body) {
				t.Errorf("pipelined answer %d (%s): %d %.200s", i, reqs[i], res[i].StatusCode, body)
			}
		}
		wellBehaved(t)
	})

	t.Run("oversized request line and bodies", func(t *testing.T) {
		c := dialEdge(t, h.addr)
		// Beyond the read buffer (max_header_bytes): refused, never served.
		io.WriteString(c, "GET "+good+"&x="+strings.Repeat("a", 100<<10)+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 431 ") {
			t.Errorf("a 100 KB request line: %q %v, want 431", line, err)
		}
		// A body on a GET and a POST with a large body.
		res := rawExchange(t, h.addr, "POST "+good+" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 1)[0]
		testkit.CheckEnvelope(t, "POST", res.StatusCode, readAll(res), 405, "50115", "GET")
		res = rawExchange(t, h.addr, "POST "+good+" HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", 1)[0]
		testkit.CheckEnvelope(t, "a 10 MB body", res.StatusCode, readAll(res), 413, "50036", "body")
		wellBehaved(t)
	})
}

// A parameter repeated hundreds of times costs a pass over the query, not a
// parse of it per repeat, and an empty first value of a repeated parameter
// is the repeat's error, not "missing".
func TestRepeatedParametersAreCheap(t *testing.T) {
	r := &route.Table[route.TransactionMulti]
	hashes := make([]string, route.MaxHashes)
	for i := range hashes {
		hashes[i] = "0x" + strings.Repeat(fmt.Sprintf("%02x", i), 32)
	}
	var q query
	var args fasthttp.Args
	allocs := func(repeats int) float64 {
		var raw strings.Builder
		raw.WriteString("txId=" + strings.Join(hashes, ","))
		for i := 0; i < repeats; i++ {
			raw.WriteString("&chainShortName=" + []string{"chainx", "CHAINX", "ChainX", " chainX"}[i%4])
		}
		args.Parse(raw.String())
		return testing.AllocsPerRun(20, func() {
			if err := q.Parse(r, &args, fuzzChains); err != nil {
				t.Fatalf("%d spellings of one chain: %v", repeats, err)
			}
		})
	}
	// Allocations do not grow with the repeats (each once used to cost a
	// whole parse: 4593 allocations for an 8 KB query).
	few, many := allocs(10), allocs(300)
	t.Logf("allocations: %v for 10 repeats, %v for 300", few, many)
	if !testkit.Race && (many > few+2 || many > 20) {
		t.Errorf("%v allocations for 10 repeats, %v for 300", few, many)
	}
	for _, c := range []struct{ query, param string }{
		{"chainShortName=&chainShortName=chainx&txId=" + hashes[0], "chainShortName"},
		{"chainShortName=chainx&txId=" + hashes[0] + "," + hashes[1] + "&txId=" + hashes[1] + "," + hashes[0], "txId"},
		{"chainShortName=chainx&txId=" + hashes[0] + "&txId=" + strings.ToUpper(hashes[0][2:]), "txId"},
	} {
		args.Parse(c.query)
		err := q.Parse(r, &args, fuzzChains)
		if err == nil || err.Code != "50036" || !strings.Contains(err.Msg, c.param) || !strings.Contains(err.Msg, "more than once") {
			t.Errorf("%s: %v, want 50036 naming %s as repeated", c.query, err, c.param)
		}
	}
	args.Parse("chainShortName=chainx&txId=" + hashes[0] + "&txId=0X" + strings.ToUpper(hashes[0][2:]))
	if err := q.Parse(r, &args, fuzzChains); err != nil {
		t.Errorf("one hash spelled twice: %v", err)
	}
}

// A client that asks and never reads is cut off at write_timeout.
func TestSlowReaderIsCutOff(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) {
		c.Server.WriteTimeout = 300 * time.Millisecond
	})
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=100"
	r := h.get(target)
	if r.status != 200 {
		t.Fatalf("warm: %d", r.status)
	}
	all := int64(3000 * len(r.body)) // bodies alone, without headers
	c := dialEdge(t, h.addr)
	c.(*net.TCPConn).SetReadBuffer(4096)
	// Far more answers than the socket buffers hold, pipelined, unread.
	var w strings.Builder
	for i := 0; i < 3000; i++ {
		w.WriteString("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	go io.WriteString(c, w.String())
	// Read nothing for longer than write_timeout (the client's behaviour
	// under test, not a wait for the server), then drain: the server must
	// have given up and closed the connection.
	time.Sleep(time.Second)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still held the connection after %d bytes", n)
	}
	if n >= all {
		t.Fatalf("read %d bytes: every answer was written, nothing was cut", n)
	}
}
