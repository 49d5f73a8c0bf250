package stream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"

	"explorer-edge/internal/testkit"
	"explorer-edge/tcpio"
)

func TestEventsInOrder(t *testing.T) {
	e := start(t, Options{Buffer: 64}, nil, nil)
	both := e.open(t, "chains=ETH,BSC")
	eth := e.open(t, "chains=eth") // any case
	var ids []string
	for i := int64(1); i <= 40; i++ {
		chain := "ETH"
		if i%3 == 0 {
			chain = "BSC"
		}
		e.hub.Publish(headEvent(chain, i))
		if i == 20 {
			e.hub.Publish(Event{Kind: Reorg, Chain: "ETH", Fork: 17, Depth: 3, Hash: "0xnew"})
		}
	}
	e.hub.Publish(headEvent("SOL", 1))                         // not served: ignored
	e.hub.Publish(Event{Kind: 9, Chain: "ETH", Height: 1})     // no such kind: ignored
	e.hub.Publish(Event{Kind: Head, Chain: "eth", Height: 99}) // names are exact in events
	e.hub.Publish(headEvent("ETH", 41))

	for i := int64(1); i <= 41; i++ {
		chain := "ETH"
		if i%3 == 0 && i != 41 {
			chain = "BSC"
		}
		ev := both.nextEvent(t)
		wantHead(t, ev, chain, i)
		if h := decodeHead(t, ev); h.Hash != hashOf(chain, i) || h.Time != 1_700_000_000_000+i || h.Final != i-64 {
			t.Fatalf("head %d: %+v", i, h)
		}
		ids = append(ids, ev.id)
		if i == 20 {
			ev := both.nextEvent(t)
			var r struct {
				Chain       string
				Fork, Depth int64
				Hash        string
			}
			if ev.event != "reorg" || json.Unmarshal([]byte(ev.data), &r) != nil || r.Chain != "ETH" || r.Fork != 17 || r.Depth != 3 || r.Hash != "0xnew" {
				t.Fatalf("want the reorg, got %+v", ev)
			}
			ids = append(ids, ev.id)
		}
		if chain == "ETH" {
			wantHead(t, eth.nextEvent(t), "ETH", i)
			if i == 20 {
				if ev := eth.nextEvent(t); ev.event != "reorg" {
					t.Fatalf("ETH stream: want the reorg, got %+v", ev)
				}
			}
		}
	}
	// Every event moves the id: each is where the chains stood after it.
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] || strings.Count(ids[i], ".") != 1 {
			t.Fatalf("ids %s then %s", ids[i-1], ids[i])
		}
	}
	if got := testutil.ToFloat64(e.m.events[Head]); got != 41 {
		t.Errorf("events_total{type=head} = %v, want 41", got)
	}
	if got := testutil.ToFloat64(e.m.events[Reorg]); got != 1 {
		t.Errorf("events_total{type=reorg} = %v, want 1", got)
	}
	if e.subscribers("ETH") != 2 || e.subscribers("BSC") != 1 {
		t.Errorf("subscribers: ETH %v BSC %v, want 2 and 1", e.subscribers("ETH"), e.subscribers("BSC"))
	}
	// Every event was written to every subscriber it was handed to.
	testkit.WaitFor(t, "42 deliveries observed", func() bool { return histCount(e) == 42 })
}

func histCount(e *env) uint64 {
	var m dto.Metric
	e.m.delivery.Write(&m)
	return m.GetHistogram().GetSampleCount()
}

// posOf is one chain's part of an id for its head at height.
func posOf(chain string, height int64) string {
	return strconv.FormatInt(height, 10) + "-" + strconv.FormatUint(uint64(tagOf(hashOf(chain, height))), 36)
}

func TestHeaders(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	c := e.open(t, "chains=ETH")
	h := c.resp.Header
	if h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" || h.Get("X-Accel-Buffering") != "no" {
		t.Errorf("headers %v", h)
	}
	if c.resp.ContentLength != -1 || len(c.resp.TransferEncoding) != 0 || !c.resp.Close {
		t.Errorf("want a body to the connection's end: length %d, transfer %v, close %v", c.resp.ContentLength, c.resp.TransferEncoding, c.resp.Close)
	}

	// HEAD: the headers, no stream.
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("http://" + e.addr + "/edge/v1/events?chains=ETH")
	req.Header.SetMethod("HEAD")
	if err := fasthttp.DoTimeout(&req, &resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "text/event-stream" {
		t.Errorf("HEAD: %d %s", resp.StatusCode(), resp.Header.ContentType())
	}
	if e.subscribers("ETH") != 1 {
		t.Errorf("HEAD subscribed: %v subscribers", e.subscribers("ETH"))
	}
}

