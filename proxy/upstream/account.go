package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/tracing"
	"explorer-edge/signer"
)

// account is one account of the explorer API: one fasthttp host client
// with bounded connections, every request signed with the account's
// credentials, drawn from its budget, guarded by its circuit breaker. The
// Pool (pool.go) chooses among accounts and retries.
type account struct {
	name    string
	signer  atomic.Pointer[signer.Signer]
	health  health
	changed func() // the pool's: an account's rate or breaker changed
	// breakerState is the breaker's state as its last change set it, for
	// changed: the breaker calls OnStateChange holding its own lock, so
	// its State may not be asked there.
	breakerState atomic.Int32
	hc           *fasthttp.HostClient
	prefix       string // path prefix of base_url
	host         string
	cfg          atomic.Pointer[config.Upstream]
	budget       Budget
	breaker      *gobreaker.CircuitBreaker[struct{}]
	m            *metrics.Metrics
	log          *slog.Logger
	// lock honours the upstream's Retry-After: no call leaves before
	// lock.until. nil = none.
	lock atomic.Pointer[lockout]
	rate atomic.Uint64 // current budget rate (float64 bits), lowered after a 429
	// checked is the account's last self-check (selfcheck.go); nil = not
	// asked yet. A good answer to any call sets it passed.
	checked atomic.Pointer[selfCheckState]
	// sample says whether a repeatable line may go out (Proxy.sampleWarn);
	// nil = never.
	sample func(logsample.Key) (ok bool, suppressed int64)
}

// newAccount makes the account name of cfg (its base_url, credentials,
// rate and burst; the rest is shared by every account).
func newAccount(name string, cfg config.Upstream, m *metrics.Metrics, log *slog.Logger, budget Budget) (*account, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("upstream.base_url: %w", err)
	}
	addr := u.Host
	tls := u.Scheme == "https"
	if u.Port() == "" {
		if tls {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	up := &account{
		name:    name,
		changed: func() {},
		prefix:  strings.TrimRight(u.Path, "/"),
		host:    u.Host,
		m:       m,
		log:     log,
		hc: &fasthttp.HostClient{
			Addr:                addr,
			IsTLS:               tls,
			MaxConns:            cfg.MaxConns,
			MaxResponseBodySize: cfg.MaxResponseBytes,
			MaxIdleConnDuration: 30 * time.Second,
			// One attempt per Do: fasthttp's own retry of a dropped call
			// took no budget token and left no log line (an upstream
			// dropping half its connections got 1.5x the budget). fetch's
			// loop is the only retry, and each of its attempts takes a
			// token, is counted and is logged.
			MaxIdemponentCallAttempts: 1,
			NoDefaultUserAgentHeader:  true,
			DisablePathNormalizing:    true, // sign and send the exact path
		},
	}
	up.cfg.Store(&cfg)
	up.signer.Store(signer.New(signer.Credentials{APIKey: cfg.APIKey, SecretKey: cfg.SecretKey, Passphrase: cfg.Passphrase}))
	up.rate.Store(math.Float64bits(cfg.Rate))
	if budget != nil {
		up.budget = budget
	} else {
		up.budget = NewLocalBudget(cfg.Rate, cfg.Burst)
	}
	up.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1, // one probe while half-open
		Timeout:     cfg.BreakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(cfg.BreakerFailures) },
		// Only the upstream's own failures trip the breaker; an answer
		// with an error envelope, or a call our budget held back, is not
		// the upstream failing.
		IsSuccessful: func(err error) bool {
			k := envelope.KindOf(err)
			return err == nil || k == envelope.KindThrottled || k == envelope.KindLockedOut || k == envelope.KindBudget
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			up.breakerState.Store(int32(to))
			up.changed()
			log.Warn("upstream breaker", "account", name, "from", from.String(), "to", to.String())
		},
	})
	return up, nil
}

