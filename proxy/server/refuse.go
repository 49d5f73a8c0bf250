package server

import (
	"bytes"
	"errors"
	"explorer-edge/proxy/envelope"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"
)

// MaxBodyBytes bounds a request body fasthttp reads: no route takes one, so
// only a stray Content-Length of a GET or a refused POST ever comes near it.
const MaxBodyBytes = 4 << 10

var keyTransferEncoding = []byte("transfer-encoding:")

// FramingError returns why a request's framing is refused, or nil. Another
// HTTP/1.1 parser in front of the edge may delimit such a request
// differently than fasthttp did, and the bytes one of them takes for the
// body the other takes for a second request (RFC 9112 section 6.1,
// "request smuggling"):
//
//   - Transfer-Encoding, alone or with Content-Length. No route takes a
//     body, so none is accepted, whatever its value (fasthttp lets
//     chunked win over Content-Length and keeps the connection).
//   - a line of the header block ending in a bare LF. fasthttp ends a line
//     there (RFC 9112 section 2.2 allows it); a parser that ends lines at
//     CRLF only reads the next header as part of this one, so a
//     Transfer-Encoding after it is seen by one side alone.
//   - obsolete line folding (RFC 9112 section 5.2 lets a server refuse it):
//     fasthttp joins the line to the header before.
//
// It costs one IndexByte per header line and reads only what fasthttp
// parsed already (ContentLength is -1 for chunked, RawHeaders the header
// block as received): the hit path allocates nothing for it.
func FramingError(h *fasthttp.RequestHeader) *envelope.Error {
	if h.ContentLength() == -1 {
		return errFramingTE
	}
	raw := h.RawHeaders()
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return nil
		}
		if i == 0 || raw[i-1] != '\r' {
			return errFramingLF
		}
		switch raw[0] {
		case ' ', '\t':
			return errFramingFold
		case 't', 'T': // "Transfer-Encoding: identity" leaves no other trace
			if i > len(keyTransferEncoding) && bytes.EqualFold(raw[:len(keyTransferEncoding)], keyTransferEncoding) {
				return errFramingTE
			}
		}
		raw = raw[i+1:]
	}
	return nil
}

// UnreadableError is the error table's answer to a request fasthttp could
// not read with err.
func UnreadableError(err error, headersTooLarge *envelope.Error) *envelope.Error {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		return headersTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return errBodyTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return errReadTimeout
	}
	return errUnreadable
}

// Requests refused before routing: their framing is ambiguous (RFC 9112
// sections 2.2, 5.2, 6.1; see FramingError) or fasthttp could not read them
// (see Proxy.unreadable). The connection is closed after each.
var (
	errFramingTE    = &envelope.Error{Status: 400, Code: "50036", Msg: "Request refused: Transfer-Encoding is not accepted, no route takes a body"}
	errFramingLF    = &envelope.Error{Status: 400, Code: "50036", Msg: "Request refused: a header line ends in a bare LF, not CRLF"}
	errFramingFold  = &envelope.Error{Status: 400, Code: "50036", Msg: "Request refused: obsolete line folding in a header"}
	errUnreadable   = &envelope.Error{Status: 400, Code: "50036", Msg: "Malformed request: the request line or a header cannot be parsed"}
	errBodyTooLarge = &envelope.Error{Status: 413, Code: "50036", Msg: "Request body larger than " + strconv.Itoa(MaxBodyBytes) + " bytes: no route takes a body"}
	errReadTimeout  = &envelope.Error{Status: 408, Code: "50036", Msg: "Request not received within server.read_timeout"}
)

// HeadersTooLarge is the 431 of a request line and headers beyond the
// read buffer (server.max_header_bytes).
func HeadersTooLarge(max int) *envelope.Error {
	return &envelope.Error{Status: 431, Code: "50036", Msg: "Request line and headers larger than " + strconv.Itoa(max) + " bytes (server.max_header_bytes)"}
}
