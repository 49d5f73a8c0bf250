package upstream

import (
	"errors"
	"testing"
	"time"

	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"

	"github.com/valyala/fasthttp"
)

// TestBudgetIsNotTheUpstreamsThrottle: the edge's own spent budget and
// the upstream's 429 share the client's words (503 50001, Cache-Status
// detail "quota") but not their kind, so only the upstream's 429 sends a
// question to another account at once, and each is counted under its
// own outcome. When both were the reason "quota", the budget counted as
// the upstream throttling.
func TestBudgetIsNotTheUpstreamsThrottle(t *testing.T) {
	budget := envelope.ErrBudget.With(nil, 3)
	throttled := envelope.ErrThrottled.With(errors.New("upstream answered 429"), 2)
	lockedOut := envelope.ErrLockedOut.With(nil, 2)
	if throttledByUpstream(budget) || throttledByUpstream(lockedOut) {
		t.Errorf("the edge's own budget or lock-out taken for the upstream's 429")
	}
	if !throttledByUpstream(throttled) {
		t.Errorf("the upstream's 429 not seen as the upstream throttling")
	}
	for _, e := range []*envelope.Error{budget, throttled, lockedOut} {
		if e.Status != 503 || e.Code != "50001" || e.Kind.Detail() != "quota" || e.RetryAfter == 0 {
			t.Errorf("%v: %d %s detail %q Retry-After %d, want 503 50001 \"quota\" with a Retry-After", e.Kind, e.Status, e.Code, e.Kind.Detail(), e.RetryAfter)
		}
	}
	if outcomeOf(budget.Kind) != metrics.OutcomeBudgetExhausted || outcomeOf(lockedOut.Kind) != metrics.OutcomeBudgetExhausted {
		t.Errorf("no call sent, counted as %v and %v, want budget_exhausted", outcomeOf(budget.Kind), outcomeOf(lockedOut.Kind))
	}
	if outcomeOf(throttled.Kind) != metrics.Outcome429 {
		t.Errorf("the upstream's 429 counted as %v", outcomeOf(throttled.Kind))
	}
}

// TestJudgeKinds: each answer the upstream may give is judged to the
// failure kind the pool decides by, and the outcome counted derives from
// that kind with the labels docs/operations.md lists.
func TestJudgeKinds(t *testing.T) {
	u := testAccount(t)
	for _, c := range []struct {
		status  int
		code    string
		kind    envelope.Kind
		outcome string
		retry   bool // another attempt may fare better
		acct    bool // the account's own fault: another account is asked
	}{
		{200, "0", envelope.KindNone, "ok", false, false},
		{200, "50036", envelope.KindNone, "ok", false, false}, // the question's: the call judged no failure
		{401, "50111", envelope.KindCredentials, "credentials", false, true},
		{200, "50043", envelope.KindCredentials, "credentials", false, true},
		{404, "", envelope.KindNotFound, "not_found", false, true},
		{429, "", envelope.KindThrottled, "status_429", false, false},
		{200, "50011", envelope.KindThrottled, "status_429", false, false},
		{500, "", envelope.Kind5xx, "status_5xx", true, false},
		{503, "50001", envelope.Kind5xx, "status_5xx", true, false},
		{200, "", envelope.KindMalformed, "malformed", false, false},
		{200, "50013", envelope.KindEnvelope, "error_envelope", true, true},
	} {
		resp := fasthttp.AcquireResponse()
		resp.SetStatusCode(c.status)
		err := u.judge(resp, "/p", c.status, c.code, time.Now())
		fasthttp.ReleaseResponse(resp)
		k := envelope.KindOf(err)
		if k != c.kind || outcomeOf(k).String() != c.outcome || retryable(err) != c.retry || accountFault(err) != c.acct {
			t.Errorf("%d %q: kind %v outcome %v retryable %v account's %v, want %v %s %v %v", c.status, c.code, k, outcomeOf(k),
				retryable(err), accountFault(err), c.kind, c.outcome, c.retry, c.acct)
		}
		u.lock.Store(nil) // a 429 locks the account out; the next case starts clear
	}
}

// TestTransportKinds: a transport failure's kind gives the outcome the
// upstream metrics had for it (timeout, connection, too_large).
func TestTransportKinds(t *testing.T) {
	for _, c := range []struct {
		err     error
		outcome metrics.Outcome
	}{
		{fasthttp.ErrTimeout, metrics.OutcomeTimeout},
		{fasthttp.ErrBodyTooLarge, metrics.OutcomeTooLarge},
		{fasthttp.ErrNoFreeConns, metrics.OutcomeConnection},
		{errors.New("connection reset mid-answer"), metrics.OutcomeConnection},
	} {
		e := envelope.ClassifyTransport(c.err)
		if got := outcomeOf(e.Kind); got != c.outcome {
			t.Errorf("%v: kind %v counted as %v, want %v", c.err, e.Kind, got, c.outcome)
		}
	}
}