// reconfigure applies reloaded rates and timeouts. It ends a lock-out and
// restores a rate lowered after a 429: a reload is how an operator says
// "try again now".
func (u *account) reconfigure(cfg config.Upstream) {
	u.cfg.Store(&cfg)
	u.signer.Store(signer.New(signer.Credentials{APIKey: cfg.APIKey, SecretKey: cfg.SecretKey, Passphrase: cfg.Passphrase}))
	u.lock.Store(nil)
	u.rate.Store(math.Float64bits(cfg.Rate))
	u.budget.SetRate(cfg.Rate, cfg.Burst)
	u.changed()
}

func (u *account) breakerOpen() bool { return u.breaker.State() == gobreaker.StateOpen }

// retryable says whether another attempt may fare better, by the cause of
// the failure: a timeout, an unreachable upstream, a 5xx, a broken
// connection or an envelope saying the upstream failed (50013 "system
// busy, please try again later") may pass; an answer that came malformed
// or too large would come again the same, and a 429 or a spent budget is
// not the upstream failing.
func retryable(err error) bool {
	switch envelope.KindOf(err) {
	case envelope.KindTimeout, envelope.KindUnreachable, envelope.KindConnection, envelope.Kind5xx, envelope.KindEnvelope:
		return true
	}
	return false
}

// outcomeOf is upstream_requests_total's outcome for a failure of kind k
// (docs/operations.md): the label follows the kind, never its words.
func outcomeOf(k envelope.Kind) metrics.Outcome {
	switch k {
	case envelope.KindNone:
		return metrics.OutcomeOK
	case envelope.KindEnvelope:
		return metrics.OutcomeErrorEnvelope
	case envelope.Kind5xx:
		return metrics.Outcome5xx
	case envelope.KindThrottled:
		return metrics.Outcome429
	case envelope.KindTimeout:
		return metrics.OutcomeTimeout
	case envelope.KindMalformed:
		return metrics.OutcomeMalformed
	case envelope.KindTooLarge:
		return metrics.OutcomeTooLarge
	case envelope.KindBreakerOpen:
		return metrics.OutcomeBreakerOpen
	case envelope.KindBudget, envelope.KindLockedOut:
		return metrics.OutcomeBudgetExhausted
	case envelope.KindCredentials:
		return metrics.OutcomeCredentials
	case envelope.KindNotFound:
		return metrics.OutcomeNotFound
	}
	return metrics.OutcomeConnection // unreachable, a broken connection
}

var hdrKey, hdrSign, hdrPass, hdrTS = []byte(signer.HeaderKey), []byte(signer.HeaderSign), []byte(signer.HeaderPassphrase), []byte(signer.HeaderTimestamp)

// call makes one signed attempt. Nothing of the client's request is used
// but the canonical target: no header of the client is ever forwarded.
func (u *account) call(tc context.Context, r *route.Route, target string, timeout time.Duration) (Answer, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	path := u.prefix + target
	u.sign(req, path)
	if tc != nil { // the attempt's span is the upstream's parent
		propagation.TraceContext{}.Inject(tc, tracing.UpstreamCarrier{H: &req.Header})
	}
	start := time.Now()
	err := u.hc.DoTimeout(req, resp, timeout)
	took := time.Since(start)
	if err != nil {
		e := envelope.ClassifyTransport(err)
		outcome := outcomeOf(e.Kind)
		u.record(r, outcome, took, true)
		u.log.Warn("upstream call", "account", u.name, "route", r.Name, "outcome", outcome.String(), "ms", took.Milliseconds(), "err", err.Error())
		return Answer{}, e
	}
	status := resp.StatusCode()
	body, err := decodeBody(resp, u.hc.MaxResponseBodySize)
	if err != nil {
		e := envelope.ErrMalformed
		if errors.Is(err, errDecodedTooLarge) {
			e = envelope.ErrTooLarge
		}
		outcome := outcomeOf(e.Kind)
		u.record(r, outcome, took, true)
		u.log.Warn("upstream call", "account", u.name, "route", r.Name, "status", status, "outcome", outcome.String(), "ms", took.Milliseconds(), "err", err.Error())
		return Answer{}, e.With(err, 0)
	}
	code, _ := envelope.Code(body)
	result := u.judge(resp, path, status, code, start)
	outcome := outcomeOf(envelope.KindOf(result))
	if result == nil && code != "0" {
		outcome = metrics.OutcomeErrorEnvelope // the question's answer, passed to the request path
	}
	u.record(r, outcome, took, result != nil)
	level := slog.LevelInfo
	if result != nil {
		level = slog.LevelWarn
	}
	u.log.Log(context.Background(), level, "upstream call", "account", u.name, "route", r.Name, "status", status, "code", code,
		"outcome", outcome.String(), "ms", took.Milliseconds(), "bytes", len(body))
	if result != nil && envelope.KindOf(result) != envelope.KindEnvelope {
		return Answer{}, result
	}
	return Answer{Status: status, Code: code, Body: body}, result
}

