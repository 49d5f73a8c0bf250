package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
)

// Hostile clients run beside the load for its whole time, against the first
// node. Each comes from a loopback address of
// its own (Linux routes all of 127/8 to lo), so the edge's per-address caps
// and limits apply to it alone:
//
//   - idle: from 127.0.0.2, keeps max_conns_per_ip + 4 connections open
//     without a request; those beyond the cap must be refused at once with
//     429/50011.
//   - framing: from 127.0.0.4, a request with both Content-Length and
//     Transfer-Encoding, or a Transfer-Encoding after a bare LF, followed by
//     a smuggled second request: one answer, 400/50036, and the connection
//     closed (the smuggled request never answered).
//   - big headers: from 127.0.0.4, 16 KiB of headers: 431/50036.
//   - forged: through the trusted proxy (127.0.0.1), X-Forwarded-For on two
//     lines, the client's own forged one first and the proxy's
//     ("192.0.2.66") second: the edge must limit 192.0.2.66, so at most
//     ip_burst + ip_rate x seconds are let through.
//   - spray: through the trusted proxy, a new address in every
//     X-Forwarded-For, tens of thousands over the run: the per-IP table
//     stays bounded and every answer is right.
//
// The load itself comes through the trusted proxy too, from many addresses
// (see soak.one), none of them near the per-IP limit.

// Addresses of the hostile clients and of the client behind the forging one.
const (
	idleAddr   = "127.0.0.2"
	rawAddr    = "127.0.0.4"
	forgedReal = "192.0.2.66"
)

// The edge's per-address settings in the soak (edgeConfig).
const (
	ipRate     = 20
	ipBurst    = 40
	ipTracked  = 4096
	connsPerIP = 16
	idleExtra  = 4 // connections beyond the cap the idle client tries
	// hostileConns is how many connections the hostile clients hold at
	// most at once: the idle ones, the forging and the spraying clients'
	// four each, the raw one.
	hostileConns = connsPerIP + idleExtra + 4 + 4 + 1
)

// hostile counts what the hostile clients saw; bad lists what a correct
// edge would not have done.
type hostile struct {
	edgeAddr string
	ck       *checker
	pl       *pool
	start    time.Time
	seconds  float64 // how long the forging client ran

	idleRefused, idleRounds, idleClosed      atomic.Int64
	idleMaxHeld                              atomic.Int64
	framingSent, framingOK                   atomic.Int64
	bigSent, bigOK                           atomic.Int64
	forgedSent, forgedAllowed, forgedLimited atomic.Int64
	spraySent                                atomic.Int64
	c                                        counts // answers judged by the checker (forged, spray)
	errors                                   atomic.Int64

	badN atomic.Int64
	mu   sync.Mutex
	bad  []string // the first keepWrong of badN
}

func (h *hostile) fail(format string, args ...any) {
	h.badN.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) < keepWrong {
		h.bad = append(h.bad, fmt.Sprintf("+%.1fs ", time.Since(h.start).Seconds())+fmt.Sprintf(format, args...))
	}
}

// run starts every hostile client and returns when ctx ends and they are
// done.
func (h *hostile) run(ctx context.Context) {
	h.start = time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { h.idle(ctx) })
	wg.Go(func() { h.raw(ctx) })
	wg.Go(func() { h.forged(ctx) })
	wg.Go(func() { h.spray(ctx) })
	wg.Wait()
	h.seconds = time.Since(h.start).Seconds()
}

// dialFrom opens a connection to the edge from the loopback address from.
func (h *hostile) dialFrom(from string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", h.edgeAddr)
}