func TestChainsParameter(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	f := func(query string, status int, code, says string) {
		t.Helper()
		_, resp := e.try(t, query)
		body, _ := io.ReadAll(resp.Body)
		testkit.CheckEnvelope(t, query, resp.StatusCode, body, status, code, "chains")
		if !strings.Contains(string(body), says) {
			t.Errorf("%s: %s does not say %q", query, body, says)
		}
		if resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q", query, resp.Header.Get("Content-Type"))
		}
	}
	f("", 400, "50014", "cannot be empty")
	f("chain=ETH", 400, "50014", "cannot be empty")
	f("chains=", 400, "50036", "empty chain name")
	f("chains=ETH,,BSC", 400, "50036", "empty chain name")
	f("chains=ETH,SOL", 400, "50036", `unknown chain \"SOL\"; served: ETH,BSC`)
	f("chains="+strings.Repeat("x", 500), 400, "50036", `\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"`)
	f("chains=ETH%0A", 400, "50036", `unknown chain \"ETH\\n\"`)

	// Repeated, mixed case and repeated names are one subscription each.
	c := e.open(t, "chains=eth,ETH&chains=bsc")
	e.hub.Publish(headEvent("BSC", 1))
	e.hub.Publish(headEvent("ETH", 2))
	wantHead(t, c.nextEvent(t), "BSC", 1)
	wantHead(t, c.nextEvent(t), "ETH", 2)
	if e.subscribers("ETH") != 1 {
		t.Errorf("ETH subscribers %v, want 1", e.subscribers("ETH"))
	}

	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("http://" + e.addr + "/edge/v1/events?chains=ETH")
	req.Header.SetMethod("POST")
	if err := fasthttp.DoTimeout(&req, &resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testkit.CheckEnvelope(t, "POST", resp.StatusCode(), resp.Body(), 405, "50115", "GET")
	if string(resp.Header.Peek("Allow")) != "GET, HEAD" {
		t.Errorf("405 without Allow: %q", resp.Header.Peek("Allow"))
	}
}

// TestResume: a browser that reconnects with the last id it saw gets what
// it missed, nothing twice, then the live events; by header or by the
// lastEventId parameter, the header winning.
func TestResume(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	e.hub.Publish(headEvent("ETH", 1))
	first := e.open(t, "chains=ETH,BSC")
	wantHead(t, first.nextEvent(t), "ETH", 1) // the newest head, at once
	for i := int64(2); i <= 5; i++ {
		e.hub.Publish(headEvent([]string{"ETH", "BSC"}[i%2], i))
	}
	var last string
	for i := int64(2); i <= 5; i++ {
		ev := first.nextEvent(t)
		wantHead(t, ev, []string{"ETH", "BSC"}[i%2], i)
		last = ev.id
	}
	first.resp.Body.Close()
	for i := int64(6); i <= 9; i++ { // missed
		e.hub.Publish(headEvent([]string{"ETH", "BSC"}[i%2], i))
	}
	e.hub.Publish(Event{Kind: Reorg, Chain: "BSC", Fork: 8, Depth: 2, Hash: "0xb"})

	check := func(c *client) {
		t.Helper()
		for i := int64(6); i <= 9; i++ {
			wantHead(t, c.nextEvent(t), []string{"ETH", "BSC"}[i%2], i)
		}
		if ev := c.nextEvent(t); ev.event != "reorg" {
			t.Fatalf("want the missed reorg, got %+v", ev)
		}
	}
	byHeader := e.open(t, "chains=BSC,ETH", "Last-Event-ID", last)
	byParam := e.open(t, "chains=ETH,BSC&lastEventId="+last)
	both := e.open(t, "chains=ETH,BSC&lastEventId=garbage", "Last-Event-ID", last)
	for _, c := range []*client{byHeader, byParam, both} {
		check(c)
	}
	e.hub.Publish(headEvent("ETH", 10)) // live
	var upToDate string
	for _, c := range []*client{byHeader, byParam, both} {
		ev := c.nextEvent(t)
		wantHead(t, ev, "ETH", 10)
		upToDate = ev.id
	}
	// A stream of one chain resumes that chain's events only.
	eth := e.open(t, "chains=ETH", "Last-Event-ID", last)
	for _, h := range []int64{6, 8, 10} {
		wantHead(t, eth.nextEvent(t), "ETH", h)
	}
	// Up to date: nothing to replay.
	now := e.open(t, "chains=ETH", "Last-Event-ID", upToDate)
	e.hub.Publish(headEvent("ETH", 11))
	wantHead(t, now.nextEvent(t), "ETH", 11)
}