// sign makes req the signed GET of path on this account.
func (u *account) sign(req *fasthttp.Request, path string) {
	req.SetRequestURI(path)
	req.Header.SetHost(u.host)
	req.Header.SetMethod(fasthttp.MethodGet)
	sg := u.signer.Load()
	creds := sg.Credentials()
	var buf [96]byte
	ts := signer.AppendTimestamp(buf[:0], time.Now())
	req.Header.SetCanonical(hdrTS, ts)
	req.Header.SetCanonical(hdrSign, sg.AppendSign(buf[len(ts):len(ts)], ts, []byte("GET"), []byte(path)))
	req.Header.SetCanonical(hdrKey, []byte(creds.APIKey))
	req.Header.SetCanonical(hdrPass, []byte(creds.Passphrase))
}

// judge reads an answer of status and envelope code to a call sent at
// sent: the account's failure it is, whose kind is the call's outcome
// (nil: none; an
// error envelope that says the upstream is failing goes with its answer,
// to be passed on if no other account can be asked: Pool.Fetch).
func (u *account) judge(resp *fasthttp.Response, path string, status int, code string, sent time.Time) error {
	switch {
	case envelope.CredentialsRefused(status, code):
		u.credentialsRefused(status, code)
		words := ""
		if v := envelope.Vendor(code); v != nil {
			words = " (" + v.Words + ")"
		}
		return envelope.ErrCredentials.With(fmt.Errorf("upstream answered %d code %q%s to account %s", status, code, words, u.name), 0)
	case status == fasthttp.StatusNotFound:
		// Whatever envelope came with it: the path asked is the API's, so
		// the base_url is wrong. An upstream failure, counted and alerted
		// on, never the client's 404.
		return envelope.ErrUpstreamNotFound.With(fmt.Errorf("upstream answered 404 code %q to %s on account %s", code, path, u.name), 0)
	case status == fasthttp.StatusTooManyRequests || code == "50011":
		retry := u.throttled(resp.Header.Peek("Retry-After"), time.Now())
		return envelope.ErrThrottled.With(fmt.Errorf("upstream answered %d code %q", status, code), envelope.CeilSeconds(retry))
	case status >= 500:
		return envelope.Err5xx.With(fmt.Errorf("upstream answered %d", status), 0)
	case code == "":
		return envelope.ErrMalformed.With(fmt.Errorf("upstream answered %d without an envelope", status), 0)
	case envelope.UpstreamFailing(status, code):
		// 50013 "system busy" with HTTP 200 too: the vendor's table, not
		// the status, says the upstream failed.
		return envelope.ErrFailingEnvelope.With(fmt.Errorf("upstream answered %d code %q", status, code), 0)
	case code != "0":
		// A refusal, a "no data" answer or a code outside the vendor's
		// table: the question's, passed to the request path.
		return nil
	}
	u.recovered(sent)
	return nil
}

