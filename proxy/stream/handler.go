package stream

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/internal/ipgroup"
	"explorer-edge/proxy/envelope"
)

// refusal is a stream refused for a cap or a drain: its envelope and its
// label of refused_total.
type refusal struct {
	err    *envelope.Error
	reason int
}

var (
	refusedDraining = &refusal{&envelope.Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: the node is draining, connect again"}, refuseDraining}
	refusedFull     = &refusal{&envelope.Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: event streams at capacity"}, refuseFull}
	refusedPerIP    = &refusal{&envelope.Error{Status: 429, Code: "50011", Msg: "Too Many Requests: too many event streams from this address"}, refusePerIP}
)

// Handler serves one EventSource: GET ?chains=ETH,BSC (the chains served,
// any case, comma-separated or repeated), resuming after the
// Last-Event-ID header, or the lastEventId parameter when the header is
// absent (a proxy may strip it; the browser sends the header on its own
// reconnections, so it wins). HEAD answers the headers alone.
//
// The stream is written on the hijacked connection, by a goroutine of its
// own: the server's WriteTimeout, ReadTimeout and IdleTimeout do not cut
// it, it takes no worker of the server's Concurrency, and Shutdown does
// not wait for it (it ends on ctx.Done, which Shutdown closes, like
// Drain). The response headers are those of ctx.Response when the
// handlers return, so headers a caller adds after Handler (CORS, a
// request id) are sent; the body is not chunked and ends with the
// connection (Connection: close).
func (h *Hub) Handler(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		writeError(ctx, envelope.ErrMethod, h.opt.RetryHint)
		return
	}
	cs, e := h.parseChains(ctx.QueryArgs())
	if e != nil {
		writeError(ctx, e, h.opt.RetryHint)
		return
	}
	if ctx.IsHead() {
		setStreamHeaders(ctx)
		return
	}
	last := ctx.Request.Header.Peek("Last-Event-ID")
	if len(last) == 0 {
		last = ctx.QueryArgs().Peek("lastEventId")
	}
	ip := h.clientIP(ctx)
	s, replay, r := h.subscribe(cs, ip, last)
	if r != nil {
		h.m.refused(r.reason)
		writeError(ctx, r.err, h.opt.RetryHint)
		return
	}
	setStreamHeaders(ctx)
	done := ctx.Done() // closed by the server's Shutdown
	conn := ctx.Conn()
	// No response from the server: it would be written with a length. The
	// hijack handler writes the headers itself; with no response to
	// write, the server hijacks even a request that asked to close.
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		// ctx is the server's until this returns; its headers are final
		// now. The copy outlives ctx.
		hdr := ctx.Response.Header.Header()
		start := append(append(make([]byte, 0, len(hdr)+len(replay)), hdr...), replay...)
		if h.opt.KeptConns {
			// The server forgets the connection when this returns, and
			// with it the request's buffers; c holds the read buffer.
			go h.serve(conn, s, start, done)
			return
		}
		h.serve(c, s, start, done)
	})
}

func setStreamHeaders(ctx *fasthttp.RequestCtx) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	// nginx would buffer the stream (proxy_buffering) without it.
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	// A body that ends with the connection (identity); sets
	// Connection: close.
	ctx.Response.Header.SetContentLength(-2)
}

// writeError answers e's envelope; a refusal for load says when to come
// back.
func writeError(ctx *fasthttp.RequestCtx, e *envelope.Error, retry time.Duration) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(e.Status)
	ctx.Response.Header.SetContentType("application/json")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	if e.Status == fasthttp.StatusMethodNotAllowed {
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD")
	}
	if e.Status == fasthttp.StatusServiceUnavailable || e.Status == fasthttp.StatusTooManyRequests {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(envelope.CeilSeconds(retry)))
	}
	ctx.Response.SetBodyRaw(envelope.Append(nil, e.Code, e.Msg))
}

func (h *Hub) clientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	if h.opt.ClientIP != nil {
		return h.opt.ClientIP(ctx)
	}
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	return ipgroup.Key(ip, ipgroup.DefaultV6Bits)
}