// TestResumeOnAnotherHub: ids come from the chains, not the hub: two
// hubs that published the same events give them the same ids, and a
// stream resumes from one's id on the other without a reset; an id whose
// block another hub does not hold resumes with the newest head when
// HashAt says the block is still the chain's, else with a reset.
func TestResumeOnAnotherHub(t *testing.T) {
	onChain := map[int64]string{}
	a := start(t, Options{}, nil, nil)
	b := start(t, Options{HashAt: func(chain string, h int64) string { return onChain[h] }}, nil, nil)
	sa, sb := a.open(t, "chains=ETH,BSC"), b.open(t, "chains=ETH,BSC")
	for i := int64(1); i <= 4; i++ {
		a.hub.Publish(headEvent("ETH", i))
		b.hub.Publish(headEvent("ETH", i))
	}
	var last string
	for i := int64(1); i <= 4; i++ {
		ea, eb := sa.nextEvent(t), sb.nextEvent(t)
		if ea.id != eb.id || ea.id != posOf("ETH", i)+".0" {
			t.Fatalf("head %d: ids %q and %q, want %q", i, ea.id, eb.id, posOf("ETH", i)+".0")
		}
		if i == 2 {
			last = ea.id
		}
	}
	// a's stream resumes on b after head 2: heads 3 and 4, no reset.
	c := b.open(t, "chains=ETH,BSC", "Last-Event-ID", last)
	wantHead(t, c.nextEvent(t), "ETH", 3)
	wantHead(t, c.nextEvent(t), "ETH", 4)
	// A hub that started after head 2 (b2, history from head 5): the block
	// of the id is the chain's (HashAt): the newest head, no reset.
	b2 := start(t, Options{HashAt: func(chain string, h int64) string { return onChain[h] }}, nil, nil)
	b2.hub.Publish(headEvent("ETH", 5))
	onChain[2] = hashOf("ETH", 2)
	c = b2.open(t, "chains=ETH", "Last-Event-ID", last)
	if ev := c.nextEvent(t); ev.event != "head" {
		t.Fatalf("resume on a newer hub: %+v, want the newest head", ev)
	} else {
		wantHead(t, ev, "ETH", 5)
	}
	// Replaced since (a reorganization the client did not see): a reset.
	onChain[2] = "0xother"
	c = b2.open(t, "chains=ETH", "Last-Event-ID", last)
	if ev := c.nextEvent(t); ev.event != "reset" {
		t.Fatalf("resume after the block was replaced: %+v, want a reset", ev)
	}
	wantHead(t, c.nextEvent(t), "ETH", 5)
	// A hub behind the id: nothing at once, its next head live.
	b3 := start(t, Options{}, nil, nil)
	b3.hub.Publish(headEvent("ETH", 1))
	c = b3.open(t, "chains=ETH", "Last-Event-ID", last)
	b3.hub.Publish(headEvent("ETH", 3))
	wantHead(t, c.nextEvent(t), "ETH", 3)
}

// TestStaleEvent: a stale event is sent once per change (stale, then
// answered again), replayed to a new stream while the chain is stale, and
// moves the id.
func TestStaleEvent(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	s := e.open(t, "chains=ETH")
	e.hub.Publish(headEvent("ETH", 1))
	h1 := s.nextEvent(t)
	for range 2 {
		e.hub.Publish(Event{Kind: Stale, Chain: "ETH", Stale: true, Height: 1, Time: 5})
	}
	ev := s.nextEvent(t)
	if ev.event != "stale" || ev.data != `{"chain":"ETH","stale":true,"height":1,"since":5}` || ev.id != posOf("ETH", 1)+"-1.0" {
		t.Fatalf("stale: %+v", ev)
	}
	late := e.open(t, "chains=ETH")
	wantHead(t, late.nextEvent(t), "ETH", 1)
	if ev := late.nextEvent(t); ev.event != "stale" {
		t.Fatalf("a new stream of a stale chain: %+v, want the stale event", ev)
	}
	back := e.open(t, "chains=ETH", "Last-Event-ID", h1.id)
	if ev := back.nextEvent(t); ev.event != "stale" {
		t.Fatalf("resumed after the head: %+v, want the stale event", ev)
	}
	e.hub.Publish(Event{Kind: Stale, Chain: "ETH", Stale: false, Height: 1, Time: 6})
	for _, c := range []*client{s, late, back} {
		if ev := c.nextEvent(t); ev.event != "stale" || !strings.Contains(ev.data, `"stale":false`) {
			t.Fatalf("answered again: %+v", ev)
		}
	}
	if got := testutil.ToFloat64(e.m.events[Stale]); got != 2 {
		t.Errorf("events_total{type=stale} = %v, want 2", got)
	}
}