// credentialsRefused logs, at error and once per log.repeat_interval for
// the account, that the upstream refused the account's credentials: every
// question on it fails until an operator acts.
func (u *account) credentialsRefused(status int, code string) {
	if u.sample == nil {
		return
	}
	ok, suppressed := u.sample(logsample.Key{Msg: "upstream credentials refused", Route: u.name})
	if !ok {
		return
	}
	what := "the upstream refused this account's api_key, passphrase or signature; its calls fail over to other accounts"
	vendor := ""
	if v := envelope.Vendor(code); v != nil {
		vendor = v.Words
		if v.Status != fasthttp.StatusUnauthorized {
			// Frozen, blocked, without permission: the keys may be
			// right, the vendor holds the account back.
			what = "the upstream refused this account (see vendor); its calls fail over to other accounts until the vendor or the operator acts"
		}
	}
	u.log.Error("upstream credentials refused", "account", u.name, "status", status, "code", code, "vendor", vendor, "suppressed", suppressed,
		"what", what)
}

// lockout is the time an upstream 429 forbids calls: set when the 429
// came, until when its Retry-After (capped at max_retry_after) runs.
type lockout struct{ set, until time.Time }

// lockedUntil reports the end of a lock-out in force at now.
func (u *account) lockedUntil(now time.Time) (time.Time, bool) {
	if l := u.lock.Load(); l != nil && now.Before(l.until) {
		return l.until, true
	}
	return time.Time{}, false
}

// retryAfter is how long a Retry-After value (delay-seconds or an
// HTTP-date, RFC 9110 section 10.2.3) asks to wait: 1 s when absent or
// unreadable, never more than limit (a year would lock the edge out for a
// year).
func retryAfter(v []byte, now time.Time, limit time.Duration) time.Duration {
	d := time.Second
	if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil && n > 0 {
		d = time.Duration(min(n, int64(limit/time.Second)+1)) * time.Second
	} else if t, err := fasthttp.ParseHTTPDate(bytes.TrimSpace(v)); err == nil && t.After(now) {
		d = t.Sub(now)
	}
	return min(d, limit)
}

// throttled honours a 429 that came at now: no call before its
// Retry-After (see retryAfter), and the budget rate halves (down to 1/16
// of the configured rate) until successes bring it back.
func (u *account) throttled(v []byte, now time.Time) time.Duration {
	cfg := u.cfg.Load()
	d := retryAfter(v, now, cfg.MaxRetryAfter)
	next := &lockout{set: now, until: now.Add(d)}
	for {
		cur := u.lock.Load()
		if (cur != nil && !cur.until.Before(next.until)) || u.lock.CompareAndSwap(cur, next) {
			break
		}
	}
	rate := max(math.Float64frombits(u.rate.Load())/2, cfg.Rate/16)
	u.setRate(rate, cfg.Burst)
	u.m.Throttled.WithLabelValues("upstream").Inc()
	return d
}

// recovered notes a good answer to a call sent at sent. It ends a lock-out
// set before that call left (the upstream answers again), but not one set
// while it was in flight: an answer to a call that overlapped the 429 says
// nothing against its Retry-After. It raises a lowered budget rate by a
// quarter per success.
func (u *account) recovered(sent time.Time) {
	if st := u.checked.Load(); st != checkPassed {
		u.checked.Store(checkPassed)
	}
	if l := u.lock.Load(); l != nil && l.set.Before(sent) {
		u.lock.CompareAndSwap(l, nil)
	}
	cfg := u.cfg.Load()
	if cur := math.Float64frombits(u.rate.Load()); cur < cfg.Rate {
		u.setRate(min(cfg.Rate, cur*1.25), cfg.Burst)
	}
}

func (u *account) setRate(rate float64, burst int) {
	u.rate.Store(math.Float64bits(rate))
	u.budget.SetRate(rate, burst)
	u.changed()
}

// record counts an attempt's outcome on the route's and the account's
// series and, failed or not, in the account's health.
func (u *account) record(r *route.Route, outcome metrics.Outcome, took time.Duration, failed bool) {
	u.m.Upstream(int(r.ID), outcome, took.Seconds())
	u.m.AccountCall(u.name, outcome)
	u.health.observe(took, failed)
}
