package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/purge"
	"explorer-edge/sim"
)

// webhookCDN records the purges POSTed to it, in order, each with
// whether it came after the test cut the first sender off (cut). Its
// first request waits for go; the kill-th (1-based) is recorded, then
// signals dying and waits for cut before it is answered.
type webhookCDN struct {
	kill   int
	first  chan struct{} // closed by the test: let the first request through
	dying  chan struct{} // closed at the kill-th request
	cutOff chan struct{} // closed by the test once the sender is cut off
	after  atomic.Bool   // set by the test as it cuts

	mu     sync.Mutex
	n      int
	before []string // tags of the requests before the cut, in order
	since  []string // and after
}

func (w *webhookCDN) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		Tags []string `json:"tags"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		rw.WriteHeader(400)
		return
	}
	w.mu.Lock()
	w.n++
	n := w.n
	if w.after.Load() {
		w.since = append(w.since, body.Tags...)
	} else {
		w.before = append(w.before, body.Tags...)
	}
	w.mu.Unlock()
	switch n {
	case 1:
		<-w.first
	case w.kill:
		close(w.dying)
		<-w.cutOff
	}
}

func (w *webhookCDN) got() (before, since []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.before), slices.Clone(w.since)
}

// redisCut forwards TCP connections to a Redis server until cut, which
// closes the listener and every connection at once: a node behind it
// loses Redis as a killed or partitioned node does, without giving up
// anything it holds there.
type redisCut struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newRedisCut(t *testing.T, to string) *redisCut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &redisCut{ln: ln}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			c.wg.Add(2)
			go func() { defer c.wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer c.wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(c.cut)
	return c
}

func (c *redisCut) addr() string { return c.ln.Addr().String() }

func (c *redisCut) cut() {
	c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// TestCDNFleetHolderDies: two edges on redis-server send the fleet's
// purges to a CDN (a webhook) from one node at a time. 500 operator
// purges are queued on both (published by either) while the holder's
// first request hangs; then the holder is cut off from Redis abruptly, in
// the middle of a request the CDN has taken (its lease neither released
// nor renewed, its cursor not raised, as a killed node's): the other
// takes the lease once it expires and sends from the cursor. None lost,
// the order of the log kept: what the dead holder sent, then the rest
// from a point no later than where it stopped (what it sent and could not
// mark comes again, in place).
func TestCDNFleetHolderDies(t *testing.T) {
	rdb := startRedis(t)
	cut := newRedisCut(t, rdb.addr)
	cdnAPI := &webhookCDN{kill: 3, first: make(chan struct{}), dying: make(chan struct{}), cutOff: make(chan struct{})}
	srv := httptest.NewServer(cdnAPI)
	defer srv.Close()
	var letFirst, letKilled sync.Once
	first := func() { letFirst.Do(func() { close(cdnAPI.first) }) }
	cutOff := func() { letKilled.Do(func() { close(cdnAPI.cutOff) }) }
	defer cutOff() // before srv.Close: no handler left waiting
	defer first()
	h := newUpstream(t, nil, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.Shared.Timeout = time.Second
		c.CDN.TagHeader, c.CDN.Provider, c.CDN.Endpoints = "xkey", "webhook", []string{srv.URL}
		c.CDN.Lease, c.CDN.ResendAfter, c.CDN.Rate, c.CDN.Burst = time.Second, 0, 1000, 1000
	})
	// The holder reaches Redis through cut; the other directly.
	h.cfg.Shared.RedisAddr = cut.addr()
	holder := startFleetEdge(h)
	// While its first request hangs the holder renews nothing: the test
	// renews its lease for it (its own token) until it is let through.
	keep := func() bool { return holder.shared.HoldCDNLease(5 * time.Second) }
	testkit.WaitFor(t, "the first node to hold the CDN lease", keep)
	h.cfg.Shared.RedisAddr = rdb.addr
	other := startFleetEdge(h)
	edges := []*fleetEdge{holder, other}

	naming := &other.p.settings.Load().cdn.Tags
	var want []string
	for i := range 500 {
		sel := fmt.Sprintf(`{"url":"/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d"}`, 1000+i)
		edges[i%2].purge(sel) // published by either node, one log
		keep()
		s, err := purge.Parse([]byte(sel), other.p.settings.Load().chains)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, naming.SelectorTags(s, func(string) int64 { return 0 }, 0)...)
	}
	testkit.WaitFor(t, "every node to queue the 500 purges", func() bool {
		return keep() && holder.p.cdn.Pending() >= 499 && other.p.cdn.Pending() >= 500
	})
	first()
	select {
	case <-cdnAPI.dying:
	case <-time.After(time.Minute):
		t.Fatal("the holder did not send its third request")
	}
	cdnAPI.after.Store(true)
	cut.cut()
	cutOff()
	testkit.WaitFor(t, "the other node to send them all", func() bool { return other.p.cdn.Pending() == 0 })

	before, since := cdnAPI.got()
	if len(before) == 0 || !slices.Equal(before, want[:len(before)]) {
		t.Fatalf("the holder sent %d tags, not the log's first in order: %v", len(before), before[:min(5, len(before))])
	}
	j := len(want) - len(since)
	if j < 0 || j > len(before) || !slices.Equal(since, want[j:]) {
		t.Fatalf("after the holder died the CDN got %d tags, want the log's from a point at or before %d (where the holder stopped) to its end, in order", len(since), len(before))
	}
	t.Logf("the holder sent %d of %d tags before it died; the other sent %d again and the remaining %d", len(before), len(want), len(before)-j, len(want)-len(before))
}

// tagsCDN records the tags of the purges POSTed to it, in order.
type tagsCDN struct {
	mu   sync.Mutex
	tags []string
}

func (c *tagsCDN) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		Tags []string `json:"tags"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		rw.WriteHeader(400)
		return
	}
	c.mu.Lock()
	c.tags = append(c.tags, body.Tags...)
	c.mu.Unlock()
}

