package server

import (
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// HeaderRequestID names the header of a request's id.
var HeaderRequestID = []byte("X-Request-Id")

// maxRequestIDLen bounds an X-Request-Id taken from a client.
const maxRequestIDLen = 128

// RequestIDs makes the X-Request-Id of requests that came without one: a
// random prefix per process and a counter, "3f9a1c2b7d4e5f60-42". Unique
// across a fleet (64 random bits per process) and cheap: no allocation, no
// randomness per request.
type RequestIDs struct {
	prefix [17]byte // 16 hex digits and '-'
	n      atomic.Uint64
}

// Init draws the prefix of the ids made.
func (r *RequestIDs) Init() {
	var b [8]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	hex.Encode(r.prefix[:16], b[:])
	r.prefix[16] = '-'
}

// Set sets the answer's X-Request-Id: the client's (a load balancer's
// or a frontend's trace id) when it is sane, so the edge's access log joins
// theirs, else a new one. fail keeps it across its reset.
func (r *RequestIDs) Set(ctx *fasthttp.RequestCtx) {
	if id := ctx.Request.Header.PeekBytes(HeaderRequestID); saneRequestID(id) {
		ctx.Response.Header.SetCanonical(HeaderRequestID, id)
		return
	}
	var buf [len(RequestIDs{}.prefix) + 20]byte
	b := append(buf[:0], r.prefix[:]...)
	b = strconv.AppendUint(b, r.n.Add(1), 10)
	ctx.Response.Header.SetCanonical(HeaderRequestID, b)
}

// saneRequestID: 1 to maxRequestIDLen visible ASCII characters. Anything
// else (empty, long, spaces, control or non-ASCII bytes) could garble a
// log line or a header downstream; it is replaced, not echoed.
func saneRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for _, c := range id {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// ResetResponse empties the response for an error, keeping X-Request-Id.
func ResetResponse(ctx *fasthttp.RequestCtx) {
	var buf [maxRequestIDLen]byte
	id := append(buf[:0], ctx.Response.Header.PeekBytes(HeaderRequestID)...)
	ctx.Response.Reset()
	if len(id) > 0 {
		ctx.Response.Header.SetCanonical(HeaderRequestID, id)
	}
}
