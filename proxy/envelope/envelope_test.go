package envelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestKindWordsAreTheContract: every failure the edge can serve a stale
// copy for keeps the Cache-Status detail README lists (and the upstream
// span's outcome), while its kind stays its own: the edge's budget, the
// upstream's 429 and its lock-out are all "quota" and three kinds.
func TestKindWordsAreTheContract(t *testing.T) {
	for _, c := range []struct {
		e      *Error
		detail string
	}{
		{ErrUnreachable, "unreachable"},
		{ErrBreakerOpen, "breaker-open"},
		{ErrBudget, "quota"},
		{ErrThrottled, "quota"},
		{ErrLockedOut, "quota"},
		{ErrBadGateway, "upstream-error"},
		{Err5xx, "upstream-error"},
		{ErrMalformed, "malformed"},
		{ErrTooLarge, "too-large"},
		{ErrTimeout, "timeout"},
		{ErrCredentials, "credentials"},
		{ErrUpstreamNotFound, "not-found"},
		{ErrFailingEnvelope, "upstream-envelope"},
	} {
		if got := c.e.Kind.Detail(); got != c.detail {
			t.Errorf("%s: detail %q, want %q", c.e.Msg, got, c.detail)
		}
		if KindOf(c.e.With(errors.New("cause"), 0)) != c.e.Kind {
			t.Errorf("%s: a copy With a cause lost its kind", c.e.Msg)
		}
	}
	if ErrBudget.Kind == ErrThrottled.Kind || ErrThrottled.Kind == ErrLockedOut.Kind || ErrBudget.Kind == ErrLockedOut.Kind {
		t.Errorf("the edge's budget, the upstream's 429 and the lock-out share a kind")
	}
	names := map[string]Kind{}
	for k := KindNone; k < numKinds; k++ {
		n := k.String()
		if n == "" || n == "unknown" {
			t.Errorf("kind %d has no name", k)
		}
		if o, dup := names[n]; dup {
			t.Errorf("kinds %d and %d are both named %q", o, k, n)
		}
		names[n] = k
		if (k.Detail() == "") != (k == KindNone) {
			t.Errorf("kind %v: detail %q (only KindNone has none)", k, k.Detail())
		}
	}
	if numKinds.Detail() != "" || numKinds.String() != "unknown" {
		t.Errorf("a kind out of range has words %q %q", numKinds.Detail(), numKinds.String())
	}
	if KindOf(nil) != KindNone || KindOf(errors.New("plain")) != KindNone || Missing("x").Kind != KindNone {
		t.Errorf("a plain error or the client's own has a kind")
	}
	if KindOf(fmt.Errorf("wrapped: %w", ErrTimeout)) != KindTimeout {
		t.Errorf("KindOf does not look through a wrapped error")
	}
}

// TestWithCopies: With returns a copy; the shared error values are
// never changed, and a Retry-After of 0 keeps the value's own.
func TestWithCopies(t *testing.T) {
	cause := errors.New("dial refused")
	e := ErrBudget.With(cause, 7)
	if e == ErrBudget || ErrBudget.Err != nil || ErrBudget.RetryAfter != 1 {
		t.Fatalf("With changed the shared ErrBudget: %+v", *ErrBudget)
	}
	if e.RetryAfter != 7 || !errors.Is(e, cause) || e.Status != 503 || e.Code != "50001" {
		t.Errorf("With(cause, 7) = %+v", *e)
	}
	if ErrBudget.With(nil, 0).RetryAfter != 1 || ErrTimeout.With(nil, -3).RetryAfter != 0 {
		t.Errorf("a Retry-After of 0 or less replaced the value's own")
	}
	if got := e.Error(); !strings.Contains(got, "50001") || !strings.Contains(got, "dial refused") {
		t.Errorf("Error() = %q, want the code and the cause", got)
	}
	if got := Missing("chainShortName").Error(); got != "50014 (Parameter chainShortName cannot be empty)" {
		t.Errorf("Missing: %q", got)
	}
}