// TestResetWhenTooOld: an id older than a chain's history gets a reset
// naming that chain, its newest head, then the live events; the other
// chains of the stream replay as usual.
func TestResetWhenTooOld(t *testing.T) {
	e := start(t, Options{History: 4}, nil, nil)
	rec := e.open(t, "chains=ETH,BSC")
	e.hub.Publish(headEvent("BSC", 1)) // id 1
	for i := int64(2); i <= 11; i++ {  // ids 2-11, ETH's history keeps 8-11
		e.hub.Publish(headEvent("ETH", i))
	}
	e.hub.Publish(Event{Kind: Reorg, Chain: "ETH", Fork: 10, Depth: 2, Hash: "0xe"}) // id 12: ETH keeps 9-12
	e.hub.Publish(headEvent("BSC", 13))
	ids := []string{""} // by the order published, from 1
	for range 13 {
		ids = append(ids, rec.nextEvent(t).id)
	}

	c := e.open(t, "chains=ETH,BSC", "Last-Event-ID", ids[3])
	ev := c.nextEvent(t)
	if ev.event != "reset" || ev.data != `{"chains":["ETH"]}` || ev.id != "" {
		t.Fatalf("want a reset of ETH without an id, got %+v", ev)
	}
	wantHead(t, c.nextEvent(t), "ETH", 11) // its newest head
	wantHead(t, c.nextEvent(t), "BSC", 13) // BSC's history reaches id 3
	e.hub.Publish(headEvent("ETH", 14))
	wantHead(t, c.nextEvent(t), "ETH", 14)

	// Within the history: no reset.
	c = e.open(t, "chains=ETH", "Last-Event-ID", ids[9])
	wantHead(t, c.nextEvent(t), "ETH", 10)
	wantHead(t, c.nextEvent(t), "ETH", 11)
	if ev := c.nextEvent(t); ev.event != "reorg" {
		t.Fatalf("want the reorg, got %+v", ev)
	}
	wantHead(t, c.nextEvent(t), "ETH", 14)
}

// TestGarbageLastEventID: an id the hub did not give (garbage, another
// node's, from the future) is a reset of every chain of the stream, then
// their newest heads; a chain with no head yet has its reset alone, and
// the reset then carries the newest id to resume from.
func TestGarbageLastEventID(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	e.hub.Publish(headEvent("ETH", 1))
	e.hub.Publish(headEvent("ETH", 2))
	p := posOf("ETH", 2)
	for _, id := range []string{
		"garbage", "k3x.41", p, p + ".", "." + p, p + ".0.0", p + ".x", p + ".-1", p + ". 0", p + ".0 ", "0",
		p + "-0.0", p + "-.0", "0" + p + ".0", "2-A.0", "2--a.0", "-2-a.0", "2-a-1-1.0", "0-a.0",
		"99999999999999999999-a.0", "2-zzzzzzzz.0", p + "-18446744073709551616.0", "%ff%fe",
		strings.Repeat("0", 70) + "1-a.0", strings.Repeat("z", 3000),
	} {
		c := e.open(t, "chains=ETH,BSC&lastEventId="+url.QueryEscape(id))
		ev := c.nextEvent(t)
		if ev.event != "reset" || ev.data != `{"chains":["ETH","BSC"]}` {
			t.Fatalf("id %q: want a reset of both, got %+v", id, ev)
		}
		wantHead(t, c.nextEvent(t), "ETH", 2)
		c.resp.Body.Close()
	}
	c := e.open(t, "chains=BSC", "Last-Event-ID", "junk\xe9")
	if ev := c.nextEvent(t); ev.event != "reset" || ev.id != p+".0" {
		t.Fatalf("want a reset with the newest id, got %+v", ev)
	}
	e.hub.Publish(headEvent("BSC", 3))
	wantHead(t, c.nextEvent(t), "BSC", 3)
}

func TestParseID(t *testing.T) {
	h := &Hub{order: []*chain{{name: "ETH"}, {name: "BSC"}}}
	f := func(id string, want []position, wantOK bool) {
		t.Helper()
		got, ok := h.parseID([]byte(id))
		if ok != wantOK || (ok && !slices.Equal(got, want)) {
			t.Errorf("parseID(%q) = %v, %v; want %v, %v", id, got, ok, want, wantOK)
		}
	}
	f("0.0", []position{{}, {}}, true)
	f("41-a.0", []position{{41, 10, 0}, {}}, true)
	f("41-a-3.7-zz", []position{{41, 10, 3}, {7, 36*35 + 35, 0}}, true)
	f("9223372036854775807-1z141z3", nil, false) // one chain short
	f("9223372036854775807-1z141z3.0.0", nil, false)
	f("9223372036854775807-1z141z3.1-1", []position{{1<<63 - 1, 1<<32 - 1, 0}, {1, 1, 0}}, true)
	f("9223372036854775808-a.0", nil, false) // overflows
	f("1-1z141z4.0", nil, false)             // a tag past 32 bits
	f("041-a.0", nil, false)
	f("41-0a.0", nil, false)
	f("41-a-0.0", nil, false)
	f("41-a-01.0", nil, false)
	f("41-A.0", nil, false)
	f("41.0", nil, false)
	f("0-a.0", nil, false)
	f("41-a-1-1.0", nil, false)
	f("", nil, false)
	f(".", nil, false)
	f("k3x.41", nil, false)
	f("41-a.0"+strings.Repeat("0", 80), nil, false)
}

