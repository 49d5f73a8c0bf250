package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/buger/jsonparser"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// The stream of chain events (events.go, docs/stream.md) end to end:
// explorer-sim on the harness's clock, an edge with stream.enabled, and
// EventSource clients read off raw connections.

// withStream turns the stream on, polling every 100ms. The loopback is a
// trusted proxy, so that a test's clients can be told apart by
// X-Forwarded-For (askFrom).
func withStream(c *config.Config, _ *sim.Config) {
	c.Stream.Enabled = true
	c.Stream.PollInterval = 100 * time.Millisecond
	c.Stream.Lease = time.Second
	c.Auth.TrustedProxies = []string{"127.0.0.1/32"}
}

// askFrom asks target of h from n distinct clients (X-Forwarded-For
// 10.0.0.1, .2, ...), as a variant is asked before the stream refreshes
// it (variantClients).
func askFrom(t testing.TB, h *harness, target string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if r := h.get(target, "X-Forwarded-For", "10.0.0."+strconv.Itoa(i)); r.status != 200 {
			t.Fatalf("%s from client %d: %d %s", target, i, r.status, r.body)
		}
	}
}

// sseEvent is one event as an EventSource dispatches it.
type sseEvent struct {
	id, typ, data string
	retry         bool // the block held a retry: line
}

// sseStream is one event stream read off its connection.
type sseStream struct {
	conn   net.Conn
	status int
	header string
	events chan sseEvent // closed when the connection ends
}

// openStream asks target of addr and reads its events in the background.
func openStream(t testing.TB, addr, target string, headers ...string) *sseStream {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET " + target + " HTTP/1.1\r\nHost: edge\r\nAccept: text/event-stream\r\n"
	for i := 0; i+1 < len(headers); i += 2 {
		req += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	s := &sseStream{conn: c, events: make(chan sseEvent, 4096)}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream headers: %v (%q)", err, s.header)
		}
		if s.status == 0 {
			s.status, _ = strconv.Atoi(strings.Fields(line)[1])
		}
		s.header += line
		if line == "\r\n" {
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	go func() {
		defer close(s.events)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch {
			case line == "":
				if ev.typ != "" || ev.retry {
					s.events <- ev
				}
				ev = sseEvent{id: ev.id}
			case name == "id":
				ev.id = value
			case name == "event":
				ev.typ = value
			case name == "data":
				ev.data = value
			case name == "retry":
				ev.retry = true
			}
		}
	}()
	return s
}

// next is the next event, failing the test after 10s or at the end.
func (s *sseStream) next(t testing.TB) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// headEvent is a head event's data.
type headEvent struct {
	Chain  string `json:"chain"`
	Height int64  `json:"height"`
	Hash   string `json:"hash"`
	Time   int64  `json:"time"`
	Final  int64  `json:"final"`
}

// nextHead is the next head event above height.
func (s *sseStream) nextHead(t testing.TB, above int64) (headEvent, sseEvent) {
	t.Helper()
	for {
		ev := s.next(t)
		if ev.typ != "head" {
			continue
		}
		var h headEvent
		if err := json.Unmarshal([]byte(ev.data), &h); err != nil {
			t.Fatalf("head data %q: %v", ev.data, err)
		}
		if h.Height > above {
			return h, ev
		}
	}
}

// newestHeight is the newest block of a block-list answer.
func newestHeight(t testing.TB, body []byte) int64 {
	t.Helper()
	var top int64
	jsonparser.ArrayEach(body, func(row []byte, _ jsonparser.ValueType, _ int, _ error) {
		s, _ := jsonparser.GetString(row, "height")
		if h, _ := strconv.ParseInt(s, 10, 64); h > top {
			top = h
		}
	}, "data", "[0]", "blockList")
	if top == 0 {
		t.Fatalf("no blocks in %s", body)
	}
	return top
}

// headCalls counts the upstream calls of CHAINX's newest pages: the
// default one and the page of 100 the poller asks instead with
// cache.block_pages (def), and those with another limit (variants).
func headCalls(h *harness) (def, variants int) {
	for _, target := range h.rec.all() {
		if !strings.HasPrefix(target, "/api/v5/chainx/block/block-list?chainShortName=CHAINX") || strings.Contains(target, "height=") {
			continue
		}
		if strings.Contains(target, "limit=20") || strings.Contains(target, "limit=100") {
			def++
		} else {
			variants++
		}
	}
	return def, variants
}

