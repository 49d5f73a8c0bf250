package admission

import (
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The RateLimit-Policy and RateLimit fields of the IETF httpapi draft
// (draft-ietf-httpapi-ratelimit-headers-09, structured fields) on answers to
// a signed client with a request limit: its own limit, not the upstream's.
// The policy is named "client"; the token bucket of rate R and burst B
// reads as a quota of B requests (q) over the B/R seconds it takes to
// refill (w). r is the whole tokens left after this request, t the seconds
// until the bucket is full again (0 when it is).
var (
	hdrRateLimitPolicy = []byte("RateLimit-Policy")
	hdrRateLimit       = []byte("RateLimit")
)

// rateLimitPolicy is the RateLimit-Policy value of a client's limit.
func rateLimitPolicy(rate float64, burst int) []byte {
	b := append([]byte(nil), `"client";q=`...)
	b = strconv.AppendInt(b, int64(burst), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, int64(max(1, math.Ceil(float64(burst)/rate))), 10)
}

// RateLimitHeaders adds both fields for c, which has a limit.
func RateLimitHeaders(ctx *fasthttp.RequestCtx, c *Client) {
	l := c.limiter
	tokens := max(0, l.TokensAt(time.Now()))
	var buf [64]byte
	b := append(buf[:0], `"client";r=`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, int64(math.Ceil((float64(l.Burst())-tokens)/float64(l.Limit()))), 10)
	ctx.Response.Header.SetCanonical(hdrRateLimitPolicy, c.Policy)
	ctx.Response.Header.SetCanonical(hdrRateLimit, b)
}