// TestClientErrorsNameTheParameter: the client's own errors carry the
// vendor's codes and statuses and name the parameter.
func TestClientErrorsNameTheParameter(t *testing.T) {
	for _, c := range []struct {
		e      *Error
		status int
		code   string
		words  string
	}{
		{Missing("height"), 400, "50014", "Parameter height cannot be empty"},
		{Invalid("limit", "at most 100"), 400, "50036", "Parameter limit error: at most 100"},
		{TooMany("txId", 20), 200, "50025", "Parameter txId error: at most 20 hashes"},
	} {
		if c.e.Status != c.status || c.e.Code != c.code || c.e.Msg != c.words || c.e.Kind != KindNone || c.e.Answered {
			t.Errorf("%+v, want %d %s %q", *c.e, c.status, c.code, c.words)
		}
	}
}

// timeoutErr is a net.Error that timed out, as a TLS or proxy layer's.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassifyTransport: each transport failure becomes the client's
// status (504 a timeout, 503 unreachable, 502 the rest) and its kind,
// wrapped or not, with the cause kept for the log.
func TestClassifyTransport(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		kind   Kind
	}{
		{fasthttp.ErrTimeout, 504, KindTimeout},
		{fasthttp.ErrDialTimeout, 504, KindTimeout},
		{context.DeadlineExceeded, 504, KindTimeout},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), 504, KindTimeout},
		{timeoutErr{}, 504, KindTimeout},
		{fasthttp.ErrBodyTooLarge, 502, KindTooLarge},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 503, KindUnreachable},
		{&net.OpError{Op: "dial", Err: errors.New("no route to host")}, 503, KindUnreachable},
		{fmt.Errorf("write: %w", syscall.ECONNREFUSED), 503, KindUnreachable},
		{fasthttp.ErrNoFreeConns, 503, KindUnreachable},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, 502, KindConnection},
		{errors.New("the server closed connection before returning the first response byte"), 502, KindConnection},
	} {
		e := ClassifyTransport(c.err)
		if e.Status != c.status || e.Kind != c.kind || !errors.Is(e, c.err) {
			t.Errorf("ClassifyTransport(%v) = %d %v (cause %v), want %d %v", c.err, e.Status, e.Kind, e.Err, c.status, c.kind)
		}
	}
}