func (c *tagsCDN) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tags)
}

// TestCDNPurgeTheFleetRefused: an edge of a fleet cut off from Redis
// answers an operator purge 503 (the fleet was not told) and still sends
// it to the CDN itself, at once and again after cdn.resend_after, without
// the lease it cannot take: left to the fleet's log, which never took it,
// it would not reach the CDN at all.
func TestCDNPurgeTheFleetRefused(t *testing.T) {
	rdb := startRedis(t)
	cut := newRedisCut(t, rdb.addr)
	cdnAPI := &tagsCDN{}
	srv := httptest.NewServer(cdnAPI)
	defer srv.Close()
	h := newUpstream(t, nil, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.Shared.Timeout = time.Second
		c.CDN.TagHeader, c.CDN.Provider, c.CDN.Endpoints = "xkey", "webhook", []string{srv.URL}
		c.CDN.ResendAfter, c.CDN.Rate, c.CDN.Burst = 50*time.Millisecond, 1000, 1000
	})
	h.cfg.Shared.RedisAddr = cut.addr()
	e := startFleetEdge(h)
	cut.cut()

	sel := `{"url":"/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=1000"}`
	if r := e.purgeAs("Bearer "+testPurgeToken, sel); r.status != 503 {
		t.Fatalf("a purge with Redis cut off: %d %s, want 503 (the fleet was not told)", r.status, r.body)
	}
	s, err := purge.Parse([]byte(sel), e.p.settings.Load().chains)
	if err != nil {
		t.Fatal(err)
	}
	tags := e.p.settings.Load().cdn.Tags.SelectorTags(s, func(string) int64 { return 0 }, 0)
	testkit.WaitFor(t, "the purge sent and sent again", func() bool { return len(cdnAPI.got()) >= 2*len(tags) && e.p.cdn.Idle() })
	if got := cdnAPI.got(); !slices.Equal(got, append(slices.Clone(tags), tags...)) {
		t.Fatalf("the CDN got %v, want %v twice", got, tags)
	}
}
