package cache

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// gzipLevel is the level answers are compressed at, once, when stored.
// Measured on explorer-sim's answers of every route (BenchmarkEncodings,
// docs/performance.md#bytes-per-answer): level 1 of klauspost/compress
// holds answers of 3 KB or more in 22-37% of their size, at about 30 us
// for 10 KB; level 9 saves 5-11% more of the bytes for 3 to 4 times the
// CPU on the miss path, which an answer of 8 MB pays as tens of
// milliseconds.
const gzipLevel = gzip.BestSpeed

// compressor is a gzip writer with the buffer it writes into; both are
// reused: a new flate compressor allocates about 1 MB.
type compressor struct {
	zw  *gzip.Writer
	buf bytes.Buffer
}

var compressors = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzipLevel)
	return &compressor{zw: zw}
}}

// compress returns the gzip of body in a slice of its exact size, or nil
// when that is not smaller than body.
func compress(body []byte) []byte {
	c := compressors.Get().(*compressor)
	defer compressors.Put(c)
	c.buf.Reset()
	c.buf.Grow(len(body) / 2) // most answers compress to a quarter or a third: no growth
	c.zw.Reset(&c.buf)
	c.zw.Write(body)
	c.zw.Close()
	if c.buf.Len() >= len(body) {
		return nil
	}
	z := bytes.Clone(c.buf.Bytes())
	if c.buf.Cap() > 1<<20 { // do not keep an 8 MB answer's buffer in the pool
		c.buf = bytes.Buffer{}
	}
	return z
}

// inflater is a gzip reader with the reader of its input; both are reused,
// so inflating an entry allocates nothing once the pool is warm.
type inflater struct {
	zr   gzip.Reader
	br   bytes.Reader
	more [1]byte // a local one escapes: one allocation per inflate
}

var inflaters = sync.Pool{New: func() any { return new(inflater) }}

// inflaterOf is a pooled inflater reading the gzip z; Put it back.
func inflaterOf(z []byte) (*inflater, error) {
	f := inflaters.Get().(*inflater)
	f.br.Reset(z)
	if err := f.zr.Reset(&f.br); err != nil {
		inflaters.Put(f)
		return nil, err
	}
	f.zr.Multistream(false)
	return f, nil
}

var errInflate = errors.New("cache: stored gzip does not inflate to its size")

// Inflate appends e's identity body to dst[:0] and returns it: Body
// copied, or Gzip inflated. dst grows only when it is shorter than Size.
// The gzip's checksum is checked.
func (e *Entry) Inflate(dst []byte) ([]byte, error) {
	if e.Gzip == nil {
		return append(dst[:0], e.Body...), nil
	}
	out := slices.Grow(dst[:0], e.Size)[:e.Size]
	f, err := inflaterOf(e.Gzip)
	if err != nil {
		return dst[:0], err
	}
	defer inflaters.Put(f)
	if _, err := io.ReadFull(&f.zr, out); err != nil {
		return dst[:0], err
	}
	// Reading past the end checks the CRC and that nothing is left.
	if n, err := f.zr.Read(f.more[:]); n != 0 || err != io.EOF {
		return dst[:0], errInflate
	}
	return out, nil
}

// scratch holds buffers for an identity body read once and let go (tags,
// checks): a 10 KB answer does not allocate 10 KB each time.
var scratch sync.Pool // *[]byte

// WithIdentity calls fn with e's identity body: Body, or Gzip inflated into
// a reused buffer that fn must not keep.
func (e *Entry) WithIdentity(fn func(body []byte) error) error {
	if e.Gzip == nil {
		return fn(e.Body)
	}
	bp, _ := scratch.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	body, err := e.Inflate(*bp)
	if err == nil {
		err = fn(body)
	}
	if cap(body) <= 1<<20 { // an 8 MB answer's buffer is not kept
		*bp = body[:0]
		scratch.Put(bp)
	}
	return err
}

// Reader returns e's identity body as a stream, for an answer too large to
// inflate whole into each response that takes no gzip: the memory a
// request holds is then the inflater's, not the answer's size. Close gives
// the inflater back; fasthttp closes a body stream once it is sent or
// dropped.
func (e *Entry) Reader() io.ReadCloser {
	if e.Gzip == nil {
		return io.NopCloser(bytes.NewReader(e.Body))
	}
	f, err := inflaterOf(e.Gzip)
	if err != nil {
		return io.NopCloser(errReader{err})
	}
	return &streamer{f: f}
}

type streamer struct{ f *inflater }

func (s *streamer) Read(p []byte) (int, error) {
	if s.f == nil {
		return 0, io.EOF
	}
	return s.f.zr.Read(p)
}

func (s *streamer) Close() error {
	if s.f != nil {
		inflaters.Put(s.f)
		s.f = nil
	}
	return nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
