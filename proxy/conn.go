package proxy

import (
	"io"
	"net"
	"sync"
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
	g := &gatherConn{TCPConn: tc}
	if err := g.sock.init(tc); err != nil {
		return c, nil
	}
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
// On Linux, reads and writes are raw system calls (sock, conn_linux.go).
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
	sock // the system calls: writeAll and read

	mu   sync.Mutex
	held []byte
}

func (c *gatherConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 && len(p) == writeChunk {
		c.held = append(c.held[:0], p...)
		return len(p), nil
	}
	held := len(c.held)
	n, err := c.writeAll(c.TCPConn, c.held, p)
	c.held = c.held[:0]
	return max(n-held, 0), err
}

// flush sends held bytes on their own.
func (c *gatherConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.writeAll(c.TCPConn, c.held, nil)
	c.held = c.held[:0]
	return err
}

func (c *gatherConn) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.read(c.TCPConn, p)
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