// TestAppend: the envelope written is valid JSON whatever the message
// holds, and Code reads its code back.
func TestAppend(t *testing.T) {
	for _, msg := range []string{"plain", `quote " and \ backslash`, "new\nline", "<script>", "ünï\u2028code", ""} {
		b := Append([]byte("prefix:"), "50036", msg)
		if !strings.HasPrefix(string(b), "prefix:") {
			t.Fatalf("Append dropped dst: %q", b)
		}
		body := b[len("prefix:"):]
		var v struct {
			Code string `json:"code"`
			Msg  string `json:"msg"`
			Data []any  `json:"data"`
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Code != "50036" || v.Msg != msg || v.Data == nil || len(v.Data) != 0 {
			t.Errorf("Append(%q) = %s: %+v %v", msg, body, v, err)
		}
		if code, err := Code(body); code != "50036" || err != nil {
			t.Errorf("Code(Append(%q)) = %q %v", msg, code, err)
		}
	}
}

// TestCode: only a whole envelope has a code; a success must carry a
// data array, so a truncated or foreign answer is never stored as one.
func TestCode(t *testing.T) {
	for _, c := range []struct {
		body string
		code string // "" with ErrNoEnvelope
	}{
		{`{"code":"0","msg":"","data":[]}`, "0"},
		{`{"code":"0","msg":"","data":[{"height":"1"}]}`, "0"},
		{`{"code":0,"msg":"","data":[]}`, "0"}, // a gateway's numeric code
		{`{"code":50011,"msg":"too frequent","data":[]}`, "50011"},
		{`{"code":"50036","msg":"bad"}`, "50036"}, // an error needs no data
		{`{"code":"0","msg":"","data":{}}`, ""},   // a success's data is an array
		{`{"code":"0","msg":""}`, ""},
		{`{"code":"0","msg":"","data":null}`, ""},
		{`{"code":"0","msg":"","data":[{"height":"1"}`, ""}, // truncated
		{`{"msg":"no code","data":[]}`, ""},
		{`{"code":true,"data":[]}`, ""},
		{`[]`, ""},
		{``, ""},
		{`<html>502 Bad Gateway</html>`, ""},
		{`{"code":"0","data":[]} trailing`, ""},
	} {
		code, err := Code([]byte(c.body))
		if c.code == "" {
			if !errors.Is(err, ErrNoEnvelope) || code != "" {
				t.Errorf("Code(%s) = %q %v, want ErrNoEnvelope", c.body, code, err)
			}
			continue
		}
		if code != c.code || err != nil {
			t.Errorf("Code(%s) = %q %v, want %q", c.body, code, err, c.code)
		}
	}
}

// TestWrap: records wrapped are an envelope's data, for the classifier.
func TestWrap(t *testing.T) {
	for _, c := range []struct {
		records string
		n       int
	}{
		{``, 0},
		{`{"a":1}`, 1},
		{`{"a":1},{"b":2}`, 2},
	} {
		var v struct {
			Data []json.RawMessage `json:"data"`
		}
		b := Wrap([]byte(c.records))
		if err := json.Unmarshal(b, &v); err != nil || len(v.Data) != c.n {
			t.Errorf("Wrap(%s) = %s: %d records, %v; want %d", c.records, b, len(v.Data), err, c.n)
		}
	}
}

// TestCeilSeconds: a Retry-After is whole seconds rounded up, at least 1.
func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		0: 1, -time.Second: 1, time.Nanosecond: 1, time.Second: 1,
		time.Second + time.Nanosecond: 2, 1500 * time.Millisecond: 2, 30 * time.Second: 30,
	} {
		if got := CeilSeconds(d); got != want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestFailureOfAnUnknownCode: the edge's failure for a code outside the
// vendor's table names the HTTP status instead of the vendor's words,
// and never changes the shared ErrFailingEnvelope.
func TestFailureOfAnUnknownCode(t *testing.T) {
	e := Failure(503, "59999")
	if e.Status != 502 || e.Code != "50026" || e.Kind != KindEnvelope || !strings.HasSuffix(e.Msg, "the upstream answered 59999 with HTTP 503") {
		t.Errorf("Failure(503, 59999) = %+v", *e)
	}
	if ErrFailingEnvelope.Msg != "Upstream error" || ErrUnreachable.Msg != "Service temporarily unavailable: upstream unreachable" {
		t.Errorf("Failure changed a shared error: %q, %q", ErrFailingEnvelope.Msg, ErrUnreachable.Msg)
	}
	if got := Failure(200, "50013").Msg; !strings.Contains(got, "(System is busy, please try again later.)") {
		t.Errorf("Failure(200, 50013) does not give the vendor's words: %q", got)
	}
}

// TestPredicatesFollowTheClass: the four predicates are ClassOf's
// classes, one each, and an HTTP 401 is the account's whatever the code.
func TestPredicatesFollowTheClass(t *testing.T) {
	for _, c := range []struct {
		status                        int
		code                          string
		creds, failing, refused, none bool
	}{
		{401, "", true, false, false, false},
		{200, "50113", true, false, false, false},
		{200, "50013", false, true, false, false},
		{429, "0", false, true, false, false},
		{400, "50036", false, false, true, false},
		{200, "50040", false, false, false, true},
		{200, "59999", false, false, false, false},
	} {
		if CredentialsRefused(c.status, c.code) != c.creds || UpstreamFailing(c.status, c.code) != c.failing ||
			RefusedQuestion(c.status, c.code) != c.refused || NoData(c.status, c.code) != c.none {
			t.Errorf("%d %q: credentials %v failing %v refused %v no data %v", c.status, c.code, CredentialsRefused(c.status, c.code),
				UpstreamFailing(c.status, c.code), RefusedQuestion(c.status, c.code), NoData(c.status, c.code))
		}
	}
	if Vendor("50040") == nil || Vendor("50040").Class != ClassNoData || Vendor("59999") != nil {
		t.Errorf("Vendor does not index the table")
	}
}
