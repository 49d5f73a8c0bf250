package proxy

import (
	"io"
	"net"
	"sync"
	"syscall"
	"unsafe"
)

// writeChunk is the size of fasthttp's response write buffer on the public
// listener. It holds the status line and headers of an answer (about 350
// bytes on a hit) and the start of the body; the rest of the body does not
// pass through it (see gatherConn).
const writeChunk = 1024

// gatherListener hands fasthttp gatherConns.
type gatherListener struct{ net.Listener }

// GatherListener wraps the public listener so that an answer larger than
// the write buffer leaves in one writev from the stored body, with no copy
// of the body through fasthttp's buffer (see gatherConn).
func GatherListener(ln net.Listener) net.Listener { return gatherListener{ln} }

func (l gatherListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	g := &gatherConn{TCPConn: tc, raw: raw}
	g.writeFn, g.readFn = g.writeSome, g.readSome
	return g, nil
}

// gatherConn joins the writes of one answer into one system call without
// copying the body. fasthttp writes an answer through a bufio.Writer of
// writeChunk bytes: the headers and the start of the body fill it, the
// Writer flushes it full, then hands the rest of the body straight to the
// connection. A write of exactly a full chunk is therefore held (copied,
// 1 KB) and sent with the next write as one writev; whatever else comes
// first (a read, a close) sends it before doing its own work.
//
// The small buffer is also what a keep-alive connection keeps between
// requests: fasthttp holds a connection's writer for its lifetime.
//
// Reads and writes are raw system calls on the non-blocking socket: they
// return at once, with EAGAIN when there is nothing to read or no room to
// write, and then the goroutine waits for the socket through Go's poller,
// under the connection's deadlines, as net.Conn's Read and Write do. Go's
// own Read and Write enter the scheduler's syscall state instead; a call
// that outlasts 20 us (a loopback write of an 8 KB answer often does, and
// any call does when the host takes the CPU away) lets the sysmon thread
// take the processor from the thread in the syscall and hand it to another,
// after which sysmon wakes every 20 us for a while to look again.
//
// As fasthttp uses it, one goroutine reads and writes; a Read may run
// beside a Write or a Close, not beside another Read.
//
// Embedding *net.TCPConn keeps fasthttp's keep-alive settings; ReadFrom
// and WriteTo are redefined so that nothing reaches the socket around the
// held bytes. mu orders the held bytes against a Close from another
// goroutine (fasthttp's Shutdown closes idle connections).
type gatherConn struct {
	*net.TCPConn
	raw     syscall.RawConn
	writeFn func(fd uintptr) bool // writeSome, bound once
	readFn  func(fd uintptr) bool // readSome, bound once

	// The read in progress, for readSome.
	in   []byte
	got  int
	rerr error

	mu   sync.Mutex
	held []byte

	// The write in progress, for writeSome.
	out  [2][]byte
	iovs [2]syscall.Iovec
	sent int
	werr error
}

func (c *gatherConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 {
		held := len(c.held)
		n, err := c.writeAll(c.held, p)
		c.held = c.held[:0]
		return max(n-held, 0), err
	}
	if len(p) == writeChunk {
		c.held = append(c.held[:0], p...)
		return len(p), nil
	}
	return c.writeAll(p, nil)
}

// writeAll sends a then b, whole, and returns how many bytes went.
func (c *gatherConn) writeAll(a, b []byte) (int, error) {
	c.out = [2][]byte{a, b}
	c.sent, c.werr = 0, nil
	err := c.raw.Write(c.writeFn) // a deadline or a close: an *net.OpError
	if err == nil && c.werr != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: c.werr}
	}
	c.out, c.iovs = [2][]byte{}, [2]syscall.Iovec{} // keep no body alive
	return c.sent, err
}

// writeSome is the RawConn callback: writev until c.out is sent (true), an
// error (true, in c.werr) or a full socket buffer (false: wait and retry).
func (c *gatherConn) writeSome(fd uintptr) bool {
	for {
		n := 0
		for _, b := range c.out {
			if len(b) > 0 {
				c.iovs[n] = syscall.Iovec{Base: &b[0]}
				c.iovs[n].SetLen(len(b))
				n++
			}
		}
		if n == 0 {
			return true
		}
		w, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&c.iovs[0])), uintptr(n))
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.werr = errno
			return true
		}
		c.sent += int(w)
		for i := range c.out {
			k := min(int(w), len(c.out[i]))
			c.out[i] = c.out[i][k:]
			w -= uintptr(k)
		}
	}
}

// flush sends held bytes on their own.
func (c *gatherConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.writeAll(c.held, nil)
	c.held = c.held[:0]
	return err
}

func (c *gatherConn) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.in, c.got, c.rerr = p, 0, nil
	err := c.raw.Read(c.readFn) // a deadline or a close: an *net.OpError
	c.in = nil
	switch {
	case err != nil:
		return 0, err
	case c.rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: c.rerr}
	case c.got == 0:
		return 0, io.EOF
	}
	return c.got, nil
}

// readSome is the RawConn callback: one read into c.in (true), or nothing
// there yet (false: wait and retry).
func (c *gatherConn) readSome(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.in[0])), uintptr(len(c.in)))
		switch errno {
		case 0:
			c.got = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.rerr = errno
			return true
		}
	}
}

func (c *gatherConn) Close() error {
	c.flush() // best effort: the peer may be gone
	return c.TCPConn.Close()
}

func (c *gatherConn) CloseWrite() error {
	if err := c.flush(); err != nil {
		return err
	}
	return c.TCPConn.CloseWrite()
}

func (c *gatherConn) ReadFrom(r io.Reader) (int64, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.TCPConn.ReadFrom(r)
}

func (c *gatherConn) WriteTo(w io.Writer) (int64, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.TCPConn.WriteTo(w)
}
