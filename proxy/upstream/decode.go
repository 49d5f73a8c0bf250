package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/valyala/fasthttp"
)

// errDecodedTooLarge: a compressed answer decodes to more than the limit.
var errDecodedTooLarge = errors.New("decoded answer larger than upstream.max_response_bytes")

// decodeBody returns a copy of resp's body, decoded, of at most limit bytes.
// fasthttp's MaxResponseBodySize bounds only the bytes on the wire, and its
// BodyUncompressed inflates all of them: 510 KB of gzip became 512 MiB. Here
// a compressed body is read through the decoder for at most limit+1 bytes,
// so a bomb costs limit bytes, not its decoded size. The edge sends no
// Accept-Encoding; an upstream that compresses anyway may use gzip or
// deflate (RFC 9110 section 8.4.1); any other coding is malformed.
func decodeBody(resp *fasthttp.Response, limit int) ([]byte, error) {
	enc := bytes.TrimSpace(resp.Header.ContentEncoding())
	raw := resp.Body()
	var zr io.Reader
	switch {
	case len(enc) == 0 || bytes.EqualFold(enc, []byte("identity")):
		if len(raw) > limit { // fasthttp's bound already; kept for a body read otherwise
			return nil, errDecodedTooLarge
		}
		if len(raw) > 64<<10 {
			// Taken from resp, not copied: an 8 MB answer is not held
			// twice, and its buffer does not go back to fasthttp's pool,
			// where buffers of that size would stay.
			return resp.SwapBody(nil), nil
		}
		return bytes.Clone(raw), nil // resp is reused by fasthttp after release
	case bytes.EqualFold(enc, []byte("gzip")), bytes.EqualFold(enc, []byte("x-gzip")):
		r, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		zr = r
	case bytes.EqualFold(enc, []byte("deflate")):
		r, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		zr = r
	default:
		return nil, fmt.Errorf("content-encoding %q was not asked for", enc)
	}
	body, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(body) > limit {
		return nil, errDecodedTooLarge
	}
	return body, nil
}