func TestEncoding(t *testing.T) {
	ev := Event{Kind: Head, Chain: "ETH", Height: 7, Hash: "0x\"a\\b\nid: 1\r\n\ndata: x\x00\xff", Time: 9, Final: -1}
	id := func(s string) func([]byte) []byte { return func(b []byte) []byte { return append(b, s...) } }
	b := appendEvent(nil, id("7-a.0"), ev)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n")
	if len(lines) != 3 || lines[0] != "id: 7-a.0" || lines[1] != "event: head" || !strings.HasPrefix(lines[2], "data: ") {
		t.Fatalf("frame %q", b)
	}
	var h head
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &h); err != nil {
		t.Fatalf("data %q: %v", lines[2], err)
	}
	if h.Hash != "0x\"a\\b\nid: 1\r\n\ndata: x\x00\ufffd" || h.Height != 7 || h.Time != 9 || h.Final != -1 {
		t.Errorf("decoded %+v", h)
	}
	b = appendEvent(nil, id("7-a.10-b"), Event{Kind: Reorg, Chain: "BSC", Fork: 10, Depth: 3, Hash: "0xc"})
	if want := "id: 7-a.10-b\nevent: reorg\ndata: {\"chain\":\"BSC\",\"fork\":10,\"depth\":3,\"hash\":\"0xc\"}\n\n"; string(b) != want {
		t.Errorf("reorg frame %q, want %q", b, want)
	}
}

// TestSlowSubscriberDropped: a subscriber that does not read is dropped
// when its buffer fills; one that reads gets every event meanwhile.
func TestSlowSubscriberDropped(t *testing.T) {
	e := start(t, Options{Buffer: 4, WriteTimeout: time.Minute}, nil, smallSendBuffers)
	fast := e.open(t, "chains=ETH")
	e.stuck(t, "chains=ETH")
	testkit.WaitFor(t, "two subscribers", func() bool { return e.subscribers("ETH") == 2 })
	pad := strings.Repeat("f", 4000) // fills the slow one's socket sooner
	for i := int64(1); e.drops("slow") == 0; i++ {
		if i > 2000 {
			t.Fatal("the slow subscriber was never dropped")
		}
		ev := headEvent("ETH", i)
		ev.Hash = pad
		e.hub.Publish(ev)
		wantHead(t, fast.nextEvent(t), "ETH", i)
	}
	if e.subscribers("ETH") != 1 || e.drops("timeout") != 0 {
		t.Errorf("subscribers %v, timeouts %v; want 1 and 0", e.subscribers("ETH"), e.drops("timeout"))
	}
	e.hub.Publish(headEvent("ETH", 1e6))
	wantHead(t, fast.nextEvent(t), "ETH", 1e6)
}

// TestStuckWriteTimesOut: a write to a client that does not read ends at
// WriteTimeout, and the subscriber is dropped (reason timeout) while its
// buffer still has room.
func TestStuckWriteTimesOut(t *testing.T) {
	e := start(t, Options{Buffer: 1024, WriteTimeout: 200 * time.Millisecond, Heartbeat: time.Hour}, nil, smallSendBuffers)
	fast := e.open(t, "chains=ETH")
	e.stuck(t, "chains=ETH")
	testkit.WaitFor(t, "two subscribers", func() bool { return e.subscribers("ETH") == 2 })
	pad := strings.Repeat("f", 4000)
	for i := int64(1); i <= 200; i++ { // 800 KB: more than the sockets hold
		ev := headEvent("ETH", i)
		ev.Hash = pad
		e.hub.Publish(ev)
		wantHead(t, fast.nextEvent(t), "ETH", i)
	}
	testkit.WaitFor(t, "a timeout", func() bool { return e.drops("timeout") == 1 })
	if e.drops("slow") != 0 || e.subscribers("ETH") != 1 {
		t.Errorf("slow drops %v, subscribers %v; want 0 and 1", e.drops("slow"), e.subscribers("ETH"))
	}
}

func TestCaps(t *testing.T) {
	e := start(t, Options{MaxSubscribers: 3, MaxPerIP: 2, RetryHint: 1500 * time.Millisecond, Heartbeat: 20 * time.Millisecond}, nil, nil)
	a1 := e.open(t, "chains=ETH", testIP, "192.0.2.1")
	e.open(t, "chains=ETH", testIP, "192.0.2.1")
	_, resp := e.try(t, "chains=BSC", testIP, "192.0.2.1")
	body, _ := io.ReadAll(resp.Body)
	testkit.CheckEnvelope(t, "per IP", resp.StatusCode, body, 429, "50011", "address")
	if resp.Header.Get("Retry-After") != "2" {
		t.Errorf("429 Retry-After %q, want 2", resp.Header.Get("Retry-After"))
	}
	e.open(t, "chains=BSC", testIP, "2001:db8::1")
	_, resp = e.try(t, "chains=ETH", testIP, "192.0.2.9")
	body, _ = io.ReadAll(resp.Body)
	testkit.CheckEnvelope(t, "node full", resp.StatusCode, body, 503, "50001", "capacity")
	if resp.Header.Get("Retry-After") != "2" {
		t.Errorf("503 Retry-After %q, want 2", resp.Header.Get("Retry-After"))
	}
	if e.refusals("max_per_ip") != 1 || e.refusals("max_subscribers") != 1 {
		t.Errorf("refusals: per ip %v, full %v", e.refusals("max_per_ip"), e.refusals("max_subscribers"))
	}
	// A client that leaves frees its place once a write finds it gone
	// (the next heartbeat).
	a1.resp.Body.Close()
	testkit.WaitFor(t, "the place freed", func() bool { return e.subscribers("ETH") == 1 })
	e.open(t, "chains=ETH", testIP, "192.0.2.1")
}