// parseChains reads the chains parameter: every value, comma-separated,
// each a chain served (any case); repeats count once.
func (h *Hub) parseChains(args *fasthttp.Args) ([]*chain, *envelope.Error) {
	var cs []*chain
	for _, v := range args.PeekMulti("chains") {
		for name := range bytes.SplitSeq(v, []byte{','}) {
			c := h.chainNamed(name)
			if c == nil {
				return nil, envelope.Invalid("chains", h.unknownChain(name))
			}
			if !containsChain(cs, c) {
				cs = append(cs, c)
			}
		}
	}
	if len(cs) == 0 {
		return nil, envelope.Missing("chains")
	}
	return cs, nil
}

func (h *Hub) chainNamed(name []byte) *chain {
	for _, c := range h.order {
		if len(name) == len(c.name) && strings.EqualFold(c.name, string(name)) {
			return c
		}
	}
	return nil
}

func containsChain(cs []*chain, c *chain) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

func (h *Hub) unknownChain(name []byte) string {
	served := make([]string, len(h.order))
	for i, c := range h.order {
		served[i] = c.name
	}
	const maxShown = 32 // what a client sent is quoted, not echoed whole
	if len(name) > maxShown {
		name = append(name[:maxShown:maxShown], "..."...)
	}
	if len(name) == 0 {
		return "empty chain name; served: " + strings.Join(served, ",")
	}
	return "unknown chain " + strconv.Quote(string(name)) + "; served: " + strings.Join(served, ",")
}

// serve writes one stream until it ends: the client is gone, a write
// passed WriteTimeout, Publish dropped it, or the hub (Drain, Close) or
// the server (Shutdown) ended it. start is the headers and the replay.
func (h *Hub) serve(c net.Conn, s *sub, start []byte, done <-chan struct{}) {
	if !h.begin() {
		h.leave(s)
		c.Close()
		return
	}
	defer h.wg.Done()
	err := h.loop(c, s, start, done)
	c.Close() // the server closes it too, unless it keeps hijacked connections
	if h.leave(s) && errors.Is(err, os.ErrDeadlineExceeded) {
		h.m.dropped(reasonTimeout)
	}
}

// batchMax bounds the events joined into one write.
const batchMax = 16

func (h *Hub) loop(c net.Conn, s *sub, start []byte, done <-chan struct{}) error {
	if err := h.write(c, start); err != nil {
		return err
	}
	var batch [batchMax]*frame
	var buf []byte
	for {
		select {
		case f, ok := <-s.ch:
			if !ok {
				return nil // dropped by Publish
			}
			// What else is waiting leaves in the same write.
			batch[0] = f
			n := 1
			for n < batchMax && len(s.ch) > 0 {
				if batch[n], ok = <-s.ch; !ok {
					break
				}
				n++
			}
			b := f.b
			if n > 1 {
				buf = buf[:0]
				for _, g := range batch[:n] {
					buf = append(buf, g.b...)
				}
				b = buf
			}
			err := h.write(c, b)
			for i, g := range batch[:n] {
				h.release(g)
				batch[i] = nil
			}
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
		case <-h.drain:
			h.write(c, h.retry())
			return nil
		case <-done:
			h.write(c, h.retry())
			return nil
		case <-h.done:
			return nil
		}
	}
}

// retry is the retry: line of a draining stream: RetryHint, plus up to as
// much again at random, so that a drained node's browsers spread over the
// others rather than arrive together.
func (h *Hub) retry() []byte {
	d := h.opt.RetryHint + rand.N(h.opt.RetryHint)
	return appendRetry(nil, d)
}

// heldWrite: tcpio.Conn, the public listener's, holds a write of exactly
// tcpio.WriteChunk bytes until the next write (fasthttp always follows
// one with more). A stream may have no next write for a heartbeat, so
// such a write goes out as two.
const heldWrite = 1024

// write sends b whole within WriteTimeout.
func (h *Hub) write(c net.Conn, b []byte) error {
	if err := c.SetWriteDeadline(time.Now().Add(h.opt.WriteTimeout)); err != nil {
		return err
	}
	if len(b) == heldWrite {
		if _, err := c.Write(b[:1]); err != nil {
			return err
		}
		b = b[1:]
	}
	_, err := c.Write(b)
	return err
}