// polls is stream_polls_total of chain (result: one of them, or all).
func polls(t testing.TB, h *harness, chain string, result ...string) float64 {
	t.Helper()
	labels := []string{"chain", chain}
	if len(result) > 0 {
		labels = append(labels, "result", result[0])
	}
	return gathered(t, h).value(t, "explorer_edge_stream_polls_total", labels...)
}

// TestEventsCachedBeforeAnnounced is the stream's guarantee: when a head
// event for height H arrives, the newest block page a frontend asks (the
// default one, and a variant clients asked lately) is a cache hit holding
// H. As the chain moves, every head is announced once; the upstream is
// asked once per poll, whatever the number of subscribers.
func TestEventsCachedBeforeAnnounced(t *testing.T) {
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) { c.Stream.MaxPerIP = 64 })
	def := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	variant := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	askFrom(t, h, variant, 3) // a variant clients ask
	// Its miss asked the page of 100 it is made of (cache.block_pages):
	// not a poll's call.
	asked, _ := headCalls(h)
	streams := make([]*sseStream, 50)
	for i := range streams {
		streams[i] = openStream(t, h.addr, "/edge/v1/events?chains=chainx")
		if streams[i].status != 200 || !strings.Contains(streams[i].header, "Content-Type: text/event-stream") {
			t.Fatalf("stream %d: %d %q", i, streams[i].status, streams[i].header)
		}
	}
	last := int64(0)
	for block := range 6 {
		if block > 0 {
			h.clock.Advance(time.Second) // explorer-sim makes a block a second of its clock
		}
		head, _ := streams[0].nextHead(t, last)
		for _, target := range []string{def, variant} {
			r := h.get(target)
			if cs := r.header["Cache-Status"]; r.status != 200 || !strings.HasPrefix(cs, "explorer-edge; hit") {
				t.Fatalf("block %d: %s on the head event: %d %q, want a hit", block, target, r.status, cs)
			}
			if got := newestHeight(t, r.body); got != head.Height {
				t.Fatalf("block %d: %s holds %d, the event said %d", block, target, got, head.Height)
			}
		}
		if want := h.sim.Head("CHAINX"); head.Height != want {
			t.Fatalf("block %d: announced %d, the upstream's head is %d", block, head.Height, want)
		}
		for i, s := range streams[1:] {
			if got, _ := s.nextHead(t, last); got != head {
				t.Fatalf("stream %d: %+v, stream 0 got %+v", i+1, got, head)
			}
		}
		last = head.Height
	}
	// One upstream call per poll of the default page; the variant once per
	// new head at most. Fifty subscribers ask nothing of the upstream.
	h.node.Close(context.Background()) // no poll in flight while counting
	n := polls(t, h, "CHAINX")
	def0, variants := headCalls(h)
	if float64(def0-asked) != n {
		t.Errorf("%d upstream calls of the default page for %v polls", def0-asked, n)
	}
	if news := polls(t, h, "CHAINX", "new"); news != 6 || variants > 1+6 {
		t.Errorf("%v new heads announced (want 6), %d calls of the variant (want at most 7)", news, variants)
	}
}

// TestEventsReorgAnnounced: a reorganization the poll finds is announced
// (fork, depth, the new hash at the fork) after it was purged, and the
// next head is the new branch's.
func TestEventsReorgAnnounced(t *testing.T) {
	h := newHarness(t, withStream)
	s := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	head, _ := s.nextHead(t, 0)
	h.sim.Reorg(3)
	h.clock.Advance(time.Second) // answers asked after the ones that showed the old branch
	for {
		ev := s.next(t)
		if ev.typ != "reorg" {
			continue
		}
		var r struct {
			Chain string `json:"chain"`
			Fork  int64  `json:"fork"`
			Depth int64  `json:"depth"`
			Hash  string `json:"hash"`
		}
		if err := json.Unmarshal([]byte(ev.data), &r); err != nil {
			t.Fatal(err)
		}
		if r.Chain != "CHAINX" || r.Fork != head.Height-2 || r.Depth != 3 || r.Hash == "" {
			t.Fatalf("reorg event %+v after head %d and a reorganization of 3", r, head.Height)
		}
		break
	}
	after, _ := s.nextHead(t, head.Height-1)
	if after.Hash == head.Hash {
		t.Fatalf("the head after the reorganization is the old branch's: %+v", after)
	}
}