func TestHeartbeat(t *testing.T) {
	e := start(t, Options{Heartbeat: 20 * time.Millisecond}, nil, nil)
	c := e.open(t, "chains=ETH")
	for range 3 {
		if ev := c.next(t); ev != (sse{event: "comment", data: "hb"}) {
			t.Fatalf("want a heartbeat, got %+v", ev)
		}
	}
}

// TestServerTimeoutsDoNotCutStreams: a stream outlives the server's
// ReadTimeout, WriteTimeout and IdleTimeout many times over.
func TestServerTimeoutsDoNotCutStreams(t *testing.T) {
	const serverTimeout = 100 * time.Millisecond
	e := start(t, Options{Heartbeat: serverTimeout}, func(s *fasthttp.Server) {
		s.ReadTimeout, s.WriteTimeout, s.IdleTimeout = serverTimeout, serverTimeout, serverTimeout
		s.Concurrency = 1 // a stream takes no worker: a request is still served
	}, nil)
	c := e.open(t, "chains=ETH")
	began := time.Now()
	for time.Since(began) < 10*serverTimeout {
		if ev := c.next(t); ev.event != "comment" {
			t.Fatalf("want heartbeats, got %+v", ev)
		}
	}
	other := e.open(t, "chains=BSC")
	e.hub.Publish(headEvent("ETH", 1))
	e.hub.Publish(headEvent("BSC", 2))
	wantHead(t, c.nextEvent(t), "ETH", 1)
	wantHead(t, other.nextEvent(t), "BSC", 2)
}

// TestDrain: every stream gets a retry: hint within [RetryHint,
// 2*RetryHint) and ends; new streams are refused with Retry-After.
func TestDrain(t *testing.T) {
	e := start(t, Options{RetryHint: 2 * time.Second, Heartbeat: time.Hour}, nil, nil)
	var cs []*client
	for range 5 {
		cs = append(cs, e.open(t, "chains=ETH"))
	}
	testkit.WaitFor(t, "five subscribers", func() bool { return e.subscribers("ETH") == 5 })
	e.hub.Drain()
	for _, c := range cs {
		got := c.end(t)
		if len(got) != 1 || got[0].retry == "" {
			t.Fatalf("want a retry hint alone, got %+v", got)
		}
		if ms, err := strconv.Atoi(got[0].retry); err != nil || ms < 2000 || ms >= 4000 {
			t.Errorf("retry %q, want 2000-3999 ms", got[0].retry)
		}
	}
	_, resp := e.try(t, "chains=ETH")
	body, _ := io.ReadAll(resp.Body)
	testkit.CheckEnvelope(t, "draining", resp.StatusCode, body, 503, "50001", "draining")
	if resp.Header.Get("Retry-After") != "2" || e.refusals("draining") != 1 {
		t.Errorf("Retry-After %q, refusals %v", resp.Header.Get("Retry-After"), e.refusals("draining"))
	}
	testkit.WaitFor(t, "no subscribers", func() bool { return e.subscribers("ETH") == 0 })
}

// TestClose: Close ends every stream at once, with readers and without.
func TestClose(t *testing.T) {
	e := start(t, Options{Heartbeat: time.Hour}, nil, nil)
	var cs []*client
	for range 20 {
		cs = append(cs, e.open(t, "chains=ETH,BSC"))
	}
	e.stuck(t, "chains=ETH")
	testkit.WaitFor(t, "21 subscribers", func() bool { return e.subscribers("ETH") == 21 })
	returnsBeforeStreams(t, "Close", e.hub.Close)
	for _, c := range cs {
		if got := c.end(t); len(got) != 0 {
			t.Errorf("after Close: %+v", got)
		}
	}
	if e.subscribers("ETH") != 0 || e.subscribers("BSC") != 0 {
		t.Errorf("subscribers left: %v %v", e.subscribers("ETH"), e.subscribers("BSC"))
	}
	e.hub.Publish(headEvent("ETH", 1)) // ignored
	e.hub.Close()                      // again: nothing
	_, resp := e.try(t, "chains=ETH")
	if resp.StatusCode != 503 {
		t.Errorf("after Close: %d", resp.StatusCode)
	}
}

