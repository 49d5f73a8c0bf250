package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// What an anonymous client can make the upstream do through the event
// stream (docs/stream.md, What clients can make the upstream do), counted
// in upstream calls per block with explorer-sim's chain moved by the
// test's clock.

// chainCalls counts the upstream calls of chain's newest pages: the
// default one (limit=20) or the page of 100 polled instead
// (cache.block_pages), and the others.
func chainCalls(h *harness, chain string) (def, variants int) {
	for _, target := range h.rec.all() {
		if !strings.Contains(target, "/block/block-list?chainShortName="+chain) || strings.Contains(target, "height=") {
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

// churn asks a stream of chains and resets the connection at once: the
// edge subscribes it, and finds it gone at its first write.
func churn(addr, chains string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	io.WriteString(c, "GET /edge/v1/events?chains="+chains+" HTTP/1.1\r\nHost: edge\r\n\r\n")
	c.(*net.TCPConn).SetLinger(0) // a reset, not a close
	c.Close()
}

// TestEventsChurnPollsAtItsPace: clients that open a stream and reset it
// at once, in a loop, are each a chain's first listener again and again
// (a heartbeat every 10ms finds the reset ones gone); the chain's poller
// still polls at its own pace. TRADE_ZONE, listened to by 8 such clients
// alone, costs the upstream the calls per block of CHAINX, listened to by
// one steady stream, over the same 10 blocks: within one call per 10
// blocks. (Before, each first listener woke the poller into a poll at
// once: 50.7 calls a second for 8 churners on both chains.)
func TestEventsChurnPollsAtItsPace(t *testing.T) {
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) {
		c.Stream.MaxPerIP = 10000
		c.Stream.Heartbeat = 10 * time.Millisecond
		// After a new head each poller polls again a quarter interval
		// later (500ms: the test's clock is behind the chain's time, so
		// the next block is always due): the test moves the chain well
		// within it, and each poll finds one block, however the two
		// pollers' phases fall.
		c.Stream.PollInterval = 2 * time.Second
		c.Stream.Lease = 4 * time.Second
	})
	steady := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	steady.nextHead(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churns atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				churn(h.addr, "trade_zone")
				churns.Add(1)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	testkit.WaitFor(t, "TRADE_ZONE polled for the churners", func() bool {
		return polls(t, h, "TRADE_ZONE") > 0 && churns.Load() > 100
	})
	// Each block is moved once both chains' pollers found the last one:
	// the two are paced alike by the test.
	found := func() {
		t.Helper()
		a, b := polls(t, h, "CHAINX", "new"), polls(t, h, "TRADE_ZONE", "new")
		h.clock.Advance(time.Second) // a block on each chain
		testkit.WaitFor(t, "both chains' new heads", func() bool {
			return polls(t, h, "CHAINX", "new") > a && polls(t, h, "TRADE_ZONE", "new") > b
		})
	}
	found()
	steady0, _ := chainCalls(h, "CHAINX")
	churned0, _ := chainCalls(h, "TRADE_ZONE")
	const blocks = 10
	for range blocks {
		found()
	}
	h.node.Close(context.Background()) // no poll in flight while counting
	steadyN, _ := chainCalls(h, "CHAINX")
	churnedN, _ := chainCalls(h, "TRADE_ZONE")
	s, c := steadyN-steady0, churnedN-churned0
	t.Logf("%d blocks: %d calls of CHAINX's page (one steady stream), %d of TRADE_ZONE's (8 clients, %d streams opened and reset)",
		blocks, s, c, churns.Load())
	if d := c - s; d > blocks/10 || d < -blocks/10 {
		t.Fatalf("%d blocks: %d upstream calls for the churned chain, %d for the steady one; want the same within %d",
			blocks, c, s, blocks/10)
	}
}

// TestEventsVariantsChosenByClients: one client, however many requests it
// sends, chooses no variant: after 200 newest-page requests of one client
// (limit 1 to 100 on both chains) each head costs the upstream one call
// of the default page per chain and nothing else. Three distinct clients
// asking make a variant; however many they make, at most stream.variants
// are refreshed per head and chain (the worst case docs/stream.md states:
// 1 + stream.variants calls per block and chain).
func TestEventsVariantsChosenByClients(t *testing.T) {
	// cache.block_pages off: each variant refreshed costs a call, which
	// is what the choice bounds (on, they cost none:
	// TestEventsVariantsOneCallPerBlock).
	h := newHarness(t, withStream, withBlockPagesOff, func(c *config.Config, _ *sim.Config) { c.Stream.Variants = 4 })
	s := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX,TRADE_ZONE")
	heads := map[string]int64{}
	next := func() {
		t.Helper()
		h.clock.Advance(time.Second)
		want := h.sim.Head("CHAINX")
		for heads["CHAINX"] < want || heads["TRADE_ZONE"] < h.sim.Head("TRADE_ZONE") {
			ev := s.next(t)
			if ev.typ == "head" {
				e, _ := decodeHead(t, ev)
				heads[e.Chain] = max(heads[e.Chain], e.Height)
			}
		}
	}
	next()
	for limit := 1; limit <= 100; limit++ {
		for _, chain := range []string{"chainx", "trade_zone"} {
			if r := h.get("/api/v5/chainx/block/block-list?chainShortName=" + chain + "&limit=" + strconv.Itoa(limit)); r.status != 200 {
				t.Fatalf("limit %d of %s: %d %s", limit, chain, r.status, r.body)
			}
		}
	}
	next()
	count := func() (def, variants int) {
		for _, c := range []string{"CHAINX", "TRADE_ZONE"} {
			d, v := chainCalls(h, c)
			def, variants = def+d, variants+v
		}
		return def, variants
	}
	polled := func() float64 { return polls(t, h, "CHAINX") + polls(t, h, "TRADE_ZONE") }
	def0, var0 := count()
	polls0 := polled()
	const blocks = 5
	for range blocks {
		next()
	}
	def, vars := count()
	if vars != var0 {
		t.Fatalf("after one client's 200 requests: %d calls of variants over %d heads, want none", vars-var0, blocks)
	}
	// A poll is counted after its call: one in flight is in one count.
	if n := polled() - polls0; float64(def-def0) > n+2 || float64(def-def0) < n-2 {
		t.Fatalf("%d calls of the default pages for %v polls", def-def0, n)
	}

	// Three clients asking ten limits of CHAINX: four are refreshed.
	for limit := 1; limit <= 10; limit++ {
		askFrom(t, h, "/api/v5/chainx/block/block-list?chainShortName=chainx&limit="+strconv.Itoa(limit), 3)
	}
	next()
	_, var0 = count()
	for range blocks {
		next()
	}
	if _, vars = count(); vars-var0 != 4*blocks {
		t.Fatalf("ten variants of three clients: %d calls of variants over %d heads, want %d (stream.variants a head)", vars-var0, blocks, 4*blocks)
	}
}

// TestEventsStale: when the chain's newest page cannot be had for longer
// than a block interval, a stream is told (stale, with the newest height
// and the time of the last answer), and told again when it can be had,
// before the next head: a page tells "no new block" from "delayed".
func TestEventsStale(t *testing.T) {
	var failing atomic.Bool
	h := newHarnessWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if failing.Load() && strings.Contains(r.URL.Path, "block-list") {
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, withStream, func(c *config.Config, _ *sim.Config) {
		c.Upstream.Retries = 0
		c.Upstream.BreakerOpenFor = 100 * time.Millisecond
	})
	s := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	h.clock.Advance(time.Second)
	head, _ := s.nextHead(t, h.sim.Head("CHAINX")-1)
	failing.Store(true)
	testkit.WaitFor(t, "a failed poll", func() bool { return polls(t, h, "CHAINX", "error") > 0 })
	h.clock.Advance(2 * time.Second) // failing for longer than the block interval (1s)
	ev := s.next(t)
	for ev.typ == "head" { // a head polled before the failure
		ev = s.next(t)
	}
	if ev.typ != "stale" || !strings.Contains(ev.data, `"stale":true`) || !strings.Contains(ev.data, `"height":`+strconv.FormatInt(head.Height, 10)) {
		t.Fatalf("upstream failing: %+v, want a stale event at height %d", ev, head.Height)
	}
	failing.Store(false)
	if ev := s.next(t); ev.typ != "stale" || !strings.Contains(ev.data, `"stale":false`) {
		t.Fatalf("upstream back: %+v, want the stale event's end", ev)
	}
	if got, _ := s.nextHead(t, head.Height); got.Height != h.sim.Head("CHAINX") {
		t.Fatalf("upstream back: head %d, want %d", got.Height, h.sim.Head("CHAINX"))
	}
}

// TestEventsURLTooLong: the stream's path keeps server.max_url_bytes, as
// every route does: a 7 KB URI is 414 with the 50036 envelope.
func TestEventsURLTooLong(t *testing.T) {
	h := newHarness(t, withStream)
	r := h.get("/edge/v1/events?chains=CHAINX&pad=" + strings.Repeat("x", 7<<10))
	testkit.CheckEnvelope(t, "a 7 KB URI", r.status, r.body, 414, "50036", "")
}

// TestEventsVariantsOfVerifiedClients: in auth.mode signed a variant's
// clients are the verified ones, whatever addresses they come from: one
// client asking from three addresses chooses nothing; three clients make
// the variant, refreshed with each head.
func TestEventsVariantsOfVerifiedClients(t *testing.T) {
	names := []string{"a", "b", "c"}
	// cache.block_pages off: a variant refreshed costs a call of its own.
	h := newHarness(t, withStream, withBlockPagesOff, func(c *config.Config, _ *sim.Config) {
		c.Auth.Mode = "signed"
		for _, n := range names {
			c.Auth.Clients = append(c.Auth.Clients, config.Client{Name: n, APIKey: "key-" + n, SecretKey: "secret-" + n, Passphrase: "pass-" + n})
		}
	})
	variant := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	ask := func(client string, from int) {
		t.Helper()
		hdr := append(signedAs("key-"+client, "secret-"+client, "pass-"+client, variant), "X-Forwarded-For", "10.0.0."+strconv.Itoa(from))
		if r := h.get(variant, hdr...); r.status != 200 {
			t.Fatalf("client %s: %d %s", client, r.status, r.body)
		}
	}
	s := openStream(t, h.addr, "/edge/v1/events?chains=CHAINX")
	last, _ := s.nextHead(t, 0)
	blocks := func(n int) (variants int) {
		t.Helper()
		_, v0 := headCalls(h)
		for range n {
			h.clock.Advance(time.Second)
			last, _ = s.nextHead(t, last.Height)
		}
		_, v := headCalls(h)
		return v - v0
	}
	for from := 1; from <= 3; from++ {
		ask("a", from)
	}
	if v := blocks(3); v != 0 {
		t.Fatalf("one verified client from three addresses: %d calls of the variant over 3 heads, want none", v)
	}
	ask("b", 4)
	ask("c", 5)
	blocks(1) // the head that saw the third client
	if v := blocks(3); v != 3 {
		t.Fatalf("three verified clients: %d calls of the variant over 3 heads, want 3", v)
	}
}
