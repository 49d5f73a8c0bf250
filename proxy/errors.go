package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/valyala/fasthttp"
)

// Error is every failure a client can see: an envelope of the explorer API
// with its HTTP status (README.md, Errors).
type Error struct {
	Status     int    // HTTP status for the client
	Code       string // the explorer's code, e.g. "50036"
	Msg        string // says which parameter and why
	RetryAfter int    // seconds for Retry-After; 0 = none
	Err        error  // cause, if any; never shown to the client
	reason     string // upstream failures: why, for Cache-Status details
	// answered: the upstream's own answer to the question (an envelope of
	// the client's side, such as 50036), not a failure: no stale copy
	// stands in for it.
	answered bool
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s (%s): %v", e.Code, e.Msg, e.Err)
	}
	return e.Code + " (" + e.Msg + ")"
}

func (e *Error) Unwrap() error { return e.Err }

func errMissing(p string) *Error {
	return &Error{Status: 400, Code: "50014", Msg: "Parameter " + p + " cannot be empty"}
}

func errInvalid(p, why string) *Error {
	return &Error{Status: 400, Code: "50036", Msg: "Parameter " + p + " error: " + why}
}

func errTooMany(p string, n int) *Error {
	return &Error{Status: 400, Code: "50025", Msg: "Parameter " + p + " error: at most " + strconv.Itoa(n) + " hashes"}
}

var (
	errNotFound = &Error{Status: 404, Code: "404", Msg: "Not found: the edge serves only the six /api/v5/chainx routes"}
	errMethod   = &Error{Status: 405, Code: "50115", Msg: "Method not allowed: use GET or HEAD"}
	errURL      = &Error{Status: 414, Code: "50036", Msg: "Request URI too long"}
)

// Requests refused before routing: their framing is ambiguous (RFC 9112
// sections 2.2, 5.2, 6.1; see framingError) or fasthttp could not read them
// (see Proxy.unreadable). The connection is closed after each.
var (
	errFramingTE    = &Error{Status: 400, Code: "50036", Msg: "Request refused: Transfer-Encoding is not accepted, no route takes a body"}
	errFramingLF    = &Error{Status: 400, Code: "50036", Msg: "Request refused: a header line ends in a bare LF, not CRLF"}
	errFramingFold  = &Error{Status: 400, Code: "50036", Msg: "Request refused: obsolete line folding in a header"}
	errUnreadable   = &Error{Status: 400, Code: "50036", Msg: "Malformed request: the request line or a header cannot be parsed"}
	errBodyTooLarge = &Error{Status: 413, Code: "50036", Msg: "Request body larger than " + strconv.Itoa(maxBodyBytes) + " bytes: no route takes a body"}
	errReadTimeout  = &Error{Status: 408, Code: "50036", Msg: "Request not received within server.read_timeout"}
)

// errHeadersTooLarge is the 431 of a request line and headers beyond the
// read buffer (server.max_header_bytes).
func errHeadersTooLarge(max int) *Error {
	return &Error{Status: 431, Code: "50036", Msg: "Request line and headers larger than " + strconv.Itoa(max) + " bytes (server.max_header_bytes)"}
}