// TestServerShutdown: the server's Shutdown does not wait for streams,
// and they end with a retry hint as on Drain (ctx.Done).
func TestServerShutdown(t *testing.T) {
	e := start(t, Options{Heartbeat: time.Hour}, nil, nil)
	c := e.open(t, "chains=ETH")
	testkit.WaitFor(t, "a subscriber", func() bool { return e.subscribers("ETH") == 1 })
	returnsBeforeStreams(t, "Shutdown", func() {
		if err := e.srv.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	if got := c.end(t); len(got) != 1 || got[0].retry == "" {
		t.Errorf("want a retry hint, got %+v", got)
	}
}

func TestOnListen(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	e := start(t, Options{Heartbeat: 20 * time.Millisecond, OnListen: func(chain string, on bool) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, fmt.Sprintf("%s %v", chain, on))
	}}, nil, nil)
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(calls, " ")
	}
	a := e.open(t, "chains=ETH,BSC")
	b := e.open(t, "chains=ETH")
	testkit.WaitFor(t, "both listening", func() bool { return seen() == "ETH true BSC true" })
	if !e.hub.Listening("ETH") || !e.hub.Listening("BSC") || e.hub.Listening("SOL") {
		t.Error("Listening")
	}
	a.resp.Body.Close()
	testkit.WaitFor(t, "BSC idle", func() bool { return seen() == "ETH true BSC true BSC false" })
	b.resp.Body.Close()
	testkit.WaitFor(t, "ETH idle", func() bool { return seen() == "ETH true BSC true BSC false ETH false" })
	if e.hub.Listening("ETH") {
		t.Error("ETH still listening")
	}
}

// TestHeldWrite: on the public listener's connections (tcpio), an event
// whose write is exactly tcpio.WriteChunk bytes arrives at once, not with
// the next heartbeat.
func TestHeldWrite(t *testing.T) {
	if heldWrite != tcpio.WriteChunk {
		t.Fatalf("heldWrite %d, tcpio.WriteChunk %d", heldWrite, tcpio.WriteChunk)
	}
	e := start(t, Options{Heartbeat: time.Hour}, func(s *fasthttp.Server) { s.WriteBufferSize = tcpio.WriteChunk }, tcpio.Listener)
	c := e.open(t, "chains=ETH")
	ev := headEvent("ETH", 1)
	frame := func() []byte {
		id := "1-" + strconv.FormatUint(uint64(tagOf(ev.Hash)), 36) + ".0"
		return appendEvent(nil, func(b []byte) []byte { return append(b, id...) }, ev)
	}
	// The tag's length moves with the hash: try paddings around the gap.
	base, gap := ev.Hash, heldWrite-len(frame())
	for pad := gap - 8; len(frame()) != heldWrite; pad++ {
		if pad > gap+8 {
			t.Fatalf("no padding makes a frame of %d bytes", heldWrite)
		}
		ev.Hash = base + strings.Repeat("a", pad)
	}
	e.hub.Publish(ev)
	wantHead(t, c.nextEvent(t), "ETH", 1)
}

// TestConcurrentPublish: publishers, subscribers coming and going and the
// heartbeat at once (for -race); every stream sees its ids in order.
func TestConcurrentPublish(t *testing.T) {
	e := start(t, Options{Heartbeat: time.Millisecond, Buffer: 1024}, nil, nil)
	stop := make(chan struct{})
	var pubs, subs sync.WaitGroup
	for _, chain := range []string{"ETH", "BSC"} {
		pubs.Go(func() {
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
					e.hub.Publish(headEvent(chain, i))
				}
			}
		})
	}
	for range 6 {
		c := e.open(t, "chains=ETH,BSC")
		subs.Go(func() {
			defer c.resp.Body.Close()
			var last [2]int64 // each chain's height in the id
			for n := 0; n < 100; {
				ev, ok := <-c.events
				if !ok {
					return // dropped as slow: allowed, the order is what is checked
				}
				if ev.event == "comment" {
					continue
				}
				n++
				var now [2]int64
				for i, part := range strings.Split(ev.id, ".") {
					h, _, _ := strings.Cut(part, "-")
					now[i], _ = strconv.ParseInt(h, 10, 64)
				}
				if now[0] < last[0] || now[1] < last[1] || now == last {
					t.Errorf("id %v after %v", now, last)
					return
				}
				last = now
			}
		})
	}
	subs.Wait()
	close(stop)
	pubs.Wait()
}

