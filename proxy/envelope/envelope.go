// Package envelope owns the explorer's answer envelope ({"code","msg","data"})
// as the edge reads and writes it: Code reads an upstream answer's code,
// Error is every failure a client can see (an envelope with its HTTP
// status), and the predicates say what an upstream envelope means
// (a refused question, a failing upstream, refused credentials).
package envelope

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/buger/jsonparser"
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
	// Kind: what failed (KindNone: the client's own error, or an answer).
	// The edge decides by it (another account, a retry, the breaker), and
	// the metrics' outcome and Cache-Status's detail derive from it.
	Kind Kind
	// Answered: the upstream's own answer to the question (an envelope of
	// the client's side, such as 50036), not a failure: no stale copy
	// stands in for it.
	Answered bool
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s (%s): %v", e.Code, e.Msg, e.Err)
	}
	return e.Code + " (" + e.Msg + ")"
}

func (e *Error) Unwrap() error { return e.Err }

func Missing(p string) *Error {
	return &Error{Status: 400, Code: "50014", Msg: "Parameter " + p + " cannot be empty"}
}

func Invalid(p, why string) *Error {
	return &Error{Status: 400, Code: "50036", Msg: "Parameter " + p + " error: " + why}
}

// TooMany is 50025 with HTTP 200, the vendor's status for it (its error
// table: "Parameter {0} count exceeds the limit {1}", 200).
func TooMany(p string, n int) *Error {
	return &Error{Status: 200, Code: "50025", Msg: "Parameter " + p + " error: at most " + strconv.Itoa(n) + " hashes"}
}

var (
	ErrNotFound = &Error{Status: 404, Code: "404", Msg: "Not found: the edge serves only the six /api/v5/chainx routes"}
	ErrMethod   = &Error{Status: 405, Code: "50115", Msg: "Method not allowed: use GET or HEAD"}
	ErrURL      = &Error{Status: 414, Code: "50036", Msg: "Request URI too long"}
)

// Upstream failure kinds: the client's envelope of each.
var (
	ErrUnreachable = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream unreachable", Kind: KindUnreachable}
	ErrBreakerOpen = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream failing, circuit open", Kind: KindBreakerOpen}
	// ErrBudget: the edge's own budget had no token within the wait.
	ErrBudget = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream quota spent", RetryAfter: 1, Kind: KindBudget}
	// ErrThrottled: the upstream answered 429 or 50011.
	ErrThrottled = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream rate limited", RetryAfter: 1, Kind: KindThrottled}
	// ErrLockedOut: no call is sent until the Retry-After of the
	// upstream's last 429 has passed.
	ErrLockedOut = &Error{Status: 503, Code: "50001", Msg: "Service temporarily unavailable: upstream rate limited", RetryAfter: 1, Kind: KindLockedOut}
	// ErrBadGateway: a connection broken mid-answer, or a transport
	// failure of no other kind; Err5xx: the upstream answered 5xx.
	ErrBadGateway = &Error{Status: 502, Code: "50026", Msg: "Upstream error", Kind: KindConnection}
	Err5xx        = &Error{Status: 502, Code: "50026", Msg: "Upstream error", Kind: Kind5xx}
	ErrMalformed  = &Error{Status: 502, Code: "50026", Msg: "Upstream error: malformed answer", Kind: KindMalformed}
	ErrTooLarge   = &Error{Status: 502, Code: "50026", Msg: "Upstream error: answer too large", Kind: KindTooLarge}
	ErrTimeout    = &Error{Status: 504, Code: "50004", Msg: "Upstream timeout", Kind: KindTimeout}
	// ErrCredentials: the upstream refused the edge's own account (HTTP
	// 401, or a code 50102-50113 about the signed headers). Never passed
	// to a client as the upstream said it: the client's credentials are
	// fine, the edge's are not.
	ErrCredentials = &Error{Status: 502, Code: "50026", Msg: "Upstream error: the upstream refused the edge's own credentials", Kind: KindCredentials}
	// ErrUpstreamNotFound: the upstream answered 404, no such path. The
	// edge asks only the API's own routes, so upstream.base_url is wrong
	// (a prefix too many, another service): the edge's failure, never
	// passed on as the client's 404.
	ErrUpstreamNotFound = &Error{Status: 502, Code: "50026", Msg: "Upstream error: the upstream has no such path (check upstream.base_url)", Kind: KindNotFound}
	// ErrFailingEnvelope: the upstream answered an envelope that says it is
	// failing (UpstreamFailing). It is the account's failure; when no
	// other account can be asked, the envelope is passed on as it came.
	ErrFailingEnvelope = &Error{Status: 502, Code: "50026", Msg: "Upstream error", Kind: KindEnvelope}
)

