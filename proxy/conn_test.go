package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// gatherServer serves bodies of the size asked in the path ("/1234") from a
// server set up as the public one: a writeChunk write buffer on a
// GatherListener.
func gatherServer(t *testing.T) string {
	t.Helper()
	body := make([]byte, 16<<20)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	srv := &fasthttp.Server{
		WriteBufferSize: writeChunk,
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
	go srv.Serve(GatherListener(ln))
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
	for n := 0; n <= 3*writeChunk+64; n++ {
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
		fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", n+writeChunk-100)
	}
	if _, err := c.Write(reqs.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes[:200] {
		readAnswer(t, br, n+writeChunk-100)
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

	for _, n := range sizes[writeChunk-400 : writeChunk+64] {
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