// TestKeptConns: on a server that keeps hijacked connections, streams
// run on their own connection (KeptConns): events, a resume, a stuck
// client's timeout, Drain and Close as on any server, and every
// connection closed by the hub.
func TestKeptConns(t *testing.T) {
	kept := func(s *fasthttp.Server) { s.KeepHijackedConns = true }
	e := start(t, Options{KeptConns: true, Buffer: 1024, WriteTimeout: 200 * time.Millisecond, Heartbeat: time.Hour}, kept, smallSendBuffers)
	c := e.open(t, "chains=ETH,BSC")
	e.stuck(t, "chains=ETH")
	testkit.WaitFor(t, "two subscribers", func() bool { return e.subscribers("ETH") == 2 })
	pad := strings.Repeat("f", 4000)
	var last string
	for i := int64(1); i <= 200; i++ {
		ev := headEvent("ETH", i)
		ev.Hash = pad
		e.hub.Publish(ev)
		got := c.nextEvent(t)
		wantHead(t, got, "ETH", i)
		if i == 100 {
			last = got.id
		}
	}
	testkit.WaitFor(t, "a timeout", func() bool { return e.drops("timeout") == 1 })
	r := e.open(t, "chains=ETH", "Last-Event-ID", last)
	for i := int64(101); i <= 200; i++ {
		wantHead(t, r.nextEvent(t), "ETH", i)
	}
	e.hub.Drain()
	for _, s := range []*client{c, r} {
		if got := s.end(t); len(got) != 1 || got[0].retry == "" {
			t.Errorf("want a retry hint, got %+v", got)
		}
	}

	e = start(t, Options{KeptConns: true, Heartbeat: time.Hour}, kept, nil)
	c = e.open(t, "chains=ETH")
	testkit.WaitFor(t, "a subscriber", func() bool { return e.subscribers("ETH") == 1 })
	returnsBeforeStreams(t, "Close", e.hub.Close)
	if got := c.end(t); len(got) != 0 {
		t.Errorf("after Close: %+v", got)
	}
}

// TestUnstartedStream: a stream subscribed whose connection the server
// never hands over holds neither Close nor its place for long: Publish
// drops it when its buffer fills.
func TestUnstartedStream(t *testing.T) {
	h := New(Options{Chains: []string{"ETH"}, Buffer: 4, MaxSubscribers: 1, Heartbeat: time.Hour})
	if _, _, r := h.subscribe([]*chain{h.chains["ETH"]}, netip.Addr{}, nil); r != nil {
		t.Fatal(r.err)
	}
	if _, _, r := h.subscribe([]*chain{h.chains["ETH"]}, netip.Addr{}, nil); r != refusedFull {
		t.Fatalf("second stream: %v, want refusedFull", r)
	}
	for i := int64(1); i <= 5; i++ {
		h.Publish(headEvent("ETH", i))
	}
	if h.Listening("ETH") {
		t.Error("still subscribed after its buffer filled")
	}
	if _, _, r := h.subscribe([]*chain{h.chains["ETH"]}, netip.Addr{}, nil); r != nil {
		t.Fatalf("its place was not given back: %v", r.err)
	}
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a stream that never started")
	}
}

// TestHeadsGoForward: heads from several sources, in any order, reach a
// browser once each, never backwards.
func TestHeadsGoForward(t *testing.T) {
	e := start(t, Options{}, nil, nil)
	c := e.open(t, "chains=ETH")
	at := func(height int64, hash string, final int64) Event {
		return Event{Kind: Head, Chain: "ETH", Height: height, Hash: hash, Final: final}
	}
	for _, ev := range []Event{
		at(10, "a", 5),
		at(10, "a", 5), // again: ignored
		at(9, "z", 5),  // behind: ignored
		at(10, "a", 4), // a lower final: ignored
		at(10, "a", 6), // the same head, a higher final
		at(10, "b", 6), // another block at the head
		at(12, "c", 6),
		at(11, "d", 7), // behind: ignored
	} {
		e.hub.Publish(ev)
	}
	e.hub.Publish(Event{Kind: Reorg, Chain: "ETH", Fork: 10, Depth: 1, Hash: "b"}) // reorgs always pass
	for _, want := range []Event{at(10, "a", 5), at(10, "a", 6), at(10, "b", 6), at(12, "c", 6)} {
		h := decodeHead(t, c.nextEvent(t))
		if h.Height != want.Height || h.Hash != want.Hash || h.Final != want.Final {
			t.Fatalf("got %+v, want %+v", h, want)
		}
	}
	if ev := c.nextEvent(t); ev.event != "reorg" {
		t.Fatalf("want the reorg, got %+v", ev)
	}
	if got := testutil.ToFloat64(e.m.events[Head]); got != 4 {
		t.Errorf("events_total{type=head} = %v, want 4", got)
	}
}

// returnsBeforeStreams runs stop (Close, Shutdown) and fails if it does
// not return while the streams it must not wait for are still open (a
// stream here has an hour's heartbeat, or a reader that never reads: had
// stop waited for one, it would not return at all). The bound only ends
// such a run; it is no measure of speed.
func returnsBeforeStreams(t *testing.T, what string, stop func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return in 30 s: it waits for the streams", what)
	}
}