// TestEventsAdmission: the stream's path answers 404 when stream.enabled is
// off; on, it carries CORS headers for an allowed origin and answers its
// preflight; in auth.mode signed it is served without a signature (an
// EventSource cannot sign) while the routes still refuse one.
func TestEventsAdmission(t *testing.T) {
	off := newHarness(t)
	if r := off.get("/edge/v1/events?chains=CHAINX"); r.status != 404 {
		t.Fatalf("stream off: %d %s", r.status, r.body)
	}
	const app = "https://app.example.com"
	h := newHarness(t, withStream, withCORS(app), func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: accessKey, SecretKey: accessSecret, Passphrase: accessPass}}
	})
	if r := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx"); r.status != 401 {
		t.Fatalf("an unsigned block list in signed mode: %d", r.status)
	}
	s := openStream(t, h.addr, "/edge/v1/events?chains=chainx,trade_zone", "Origin", app)
	if s.status != 200 || !strings.Contains(s.header, "Access-Control-Allow-Origin: "+app) || !strings.Contains(s.header, "X-Accel-Buffering: no") {
		t.Fatalf("stream: %d %q", s.status, s.header)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		var e headEvent
		json.Unmarshal([]byte(s.next(t).data), &e)
		seen[e.Chain] = true
	}
	r := h.do("OPTIONS", "/edge/v1/events?chains=chainx", "Origin", app, "Access-Control-Request-Method", "GET")
	if r.status != 204 || r.header["Access-Control-Allow-Origin"] != app {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	if r := h.get("/edge/v1/events?chains=nochain"); r.status != 400 {
		t.Fatalf("an unknown chain: %d %s", r.status, r.body)
	}
}

// TestEventsDrain: a drain ends every stream with a retry: hint at once,
// refuses new ones, and is not held by them (the server's shutdown does
// not wait for hijacked connections).
func TestEventsDrain(t *testing.T) {
	h := newHarness(t, withStream)
	streams := []*sseStream{openStream(t, h.addr, "/edge/v1/events?chains=CHAINX"), openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")}
	streams[0].nextHead(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Drain returns within ctx's deadline (30 s, for a loaded machine) while the streams are
	// open, or says it did not: held by them, it would wait for ever.
	if err := h.node.Drain(ctx); err != nil {
		t.Fatalf("drain with two streams open: %v", err)
	}
	for i, s := range streams {
		retry := false
		for ev := range s.events {
			retry = retry || ev.retry
		}
		if !retry {
			t.Errorf("stream %d ended without a retry: hint", i)
		}
	}
}

// TestEventsCountInConnectionCaps: a stream is a connection of the public
// listener: with server.max_conns_per_ip 2, two open streams leave no room
// for a third connection from the address, and a closed one frees it. The
// edge does not read a stream's connection: it finds the client gone at
// its next write, an event or a heartbeat (100ms here).
func TestEventsCountInConnectionCaps(t *testing.T) {
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) {
		c.Server.MaxConnsPerIP = 2
		c.Stream.Heartbeat = 100 * time.Millisecond
		c.Auth.TrustedProxies = nil // a trusted proxy has no cap per address
	})
	a := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	third := func() int {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /api/v5/chainx/block/block-list?chainShortName=chainx HTTP/1.1\r\nHost: edge\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if f := strings.Fields(line); len(f) > 1 {
			n, _ := strconv.Atoi(f[1])
			return n
		}
		return 0
	}
	if got := third(); got != 429 {
		t.Fatalf("a third connection with two streams open: %d, want 429", got)
	}
	a.conn.Close()
	testkit.WaitFor(t, "the closed stream's connection freed", func() bool { return third() == 200 })
}