// CredentialsRefused reports whether an upstream answer refuses the
// account rather than the question: HTTP 401, or a code of an account
// failure in VendorCodes (the authentication range 50100-50125, and
// 50007 blocked, 50012 invalid, 50030 no permission, 50043 frozen by risk
// control... whatever HTTP status carries it).
func CredentialsRefused(status int, code string) bool {
	return ClassOf(status, code) == ClassAccount
}

// ReasonEnvelope: the upstream answered an error envelope (a code other
// than "0"); KindEnvelope's detail.
const ReasonEnvelope = "upstream-envelope"

// UpstreamFailing reports whether an upstream error envelope says the
// upstream failed rather than that the question is wrong (ClassFailure: a
// 5xx or 429 status, or a code of the server's side such as 50001
// unavailable, 50004 timeout, 50011 rate limited, 50013 busy, 50026
// system error, whatever status carries it). Only then may a stale copy
// stand in for it.
func UpstreamFailing(status int, code string) bool {
	return ClassOf(status, code) == ClassFailure
}

// RefusedQuestion reports whether an upstream envelope refuses the
// question itself (ClassRefusal: a parameter code such as 50014 missing,
// 50025 too many hashes, 50036 malformed or out of range, e.g. a height
// below the reachable window), so that asking again gets the same answer
// until the chain moves. Such an answer is cached for the route's
// negative time.
func RefusedQuestion(status int, code string) bool {
	return ClassOf(status, code) == ClassRefusal
}

// NoData reports whether an upstream envelope is a deterministic "no
// data" answer to the question (ClassNoData: 50037 token does not exist,
// 50038 chain not supported, 50039, 50040 no data for this block height,
// 50044 data does not exist). Cached for the route's negative time like
// an empty answer. Anything else that is not a success (failures,
// account failures, codes outside VendorCodes) is never cached.
func NoData(status int, code string) bool {
	return ClassOf(status, code) == ClassNoData
}

// With returns a copy of e carrying cause and, if > 0, a Retry-After.
func (e *Error) With(cause error, retryAfter int) *Error {
	c := *e
	c.Err = cause
	if retryAfter > 0 {
		c.RetryAfter = retryAfter
	}
	return &c
}

// ClassifyTransport turns an error of the fasthttp client into the client's
// envelope (Caddy's statusError is the model): a timeout is 504, a host that
// cannot be reached is 503, a connection broken mid-answer or an oversized
// answer is 502.
func ClassifyTransport(err error) *Error {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout.With(err, 0)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return ErrTooLarge.With(err, 0)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fasthttp.ErrNoFreeConns),
		errors.As(err, &op) && op.Op == "dial":
		return ErrUnreachable.With(err, 0)
	}
	return ErrBadGateway.With(err, 0)
}

// Append writes {"code":..,"msg":..,"data":[]}.
func Append(dst []byte, code, msg string) []byte {
	m, _ := json.Marshal(msg)
	dst = append(dst, `{"code":"`...)
	dst = append(dst, code...)
	dst = append(dst, `","msg":`...)
	dst = append(dst, m...)
	return append(dst, `,"data":[]}`...)
}

var ErrNoEnvelope = errors.New("answer is not an explorer envelope")

// Code returns the envelope's code after checking the answer is
// whole JSON (a truncated answer must not be cached as a success).
func Code(body []byte) (string, error) {
	if !json.Valid(body) { // a scanner; allocates nothing
		return "", ErrNoEnvelope
	}
	code, err := jsonparser.GetString(body, "code")
	if err != nil {
		// Some gateways send a numeric code.
		if n, err2 := jsonparser.GetInt(body, "code"); err2 == nil {
			return strconv.FormatInt(n, 10), nil
		}
		return "", ErrNoEnvelope
	}
	if code == "0" {
		if _, t, _, err := jsonparser.Get(body, "data"); err != nil || t != jsonparser.Array {
			return "", ErrNoEnvelope
		}
	}
	return code, nil
}

// CeilSeconds is d in whole seconds for a Retry-After, rounded up, at
// least 1.
func CeilSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Wrap makes records an envelope for the classifier.
func Wrap(records []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	b.Write(records)
	b.WriteString(`]}`)
	return b.Bytes()
}
