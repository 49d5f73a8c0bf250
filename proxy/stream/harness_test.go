package stream

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"
)

// env is a Hub served by a real fasthttp server on a free loopback port.
type env struct {
	hub  *Hub
	m    *Metrics
	srv  *fasthttp.Server
	addr string
}

// testIP: a test names a client's address in this header (Options.ClientIP).
const testIP = "X-Test-Ip"

// start serves a hub of ETH and BSC with opt; tweak, if not nil, changes
// the server before it serves; wrap, if not nil, the listener.
func start(t *testing.T, opt Options, tweak func(*fasthttp.Server), wrap func(net.Listener) net.Listener) *env {
	t.Helper()
	if opt.Chains == nil {
		opt.Chains = []string{"ETH", "BSC"}
	}
	opt.Metrics = NewMetrics(prometheus.NewRegistry(), opt.Chains)
	if opt.ClientIP == nil {
		opt.ClientIP = func(ctx *fasthttp.RequestCtx) netip.Addr {
			if a, err := netip.ParseAddr(string(ctx.Request.Header.Peek(testIP))); err == nil {
				return a
			}
			a, _ := netip.AddrFromSlice(ctx.RemoteIP())
			return a.Unmap()
		}
	}
	h := New(opt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := &fasthttp.Server{Handler: h.Handler, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	if tweak != nil {
		tweak(srv)
	}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	t.Cleanup(func() {
		h.Close()
		srv.Shutdown()
		<-served
	})
	return &env{hub: h, m: opt.Metrics, srv: srv, addr: addr}
}

// sse is one thing read from a stream: an event, or a comment (event
// "comment", its text in data).
type sse struct {
	id, event, data, retry string
}

// client is a browser's EventSource, but it does not reconnect.
type client struct {
	resp   *http.Response
	events chan sse // closed when the stream ends
}

// open asks for a stream; headers are extra request headers.
func (e *env) open(t *testing.T, query string, headers ...string) *client {
	t.Helper()
	c, resp := e.try(t, query, headers...)
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET ?%s: %d %s", query, resp.StatusCode, body)
	}
	return c
}

// try asks for a stream and returns the answer, whatever its status.
func (e *env) try(t *testing.T, query string, headers ...string) (*client, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.addr+"/edge/v1/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		return nil, resp
	}
	c := &client{resp: resp, events: make(chan sse, 4096)}
	go c.read()
	return c, resp
}

func (c *client) read() {
	defer close(c.events)
	r := bufio.NewReader(c.resp.Body)
	var ev sse
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if ev != (sse{}) {
				c.events <- ev
			}
			ev = sse{}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			c.events <- sse{event: "comment", data: value}
		case "id":
			ev.id = value
		case "event":
			ev.event = value
		case "data":
			ev.data = value
		case "retry":
			ev.retry = value
		}
	}
}

// next is the next event or comment, within 10 seconds.
func (c *client) next(t *testing.T) sse {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sse{}
}

// nextEvent is the next event, heartbeats skipped.
func (c *client) nextEvent(t *testing.T) sse {
	t.Helper()
	for {
		if ev := c.next(t); ev.event != "comment" {
			return ev
		}
	}
}

// end waits for the stream to end, and returns what came before the end
// (heartbeats left out).
func (c *client) end(t *testing.T) []sse {
	t.Helper()
	var got []sse
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return got
			}
			if ev.event != "comment" {
				got = append(got, ev)
			}
		case <-deadline:
			t.Fatalf("stream did not end within 10s; got %v", got)
		}
	}
}

// head is a head event's data.
type head struct {
	Chain  string `json:"chain"`
	Height int64  `json:"height"`
	Hash   string `json:"hash"`
	Time   int64  `json:"time"`
	Final  int64  `json:"final"`
}

func decodeHead(t *testing.T, ev sse) head {
	t.Helper()
	var h head
	if ev.event != "head" || json.Unmarshal([]byte(ev.data), &h) != nil {
		t.Fatalf("want a head event, got %+v", ev)
	}
	return h
}

// wantHead checks that ev is the head of chain at height.
func wantHead(t *testing.T, ev sse, chain string, height int64) {
	t.Helper()
	if h := decodeHead(t, ev); h.Chain != chain || h.Height != height {
		t.Fatalf("got head %s %d, want %s %d (%+v)", h.Chain, h.Height, chain, height, ev)
	}
}

func headEvent(chain string, height int64) Event {
	return Event{Kind: Head, Chain: chain, Height: height, Hash: hashOf(chain, height), Time: 1_700_000_000_000 + height, Final: height - 64}
}

func hashOf(chain string, height int64) string {
	return "0x" + strings.ToLower(chain) + strconv.FormatInt(height, 16)
}

func (e *env) drops(reason string) float64 {
	return testutil.ToFloat64(e.m.drops[indexOf(reasonNames[:], reason)])
}

func (e *env) refusals(reason string) float64 {
	return testutil.ToFloat64(e.m.refusals[indexOf(refusalNames[:], reason)])
}

func (e *env) subscribers(chain string) float64 {
	return testutil.ToFloat64(e.m.subs[chain])
}

func indexOf(names []string, n string) int {
	for i, x := range names {
		if x == n {
			return i
		}
	}
	panic("no " + n)
}

// stuck opens a stream that never reads, on a socket with the smallest
// receive buffer, and waits for the stream to be subscribed.
func (e *env) stuck(t *testing.T, query string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
	}}
	c, err := d.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /edge/v1/events?"+query+" HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// smallSendBuffers makes the server's sockets hold little unsent, so that
// a client that does not read blocks the server's writes soon.
func smallSendBuffers(ln net.Listener) net.Listener { return smallSend{ln} }

type smallSend struct{ net.Listener }

func (l smallSend) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}
