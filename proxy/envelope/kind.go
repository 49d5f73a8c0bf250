package envelope

import "errors"

// Kind is what failed, as a value: the edge's decisions compare kinds,
// never words, and the words clients and dashboards see (Cache-Status's
// detail, the upstream metrics' outcome) derive from it. Two kinds may
// share their words (the edge's own budget and the upstream's 429 are
// both "quota" to a client) and still be told apart by the edge.
type Kind uint8

const (
	KindNone           Kind = iota // not a failure of the edge's: the client's own error, or an answer
	KindUnreachable                // the upstream could not be reached (connection refused, dial failed)
	KindConnection                 // a connection broken mid-answer, or a transport failure of no other kind
	Kind5xx                        // the upstream answered HTTP 5xx
	KindTimeout                    // the call ran out of time
	KindMalformed                  // the answer is not a whole envelope, or of an encoding not asked for
	KindTooLarge                   // the answer is larger than upstream.max_response_bytes
	KindThrottled                  // the upstream answered 429 or 50011
	KindLockedOut                  // no call sent: the Retry-After of the upstream's last 429 has not passed
	KindBudget                     // no call sent: the edge's own budget had no token within the wait
	KindBytes                      // no call sent: no room for the answer within the wait (upstream.ByteGate)
	KindBreakerOpen                // no call sent: every account's breaker is open
	KindCredentials                // the upstream refused the edge's account (401, or an account code)
	KindNotFound                   // the upstream answered 404: upstream.base_url is wrong
	KindEnvelope                   // the upstream answered an envelope saying it failed
	KindRefusedWrongly             // an account refused a question another answered
	KindInternal                   // the edge failed on the request (a recovered panic)
	numKinds
)

// kindWords are each kind's name (String) and its detail (Detail).
var kindWords = [numKinds][2]string{
	KindNone:           {"none", ""},
	KindUnreachable:    {"unreachable", "unreachable"},
	KindConnection:     {"connection", "upstream-error"},
	Kind5xx:            {"5xx", "upstream-error"},
	KindTimeout:        {"timeout", "timeout"},
	KindMalformed:      {"malformed", "malformed"},
	KindTooLarge:       {"too-large", "too-large"},
	KindThrottled:      {"throttled", "quota"},
	KindLockedOut:      {"locked-out", "quota"},
	KindBudget:         {"budget", "quota"},
	KindBytes:          {"bytes", "bytes"},
	KindBreakerOpen:    {"breaker-open", "breaker-open"},
	KindCredentials:    {"credentials", "credentials"},
	KindNotFound:       {"not-found", "not-found"},
	KindEnvelope:       {"upstream-envelope", ReasonEnvelope},
	KindRefusedWrongly: {"refused-wrongly", "refused-wrongly"},
	KindInternal:       {"internal", "internal"},
}

// String names the kind distinctly, for logs and tests.
func (k Kind) String() string {
	if k >= numKinds {
		return "unknown"
	}
	return kindWords[k][0]
}

// Detail is the kind's words where clients and dashboards see them:
// Cache-Status's detail=stale-if-error-<Detail> (README, the list of
// whys) and the outcome of an upstream span. A contract: the edge's
// budget, the upstream's 429 and its lock-out are all "quota", a broken
// connection and a 5xx both "upstream-error". "" for KindNone.
func (k Kind) Detail() string {
	if k >= numKinds {
		return ""
	}
	return kindWords[k][1]
}

// KindOf is the kind of err's *Error, KindNone when it has none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindNone
}