// idle keeps connsPerIP + idleExtra connections open from idleAddr. Each
// round tops them up, then waits until the edge has refused those beyond
// its cap: every refusal must be a 429/50011 envelope, and more than the
// cap still open 2 s after they were made is a failure. The edge closes
// the held ones when server.read_timeout passes without a request; a later
// round replaces them.
func (h *hostile) idle(ctx context.Context) {
	type conn struct {
		c    net.Conn
		done chan struct{} // closed when the edge answered or closed it
	}
	ended := make(chan struct{}, 1) // a conn ended since it was last drained
	var held []*conn
	defer func() {
		for _, c := range held {
			c.c.Close()
			<-c.done
		}
	}()
	openNow := func() int {
		live := held[:0]
		for _, c := range held {
			select {
			case <-c.done:
				c.c.Close()
			default:
				live = append(live, c)
			}
		}
		held = live
		return len(held)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		for openNow() < connsPerIP+idleExtra {
			nc, err := h.dialFrom(idleAddr)
			if err != nil {
				if strings.Contains(err.Error(), "assign requested address") {
					h.fail("idle: cannot dial from %s (%v): the host has no 127/8 on lo", idleAddr, err)
					return
				}
				h.errors.Add(1)
				break
			}
			c := &conn{c: nc, done: make(chan struct{})}
			held = append(held, c)
			go func() {
				h.idleAnswer(ctx, nc)
				close(c.done)
				select {
				case ended <- struct{}{}:
				default: // a signal is pending already
				}
			}()
		}
		h.idleRounds.Add(1)
		// The refusals come at accept; a loaded machine gets 2 s.
		deadline := time.NewTimer(2 * time.Second)
		open := openNow()
	wait:
		for open > connsPerIP {
			select {
			case <-ended:
				open = openNow()
			case <-deadline.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		deadline.Stop()
		if ctx.Err() != nil {
			break // the end of the load, not the edge, cut the wait short
		}
		if int64(open) > h.idleMaxHeld.Load() {
			h.idleMaxHeld.Store(int64(open))
		}
		if open > connsPerIP {
			h.fail("idle: %d connections from %s open 2 s after they were made; server.max_conns_per_ip is %d", open, idleAddr, connsPerIP)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// idleAnswer reads what the edge sends on an idle connection: nothing
// until it closes it (held), or a refusal.
func (h *hostile) idleAnswer(ctx context.Context, c net.Conn) {
	b, _ := io.ReadAll(io.LimitReader(c, 64<<10))
	if len(b) == 0 {
		if ctx.Err() == nil {
			h.idleClosed.Add(1) // closed by the edge, not by us at the end
		}
		return
	}
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		h.fail("idle: the edge sent %s, no HTTP answer", clip(b, 120))
		return
	}
	body, _ := io.ReadAll(res.Body)
	code, _, ok := errorEnvelope(body)
	switch {
	case res.StatusCode == 408 && ok && code == "50036":
		h.idleClosed.Add(1) // held until server.read_timeout, then closed with a 408
	case res.StatusCode == 429 && ok && code == "50011":
		h.idleRefused.Add(1)
	default:
		h.fail("idle: a connection got %d %s, want 429/50011 at once (beyond the cap) or 408/50036 after read_timeout", res.StatusCode, clip(body, 120))
	}
}

// raw sends the framing attacks and the oversized headers, five a second.
func (h *hostile) raw(ctx context.Context) {
	t := h.pl.hot[0].path
	smuggled := "GET " + h.pl.hot[1%len(h.pl.hot)].path + " HTTP/1.1\r\nHost: x\r\n\r\n"
	head := "GET " + t + " HTTP/1.1\r\nHost: x\r\n"
	framing := []string{
		head + "Content-Length: 47\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		head + "Transfer-Encoding: chunked\r\nContent-Length: 47\r\n\r\n0\r\n\r\n" + smuggled,
		head + "X-Note: a\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
	}
	big := head + "X-Pad: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		if i%2 == 0 {
			h.framingSent.Add(1)
			if h.exchange(framing[(i/2)%len(framing)], 400, "framing") {
				h.framingOK.Add(1)
			}
		} else {
			h.bigSent.Add(1)
			if h.exchange(big, 431, "16 KiB of headers") {
				h.bigOK.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// exchange writes raw from rawAddr and reads until the edge closes the
// connection: exactly one answer, status/50036 as an envelope, and the
// connection closed within 5 s.
func (h *hostile) exchange(raw string, status int, what string) bool {
	c, err := h.dialFrom(rawAddr)
	if err != nil {
		h.errors.Add(1)
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		// The edge may refuse and close before it has read everything.
		h.errors.Add(1)
	}
	all, err := io.ReadAll(c)
	var ne net.Error
	open := errors.As(err, &ne) && ne.Timeout()
	br := bufio.NewReader(bytes.NewReader(all))
	var answers []string
	ok := false
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(res.Body)
		answers = append(answers, fmt.Sprintf("%d %s", res.StatusCode, clip(body, 100)))
		if len(answers) == 1 {
			code, _, env := errorEnvelope(body)
			ok = res.StatusCode == status && env && code == "50036"
		}
	}
	switch {
	case len(answers) == 0:
		h.fail("%s: no answer (connection left open: %v)", what, open)
	case !ok:
		h.fail("%s: got %s, want %d/50036", what, answers[0], status)
	case len(answers) > 1:
		h.fail("%s: %d answers, the smuggled request answered: %v", what, len(answers), answers)
	case open:
		h.fail("%s: connection left open after the refusal", what)
	default:
		return true
	}
	return false
}

// forged sends 100 requests a second through the trusted proxy with the
// client's forged X-Forwarded-For line before the proxy's.
func (h *hostile) forged(ctx context.Context) {
	hc := loadClient(h.edgeAddr, 4)
	defer hc.CloseIdleConnections()
	lim := rate.NewLimiter(100, 1)
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for lim.Wait(ctx) == nil {
		t := h.pl.hot[r.IntN(len(h.pl.hot))]
		req.Reset()
		resp.Reset()
		req.SetRequestURI(t.path)
		req.Header.SetHost(hc.Addr)
		req.Header.Add("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", r.IntN(256)))
		req.Header.Add("X-Forwarded-For", forgedReal)
		h.forgedSent.Add(1)
		start := time.Now()
		if err := hc.Do(req, resp); err != nil {
			h.errors.Add(1)
			continue
		}
		if resp.StatusCode() == 429 {
			code, _, ok := errorEnvelope(resp.Body())
			if !ok || code != "50011" || len(resp.Header.Peek(fasthttp.HeaderRetryAfter)) == 0 {
				h.fail("forged X-Forwarded-For: 429 %s without a 50011 envelope and Retry-After", clip(resp.Body(), 100))
			}
			h.forgedLimited.Add(1)
			continue
		}
		h.forgedAllowed.Add(1)
		h.ck.check(&h.c, nil, t, sent{}, resp, start, time.Now())
	}
}

// forgedBound is what the edge may let through of the forging client in
// the seconds it ran: its bucket, plus 10% and a few for the boundaries.
func (h *hostile) forgedBound() float64 {
	return 1.1*(ipBurst+ipRate*h.seconds) + 5
}

// spray asks 200 times a second through the trusted proxy, each time for a
// client address never used before (from 198.18.0.0/15).
func (h *hostile) spray(ctx context.Context) {
	hc := loadClient(h.edgeAddr, 4)
	defer hc.CloseIdleConnections()
	lim := rate.NewLimiter(200, 1)
	r := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for n := 0; lim.Wait(ctx) == nil; n++ {
		t := h.pl.hot[r.IntN(len(h.pl.hot))]
		req.Reset()
		resp.Reset()
		req.SetRequestURI(t.path)
		req.Header.SetHost(hc.Addr)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.%d.%d.%d", 18+(n>>16)%2, (n>>8)&255, n&255))
		h.spraySent.Add(1)
		start := time.Now()
		if err := hc.Do(req, resp); err != nil {
			h.errors.Add(1)
			continue
		}
		h.ck.check(&h.c, nil, t, sent{}, resp, start, time.Now())
	}
}

// judge adds the hostile clients' failures to res.
func (h *hostile) judge(res *result) {
	if n := h.badN.Load(); n > 0 {
		res.fail("hostile clients: %d answers a correct edge would not give (first: %s)", n, h.bad[0])
	}
	if h.idleRounds.Load() > 0 && h.idleRefused.Load() == 0 {
		res.fail("hostile clients: %d connections from one address never refused (server.max_conns_per_ip %d)", connsPerIP+idleExtra, connsPerIP)
	}
	if a, b := float64(h.forgedAllowed.Load()), h.forgedBound(); a > b {
		res.fail("hostile clients: %.0f of %d requests with a forged X-Forwarded-For line let through in %.1fs, more than %s's bucket allows (%.0f)",
			a, h.forgedSent.Load(), h.seconds, forgedReal, b)
	}
	if n := h.c.wrong.Load(); n > 0 {
		res.fail("hostile clients: %d wrong answers to the forging and spraying clients", n)
	}
	if n := h.c.clientErrors.Load(); n > 0 {
		res.fail("hostile clients: %d client errors of the forging and spraying clients", n)
	}
}

// summary is the hostile clients' lines of the summary.
func (h *hostile) summary(add func(k, format string, args ...any)) {
	add("hostile: idle conns", "%d rounds of %d connections from %s: at most %d held at once (cap %d), %d refused with 429, %d closed by the edge after read_timeout",
		h.idleRounds.Load(), connsPerIP+idleExtra, idleAddr, h.idleMaxHeld.Load(), connsPerIP, h.idleRefused.Load(), h.idleClosed.Load())
	add("hostile: framing", "%d requests with Content-Length and Transfer-Encoding (or TE after a bare LF) and a smuggled one: %d answered 400/50036 alone and closed",
		h.framingSent.Load(), h.framingOK.Load())
	add("hostile: big headers", "%d requests with 16 KiB of headers: %d answered 431/50036", h.bigSent.Load(), h.bigOK.Load())
	add("hostile: forged XFF", "%d requests with a forged line before the proxy's: %d let through, %d limited (bound %.0f = 1.1 x (%d + %d/s x %.1fs) + 5)",
		h.forgedSent.Load(), h.forgedAllowed.Load(), h.forgedLimited.Load(), h.forgedBound(), ipBurst, ipRate, h.seconds)
	add("hostile: XFF spray", "%d requests, each from a new address (ip_max_tracked %d); %d wrong, %d client errors (forged and spray together)",
		h.spraySent.Load(), ipTracked, h.c.wrong.Load(), h.c.clientErrors.Load())
	add("hostile: bad", "%d; %d connection errors (not judged)", h.badN.Load(), h.errors.Load())
}
