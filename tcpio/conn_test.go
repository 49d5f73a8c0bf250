package tcpio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// gatherServer serves bodies of the size asked in the path ("/1234") from a
// server set up as the public one: a WriteChunk write buffer on a
// GatherListener.
func gatherServer(t *testing.T) string {
	t.Helper()
	body := make([]byte, 16<<20)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	srv := &fasthttp.Server{
		WriteBufferSize: WriteChunk,
		Handler: func(ctx *fasthttp.RequestCtx) {
			n, _ := strconv.Atoi(string(ctx.Path()[1:]))
			ctx.Response.Header.Set("X-Size", strconv.Itoa(n))
			ctx.Response.SetBodyRaw(body[:n])
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(Listener(ln))
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// readAnswer reads one answer and checks its body is the n bytes asked.
func readAnswer(t *testing.T, br *bufio.Reader, n int) {
	t.Helper()
	var res fasthttp.Response
	if err := res.Read(br); err != nil {
		t.Fatalf("size %d: %v", n, err)
	}
	b := res.Body()
	if len(b) != n {
		t.Fatalf("size %d: got %d bytes", n, len(b))
	}
	for i, c := range b {
		if c != byte('a'+i%26) {
			t.Fatalf("size %d: byte %d is %q", n, i, c)
		}
	}
}

// Every size of answer arrives whole and in order: on one keep-alive
// connection, pipelined, and on connections closed after the answer (where
// the last write may be a held full chunk that only Close sends). The sizes
// cover every way an answer can end against the 1 KB buffer.
func TestGatherConnSendsEveryByte(t *testing.T) {
	addr := gatherServer(t)
	var sizes []int
	for n := 0; n <= 3*WriteChunk+64; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 64<<10, 1<<20)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a lost byte fails, not hangs
	br := bufio.NewReader(c)
	for _, n := range sizes {
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", n)
		readAnswer(t, br, n)
	}

	// Pipelined: fasthttp writes several answers before one flush.
	var reqs bytes.Buffer
	for _, n := range sizes[:200] {
		fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", n+WriteChunk-100)
	}
	if _, err := c.Write(reqs.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes[:200] {
		readAnswer(t, br, n+WriteChunk-100)
	}

	// An answer larger than the socket buffers (tcp_wmem's default maximum
	// is 4 MB) read 512 bytes at a time: the buffers fill, writev returns
	// EAGAIN and the write waits for the socket, then goes on (two EAGAINs
	// in the run that checked it).
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(slow, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", 16<<20)
	readAnswer(t, bufio.NewReaderSize(slow, 512), 16<<20)

	for _, n := range sizes[WriteChunk-400 : WriteChunk+64] {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", n)
		br := bufio.NewReader(c)
		readAnswer(t, br, n)
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Fatalf("size %d: %d bytes after the answer", n, len(rest))
		}
		c.Close()
	}
}

// gatherPair is a Conn and the client end of its connection.
func gatherPair(t testing.TB) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Listener(ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); sc.Close() })
	client.SetDeadline(time.Now().Add(20 * time.Second))
	return sc.(*Conn), client
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A deadline moved later is kept by the connection, not the socket: when
// the socket's earlier one passes, the read or write goes on to the later
// one. An earlier or cleared deadline applies at once, and a read or write
// fails when the deadline last set passes, never before.
func TestLazyDeadlines(t *testing.T) {
	past := time.Now().Add(-time.Second)

	t.Run("later read deadline outlives the socket's", func(t *testing.T) {
		c, client := gatherPair(t)
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		c.SetReadDeadline(time.Now().Add(time.Minute)) // kept, not told
		if !c.rd.set.Before(c.rd.want) {
			t.Fatal("a later deadline went to the socket")
		}
		sockets := c.rd.set
		go func() {
			<-time.After(time.Until(sockets) + 30*time.Millisecond) // the socket's deadline has passed
			client.Write([]byte("late"))
		}()
		buf := make([]byte, 8)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "late" {
			t.Fatalf("read %q, %v; want the bytes that came after the socket's deadline", buf[:n], err)
		}
	})

	t.Run("expired socket deadline, later one set", func(t *testing.T) {
		c, client := gatherPair(t)
		c.SetReadDeadline(past)
		c.SetReadDeadline(time.Now().Add(time.Minute))
		client.Write([]byte("x"))
		buf := make([]byte, 8)
		if n, err := c.Read(buf); err != nil || n != 1 {
			t.Fatalf("read %d, %v", n, err)
		}
		c.SetWriteDeadline(past)
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		if _, err := c.Write([]byte("y")); err != nil {
			t.Fatalf("write: %v", err)
		}
		c.SetReadDeadline(past)
		c.SetReadDeadline(time.Time{}) // cleared: applies at once
		client.Write([]byte("z"))
		if n, err := c.Read(buf); err != nil || n != 1 {
			t.Fatalf("read after clearing: %d, %v", n, err)
		}
	})

	t.Run("earlier deadline applies at once", func(t *testing.T) {
		c, client := gatherPair(t)
		c.SetReadDeadline(time.Now().Add(time.Minute))
		c.SetReadDeadline(past)
		client.Write([]byte("x"))
		if _, err := c.Read(make([]byte, 8)); !isTimeout(err) {
			t.Fatalf("read: %v, want a timeout", err)
		}
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		c.SetWriteDeadline(past)
		if _, err := c.Write([]byte("y")); !isTimeout(err) {
			t.Fatalf("write: %v, want a timeout", err)
		}
	})

	t.Run("fails when the deadline last set passes", func(t *testing.T) {
		c, _ := gatherPair(t)
		c.SetReadDeadline(past)
		want := time.Now().Add(50 * time.Millisecond)
		c.SetReadDeadline(want)
		_, err := c.Read(make([]byte, 8))
		if !isTimeout(err) {
			t.Fatalf("read: %v, want a timeout", err)
		}
		if time.Now().Before(want) {
			t.Fatal("the read timed out before the deadline last set")
		}
	})

	// A write that fills the socket is waiting when the socket's deadline
	// passes; it goes on from where it stopped, every byte once, in order.
	t.Run("write waiting on a full socket", func(t *testing.T) {
		c, client := gatherPair(t)
		body := make([]byte, 16<<20)
		for i := range body {
			body[i] = byte('a' + i%26)
		}
		c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		sockets := c.wd.set
		head := bytes.Repeat([]byte{'h'}, WriteChunk)
		done := make(chan error, 1)
		go func() {
			if _, err := c.Write(head); err != nil { // held
				done <- err
				return
			}
			_, err := c.Write(body)
			done <- err
		}()
		<-time.After(time.Until(sockets) + 30*time.Millisecond) // the write is waiting past the socket's deadline
		got, err := io.ReadAll(io.LimitReader(client, int64(len(head)+len(body))))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("write: %v", err)
		}
		if !bytes.Equal(got[:len(head)], head) || !bytes.Equal(got[len(head):], body) {
			t.Fatal("the bytes that arrived are not the ones written")
		}
	})
}

// BenchmarkDeadlines is the three deadline moves fasthttp makes per request
// (the idle wait, the request, the answer), with the edge's timeouts, on a
// plain TCP connection and on a Conn.
func BenchmarkDeadlines(b *testing.B) {
	c, _ := gatherPair(b)
	for _, conn := range []struct {
		name string
		c    net.Conn
	}{{"tcp", c.TCPConn}, {"gather", c}} {
		b.Run(conn.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				conn.c.SetReadDeadline(time.Now().Add(60 * time.Second))
				conn.c.SetReadDeadline(time.Now().Add(10 * time.Second))
				conn.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			}
		})
	}
}