// Upstream failure kinds: the outcome label and the client's envelope.
var (
	errUnreachable = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream unreachable", reason: "unreachable"}
	errBreakerOpen = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream failing, circuit open", reason: "breaker-open"}
	errBudget      = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream quota spent", RetryAfter: 1, reason: "quota"}
	errThrottled   = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream rate limited", RetryAfter: 1, reason: "quota"}
	errBadGateway  = &Error{Status: 502, Code: "50026", Msg: "Upstream error", reason: "upstream-error"}
	errMalformed   = &Error{Status: 502, Code: "50026", Msg: "Upstream error: malformed answer", reason: "malformed"}
	errTooLarge    = &Error{Status: 502, Code: "50026", Msg: "Upstream error: answer too large", reason: "too-large"}
	errTimeout     = &Error{Status: 504, Code: "50004", Msg: "Upstream timeout", reason: "timeout"}
	// errCredentials: the upstream refused the edge's own account (HTTP
	// 401, or a code 50102-50113 about the signed headers). Never passed
	// to a client as the upstream said it: the client's credentials are
	// fine, the edge's are not.
	errCredentials = &Error{Status: 502, Code: "50026", Msg: "Upstream error: the upstream refused the edge's own credentials", reason: "credentials"}
	// errUpstreamNotFound: the upstream answered 404, no such path. The
	// edge asks only the API's own routes, so upstream.base_url is wrong
	// (a prefix too many, another service): the edge's failure, never
	// passed on as the client's 404.
	errUpstreamNotFound = &Error{Status: 502, Code: "50026", Msg: "Upstream error: the upstream has no such path (check upstream.base_url)", reason: "not-found"}
	// errFailingEnvelope: the upstream answered an envelope that says it is
	// failing (upstreamFailing). It is the account's failure; when no
	// other account can be asked, the envelope is passed on as it came.
	errFailingEnvelope = &Error{Status: 502, Code: "50026", Msg: "Upstream error", reason: reasonEnvelope}
)

// credentialsRefused reports whether an upstream answer refuses the
// account's credentials rather than the question: HTTP 401, or a code
// of the explorer's authentication range, 50102 (timestamp) to 50113
// (signature).
func credentialsRefused(status int, code string) bool {
	if status == fasthttp.StatusUnauthorized {
		return true
	}
	n, err := strconv.Atoi(code)
	return err == nil && n >= 50102 && n <= 50113
}

// reasonEnvelope: the upstream answered an error envelope (a code other than "0").
const reasonEnvelope = "upstream-envelope"

// upstreamFailing reports whether an upstream error envelope says the
// upstream failed rather than that the question is wrong: a 5xx or 429
// status, or a code of the server's side (50001 unavailable, 50004 timeout,
// 50011 rate limited, 50026 system error). Only then may a stale copy stand
// in for it.
func upstreamFailing(status int, code string) bool {
	switch code {
	case "50001", "50004", "50011", "50026":
		return true
	}
	return status >= 500 || status == fasthttp.StatusTooManyRequests
}

// refusedQuestion reports whether an upstream envelope refuses the
// question itself, so that asking again gets the same answer until the
// chain moves: a parameter code (50014 missing, 50025 too many hashes,
// 50036 malformed or out of range, e.g. a height below the reachable
// window) with status 400 or 200. Such an answer is cached for the route's
// negative time. Anything else that is not a success (5xx, 429, the
// upstream's own failures 50001/50004/50011/50026, auth codes about the
// edge's credentials, codes not listed) is never cached.
func refusedQuestion(status int, code string) bool {
	switch code {
	case "50014", "50025", "50036":
		return status == fasthttp.StatusBadRequest || status == fasthttp.StatusOK
	}
	return false
}

// with returns a copy of e carrying cause and, if > 0, a Retry-After.
func (e *Error) with(cause error, retryAfter int) *Error {
	c := *e
	c.Err = cause
	if retryAfter > 0 {
		c.RetryAfter = retryAfter
	}
	return &c
}

// classifyTransport turns an error of the fasthttp client into the client's
// envelope (Caddy's statusError is the model): a timeout is 504, a host that
// cannot be reached is 503, a connection broken mid-answer or an oversized
// answer is 502.
func classifyTransport(err error) *Error {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return errTimeout.with(err, 0)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return errTooLarge.with(err, 0)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fasthttp.ErrNoFreeConns),
		errors.As(err, &op) && op.Op == "dial":
		return errUnreachable.with(err, 0)
	}
	return errBadGateway.with(err, 0)
}

// appendEnvelope writes {"code":..,"msg":..,"data":[]}.
func appendEnvelope(dst []byte, code, msg string) []byte {
	m, _ := json.Marshal(msg)
	dst = append(dst, `{"code":"`...)
	dst = append(dst, code...)
	dst = append(dst, `","msg":`...)
	dst = append(dst, m...)
	return append(dst, `,"data":[]}`...)
}
