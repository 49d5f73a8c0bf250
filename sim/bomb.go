package sim

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
)

// defaultGzipBombBytes is the decoded size of a gzip bomb when
// Faults.GzipBombBytes is 0: 64 MiB, far beyond explorer-edge's default
// upstream.max_response_bytes of 8 MiB, from about 64 KB on the wire.
const defaultGzipBombBytes = 64 << 20

// gzipBomb is the compressed body of a bomb of one decoded size.
type gzipBomb struct {
	decoded int
	body    []byte
}

// The envelope a bomb decodes to: code "0", its data array led by spaces.
const bombHead, bombTail = `{"code":"0","msg":"","data":[`, `]}`

// gzipBomb returns the compressed body that decodes to exactly decoded
// bytes. Deflate needs about 90 ms for 64 MiB of spaces, so the body is
// built once and kept; only the size asked last is kept, so a client
// setting many sizes cannot make the sim hold many bodies.
func (s *Server) gzipBomb(decoded int) []byte {
	s.bombMu.Lock()
	defer s.bombMu.Unlock()
	if b := s.bomb; b != nil && b.decoded == decoded {
		return b.body
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write([]byte(bombHead))
	spaces := bytes.Repeat([]byte{' '}, 1<<20)
	for n := max(decoded-len(bombHead)-len(bombTail), 0); n > 0; n -= min(n, len(spaces)) {
		zw.Write(spaces[:min(n, len(spaces))])
	}
	zw.Write([]byte(bombTail))
	zw.Close() // a bytes.Buffer does not fail
	s.bomb = &gzipBomb{decoded: decoded, body: buf.Bytes()}
	return s.bomb.body
}

// writeGzipBomb answers 200 with the bomb, declared gzip whatever the
// request accepted.
func (s *Server) writeGzipBomb(w http.ResponseWriter, decoded int) {
	body := s.gzipBomb(decoded)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Encoding", "gzip")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
