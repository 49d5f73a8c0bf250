// Package tcpio is the edge's TCP tuning of the public listener, kept in
// one place because it is the one part of the edge that reaches under the
// standard library. It exists for what it measured on a 2-core host under
// wrk (docs/performance.md, The hit path; make bench-compare):
//
//   - One write per answer (Conn): fasthttp's 1 KB write buffer holds the
//     headers and the start of the body, and the rest of the body leaves
//     with it in one writev, straight from the cache entry, never copied
//     through the buffer. An idle keep-alive connection holds 16 KiB
//     whatever the size of its last answer (45.9 KiB with fasthttp's usual
//     32 KB buffer after a 48 KB answer: bench/idleconns).
//   - Raw system calls (sock_linux.go): reads and writes that do not enter
//     the scheduler's syscall state; 5,017 sysmon wake-ups in a 5 s round
//     against 153, 23.2 against 21.7 us of CPU per hit.
//   - Lazy deadlines (lazyDeadline): fasthttp moves them three times per
//     request; the socket is told only when one comes earlier (581-636 ns
//     against 230-318 ns for the three moves, BenchmarkDeadlines).
//
// server.plain_conns turns all of it off: the edge then serves plain
// net.Conns with fasthttp's default write buffer, which is the first thing
// to try if a kernel or a Go release ever disagrees with it.
package tcpio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// WriteChunk is the size of fasthttp's response write buffer on a server
// that serves Conns. It holds the status line and headers of an answer
// (about 350 bytes on a hit) and the start of the body; the rest of the
// body does not pass through it.
const WriteChunk = 1024

type listener struct{ net.Listener }

// Listener hands out Conns for the TCP connections ln accepts; serve it
// from a fasthttp server with WriteBufferSize WriteChunk.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if g, err := New(tc, nil); err == nil {
			return g, nil
		}
	}
	return c, nil
}

// New wraps tc; onClose, if not nil, runs after the first Close.
func New(tc *net.TCPConn, onClose func()) (*Conn, error) {
	c := &Conn{TCPConn: tc, onClose: onClose}
	if err := c.sock.init(tc); err != nil {
		return nil, err
	}
	return c, nil
}

// Conn joins the writes of one answer into one system call without
// copying the body. fasthttp writes an answer through a bufio.Writer of
// WriteChunk bytes: the headers and the start of the body fill it, the
// Writer flushes it full, then hands the rest of the body straight to the
// connection. A write of exactly a full chunk is therefore held (copied,
// 1 KB) and sent with the next write as one writev; whatever else comes
// first (a read, a close) sends it before doing its own work.
//
// The small buffer is also what a keep-alive connection keeps between
// requests: fasthttp holds a connection's writer for its lifetime.
//
// On Linux, reads and writes are raw system calls (sock, conn_linux.go).
//
// Deadlines are kept lazily (lazyDeadline): fasthttp moves them three
// times per request, always later, and the socket is told only when one
// comes earlier.
//
// As fasthttp uses it, one goroutine reads and writes; a Read may run
// beside a Write or a Close, not beside another Read.
//
// Embedding *net.TCPConn keeps fasthttp's keep-alive settings; ReadFrom
// and WriteTo are redefined so that nothing reaches the socket around the
// held bytes. mu orders the held bytes against a Close from another
// goroutine (fasthttp's Shutdown closes idle connections).
type Conn struct {
	*net.TCPConn
	sock      // the system calls: writeAll and read
	onClose   func()
	closeOnce sync.Once

	rd lazyDeadline // the read goroutine's own

	mu   sync.Mutex // guards held and wd
	held []byte
	wd   lazyDeadline
}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 && len(p) == WriteChunk {
		c.held = append(c.held[:0], p...)
		return len(p), nil
	}
	held := len(c.held)
	n, err := c.send(c.held, p)
	c.held = c.held[:0]
	return max(n-held, 0), err
}

// flush sends held bytes on their own.
func (c *Conn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.send(c.held, nil)
	c.held = c.held[:0]
	return err
}

// send writes a then b, whole, under the write deadline; c.mu is held.
func (c *Conn) send(a, b []byte) (int, error) {
	sent := 0
	for {
		n, err := c.writeAll(c.TCPConn, a, b)
		sent += n
		if err == nil || !c.wd.early(err) {
			return sent, err
		}
		if err := c.TCPConn.SetWriteDeadline(c.wd.set); err != nil {
			return sent, err
		}
		k := min(n, len(a))
		a, b = a[k:], b[n-k:]
	}
}

func (c *Conn) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	for {
		n, err := c.read(c.TCPConn, p)
		if err == nil || !c.rd.early(err) {
			return n, err
		}
		if err := c.TCPConn.SetReadDeadline(c.rd.set); err != nil {
			return 0, err
		}
	}
}

// SetReadDeadline, like Read, belongs to the connection's goroutine.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if !c.rd.move(t) {
		return nil
	}
	return c.TCPConn.SetReadDeadline(t)
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wd.move(t) {
		return nil
	}
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *Conn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

// lazyDeadline is one direction's deadline, told to the socket only when
// it must be. fasthttp sets the read deadline twice per request (the idle
// wait, then the request) and the write deadline once, each time a little
// later than the last; on a TCP socket each move costs two clock reads and
// a timer update in the runtime (about 0.6 us of the 22 us a hit costs
// under wrk). Here a later deadline is only recorded: the socket keeps the
// earlier one, and when that one passes, the read or write that saw it is
// given the recorded deadline and tried again (early). An earlier or a
// cleared deadline goes to the socket at once. So a read or write never
// fails before the deadline last set, and fails when it passes.
type lazyDeadline struct {
	want time.Time // the deadline last set (zero: none)
	set  time.Time // the socket's (zero: none); never later than want
}

// move records t and says whether the socket must be given it now.
func (d *lazyDeadline) move(t time.Time) bool {
	d.want = t
	if t.IsZero() == d.set.IsZero() && !t.Before(d.set) {
		return false
	}
	d.set = t
	return true
}

// early says whether err is the socket's deadline passing before the one
// last set; then set has been moved to want, for the caller to give the
// socket and try again.
func (d *lazyDeadline) early(err error) bool {
	if !d.want.After(d.set) || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	d.set = d.want
	return true
}

func (c *Conn) Close() error {
	c.flush() // best effort: the peer may be gone
	err := c.TCPConn.Close()
	if c.onClose != nil {
		c.closeOnce.Do(c.onClose)
	}
	return err
}

func (c *Conn) CloseWrite() error {
	if err := c.flush(); err != nil {
		return err
	}
	return c.TCPConn.CloseWrite()
}

func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.TCPConn.ReadFrom(r)
}

func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.TCPConn.WriteTo(w)
}
