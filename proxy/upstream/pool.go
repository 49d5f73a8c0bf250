package upstream

import (
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/time/rate"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/tracing"
)

// Pool is the upstream accounts (upstream, then upstream.accounts in
// order) and the choice among them. Each attempt goes to the healthiest
// account that has a token: breaker-open and locked-out (429) accounts are
// skipped, then fewer recent failures and lower latency come first, and
// accounts alike take turns. A connection error, timeout or 5xx is retried
// on another account with that account's token; a 429 locks its account
// out for the Retry-After and the call moves on at once. Misses that wait
// for a token wait in the fair queue.
type Pool struct {
	accts []*account
	queue *fairQueue
	// refreshes bounds the refreshes that go ahead of misses for the
	// budget (fairQueue.takeRefresh) to refreshShare of the accounts'
	// rates; beyond it a refresh yields to misses as before.
	refreshes *rate.Limiter
	m         *metrics.Metrics
	log       *slog.Logger
	turn      atomic.Uint32    // rotates the order of accounts alike
	tr        *tracing.Tracing // nil: off
	bytes     *ByteGate        // room for the answers being fetched (bytegate.go)

	// height is the upstream's reading of block-list height, learned at
	// the self-check (selfcheck.go: HeightReading).
	height atomic.Pointer[string]
}

// Options are a Pool's collaborators beside its configuration.
type Options struct {
	Metrics *metrics.Metrics // required
	Log     *slog.Logger     // required
	// Budget is the default account's quota; nil = a local token bucket
	// of upstream.rate.
	Budget Budget
	// AccountBudget makes the budgets of upstream.accounts; nil = local
	// token buckets of their rates.
	AccountBudget AccountBudget
	Tracing       *tracing.Tracing // nil: off
	// Sample says whether a repeatable WARN line may go out; nil = always.
	Sample func(logsample.Key) (ok bool, suppressed int64)
	// InflightBytes bounds the bytes of answers being fetched at once.
	InflightBytes int64
}

// AccountBudget makes the budget of an account other than the default
// one (fleet mode: one fleet-wide bucket per account).
type AccountBudget func(name string, rate float64, burst int) Budget

// accountConfigs are the accounts of cfg: the upstream block as "default",
// then each of upstream.accounts over the block's shared settings.
func accountConfigs(cfg config.Upstream) (names []string, cfgs []config.Upstream) {
	base := cfg
	base.Accounts = nil
	names, cfgs = append(names, "default"), append(cfgs, base)
	for _, a := range cfg.Accounts {
		c := base
		c.BaseURL, c.APIKey, c.SecretKey, c.Passphrase, c.Rate, c.Burst = a.BaseURL, a.APIKey, a.SecretKey, a.Passphrase, a.Rate, a.Burst
		c.APIKeyFile, c.SecretKeyFile, c.PassphraseFile = "", "", ""
		names, cfgs = append(names, a.Name), append(cfgs, c)
	}
	return names, cfgs
}

// NewPool makes the accounts of cfg.
func NewPool(cfg config.Upstream, o Options) (*Pool, error) {
	m := o.Metrics
	pl := &Pool{m: m, log: o.Log, tr: o.Tracing, bytes: NewByteGate(o.InflightBytes)}
	names, cfgs := accountConfigs(cfg)
	for i, name := range names {
		var b Budget
		switch {
		case i == 0:
			b = o.Budget
		case o.AccountBudget != nil:
			b = o.AccountBudget(name, cfgs[i].Rate, cfgs[i].Burst)
		}
		u, err := newAccount(name, cfgs[i], m, o.Log, b)
		if err != nil {
			return nil, err
		}
		u.changed, u.sample = pl.changed, o.Sample
		pl.accts = append(pl.accts, u)
	}
	pl.queue = newFairQueue(pl.try)
	pl.refreshes = rate.NewLimiter(0, 1)
	pl.setRefreshShare(cfg)
	m.BudgetTokens(func() float64 {
		sum := 0.0
		for _, u := range pl.accts {
			sum += u.budget.Tokens()
		}
		return sum
	})
	m.ThrottledSeconds(func() float64 {
		until, ok := pl.LockedUntil(time.Now())
		if !ok {
			return 0
		}
		return time.Until(until).Seconds()
	})
	m.Accounts(names, func(i int) metrics.AccountState {
		u := pl.accts[i]
		s := metrics.AccountState{Tokens: u.budget.Tokens(), Rate: math.Float64frombits(u.rate.Load()),
			Breaker: float64(u.breaker.State()), ErrorRatio: u.health.errorRatio()}
		if until, ok := u.lockedUntil(time.Now()); ok {
			s.ThrottledSeconds = time.Until(until).Seconds()
		}
		return s
	})
	pl.changed()
	return pl, nil
}

// changed sets the gauges that sum up the accounts: the budget rate is
// theirs together; the breaker is open only when every account's is.
func (pl *Pool) changed() {
	rate, state := 0.0, gobreaker.StateOpen
	for _, u := range pl.accts {
		rate += math.Float64frombits(u.rate.Load())
		state = min(state, gobreaker.State(u.breakerState.Load()))
	}
	pl.m.BudgetRate.Set(rate)
	pl.m.BreakerState.Set(float64(state))
}

// cfg is the settings every account shares.
func (pl *Pool) cfg() *config.Upstream { return pl.accts[0].cfg.Load() }

// reconfigure applies a reload: rates and credentials of every account.
func (pl *Pool) Reconfigure(cfg config.Upstream) {
	_, cfgs := accountConfigs(cfg)
	for i, u := range pl.accts {
		u.reconfigure(cfgs[i])
	}
	pl.setRefreshShare(cfg)
}

// refreshShare is the part of the budget refreshes may take ahead of
// misses: half. The newest pages of a few chains need a refresh a second
// each; the other half stays the misses' whatever the refreshes ask.
const refreshShare = 0.5

func (pl *Pool) setRefreshShare(cfg config.Upstream) {
	_, cfgs := accountConfigs(cfg)
	sum, burst := 0.0, 0
	for _, c := range cfgs {
		sum, burst = sum+c.Rate, burst+c.Burst
	}
	pl.refreshes.SetLimit(rate.Limit(sum * refreshShare))
	pl.refreshes.SetBurst(max(1, int(float64(burst)*refreshShare)))
}

// usable reports whether u may be sent a call now: its breaker lets one
// through and no 429 locks it out.
func (u *account) usable(now time.Time) bool {
	if u.breakerOpen() {
		return false
	}
	_, locked := u.lockedUntil(now)
	return !locked
}

// order is the usable accounts, best first, without avoid unless it is the
// only one.
func (pl *Pool) order(avoid *account, now time.Time) []*account {
	var buf [config.MaxAccounts + 1]*account
	c := buf[:0]
	n := len(pl.accts)
	start := int(pl.turn.Add(1)) % n
	for i := range n {
		if u := pl.accts[(start+i)%n]; u.usable(now) {
			c = append(c, u)
		}
	}
	if len(c) > 1 && avoid != nil {
		c = slices.DeleteFunc(c, func(u *account) bool { return u == avoid })
	}
	if len(c) > 1 {
		slices.SortStableFunc(c, func(a, b *account) int {
			ea, la := a.health.rank()
			eb, lb := b.health.rank()
			if ea != eb {
				return ea - eb
			}
			return la - lb
		})
	}
	return slices.Clone(c)
}

// try takes a token, without waiting, from the best usable account that
// has one; with none, it says when the first is due.
func (pl *Pool) try(background bool, avoid *account) (*account, time.Duration) {
	due := time.Duration(math.MaxInt64)
	for _, u := range pl.order(avoid, time.Now()) {
		ok, d := u.budget.Take(0, background)
		if ok {
			return u, 0
		}
		due = min(due, d)
	}
	if due == math.MaxInt64 {
		due = time.Second
	}
	return nil, due
}

// lockedUntil reports, when no account is usable and some are locked out
// by a 429, when the first lock-out ends.
func (pl *Pool) LockedUntil(now time.Time) (time.Time, bool) {
	var first time.Time
	for _, u := range pl.accts {
		until, locked := u.lockedUntil(now)
		if !locked {
			if !u.breakerOpen() {
				return time.Time{}, false
			}
			continue
		}
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	return first, !first.IsZero()
}

// failing names, among several accounts, those that are failing: breaker
// open, or their latest attempts failed (an error ratio of 0.2 or more:
// the moving average after one failure). Those are asked only when no
// other account can be.
func (pl *Pool) Failing() string {
	if len(pl.accts) < 2 {
		return "" // alone, its breaker and lock-out say it all
	}
	var names []string
	for _, u := range pl.accts {
		if u.breakerOpen() || u.health.errorRatio() >= 0.2 {
			names = append(names, u.name)
		}
	}
	return strings.Join(names, ", ")
}

// breakerOpen reports whether every account's breaker is open.
func (pl *Pool) BreakerOpen() bool {
	for _, u := range pl.accts {
		if !u.breakerOpen() {
			return false
		}
	}
	return true
}

// Fetch asks f's question of the best account, retrying on another one
// (or, alone, on the same after a jittered backoff). It returns the
// upstream's answer, its body a copy and its envelope checked, or an
// *envelope.Error. Callers with a stale copy and background callers never wait for
// the budget: the former have a copy to serve, the latter yield to client
// misses.
//
// An account that fails (a transport failure, a 5xx, a 429, an envelope
// saying the upstream is failing, its credentials refused) is left for
// another at once. A refusal of the question (envelope.RefusedQuestion) is asked
// again of another account when there is one: the explorer validates
// what the edge already validated, so a refusal is rare, and one that
// another account answers is the first account's failure, never a
// negative answer to cache.
func (pl *Pool) Fetch(f *Request) (Answer, error) {
	r := f.Route
	cfg := pl.cfg()
	deadline := time.Now().Add(cfg.RetryMaxTime)
	var avoid, refusedBy *account
	var refused Answer // refusedBy's refusal, while another account is asked
	for attempt := 0; ; attempt++ {
		_, bs := pl.tr.Span(f.Trace, "budget")
		u, err := pl.take(r, cfg, f, avoid)
		tracing.End(bs, err)
		if err != nil {
			if refusedBy != nil {
				return refused, nil
			}
			return Answer{}, err
		}
		a, err := pl.attempt(u, r, cfg, f, attempt, deadline)
		switch {
		case refusedBy != nil:
			if err == nil && !envelope.RefusedQuestion(a.Status, a.Code) {
				refusedBy.refusedWrongly(r, u)
				a.Behind = pl.behind(u, f, a)
				return a, nil
			}
			if err == nil {
				return a, nil // refused again: the question's fault
			}
			return refused, nil // no second opinion: the refusal stands
		case err == nil:
			if envelope.RefusedQuestion(a.Status, a.Code) && attempt < cfg.Retries && pl.another(u) {
				refused, refusedBy, avoid = a, u, u
				continue
			}
			if a.Behind = pl.behind(u, f, a); a.Behind > 0 && attempt < cfg.Retries && pl.another(u) {
				avoid = u // a head page behind the head seen: another account may be current
				continue
			}
			return a, nil
		}
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			u.m.Upstream(int(r.ID), metrics.OutcomeBreakerOpen, -1)
			err = envelope.ErrBreakerOpen.With(err, int(cfg.BreakerOpenFor/time.Second)+1)
			if attempt < cfg.Retries && pl.another(u) {
				avoid = u
				continue
			}
			return Answer{}, err
		}
		if attempt >= cfg.Retries {
			return passOn(a, err)
		}
		// Another account may answer what this one would not: at once,
		// with a token of its own.
		if (retryable(err) || throttledByUpstream(err) || accountFault(err)) && pl.another(u) {
			u.log.Debug("upstream retry on another account", "route", r.Name, "account", u.name, "attempt", attempt+1, "err", err)
			avoid = u
			continue
		}
		if !retryable(err) {
			return passOn(a, err)
		}
		backoff := jitter(cfg.RetryBackoff << attempt)
		if time.Now().Add(backoff).After(deadline) {
			return passOn(a, err)
		}
		u.log.Debug("upstream retry", "route", r.Name, "account", u.name, "attempt", attempt+1, "backoff", backoff, "err", err)
		avoid = nil
		time.Sleep(backoff)
	}
}

// behind feeds chain truth with a success of u to f (Request.Observe) and
// returns how many blocks its head page is behind the head seen. An
// account behind is failing for its health (asked after the others) and
// its lag is a gauge; a current head page sets the gauge to 0.
func (pl *Pool) behind(u *account, f *Request, a Answer) int64 {
	if f.Observe == nil || a.Code != "0" || a.Status != 200 {
		return 0
	}
	lag := f.Observe(a.Body)
	if lag > 0 {
		u.health.fail()
	}
	if f.HeadList {
		pl.m.AccountHeadLag(u.name, f.Chain, lag)
	}
	return lag
}

// attempt makes one call of f on u through u's breaker, in a span of its
// own.
func (pl *Pool) attempt(u *account, r *route.Route, cfg *config.Upstream, f *Request, attempt int, deadline time.Time) (Answer, error) {
	ac, as := pl.tr.Span(f.Trace, "upstream", attribute.String("account", u.name),
		attribute.String("route", r.Name), attribute.Int("attempt", attempt+1))
	if f.Tenant != nil {
		f.Tenant.Acct.Called()
	}
	var a Answer
	_, err := u.breaker.Execute(func() (struct{}, error) {
		var err error
		a, err = u.call(ac, r, f.Key, min(cfg.Timeout, time.Until(deadline)))
		return struct{}{}, err
	})
	if as != nil {
		outcome := "ok"
		if k := envelope.KindOf(err); k != envelope.KindNone {
			outcome = k.Detail()
		}
		as.SetAttributes(attribute.Int("http.response.status_code", a.Status), attribute.String("outcome", outcome))
		tracing.End(as, err)
	}
	return a, err
}

// passOn is the end of a fetch that failed with err: an envelope saying
// the upstream is failing, which no other account could replace, goes to
// the request path as the upstream sent it (passed through, or a stale
// copy stands in); any other failure is the error.
func passOn(a Answer, err error) (Answer, error) {
	if a.Body != nil {
		return a, nil
	}
	return Answer{}, err
}

// accountFault: the failure is the account's own (its credentials were
// refused, or it answered an envelope saying it is failing), so another
// account may well answer.
func accountFault(err error) bool {
	switch envelope.KindOf(err) {
	case envelope.KindCredentials, envelope.KindEnvelope, envelope.KindNotFound:
		return true
	}
	return false
}

// refusedWrongly notes that u refused a question (50014, 50025, 50036)
// that other answered: u's failure, in its health and its breaker.
func (u *account) refusedWrongly(r *route.Route, other *account) {
	u.health.fail()
	u.breaker.Execute(func() (struct{}, error) { return struct{}{}, errRefusedWrongly })
	if u.sample == nil {
		return
	}
	if ok, suppressed := u.sample(logsample.Key{Msg: "upstream account refused a question another answered", Route: u.name}); ok {
		u.log.Warn("upstream account refused a question another answered", "account", u.name, "answered_by", other.name,
			"route", r.Name, "suppressed", suppressed)
	}
}

// errRefusedWrongly records, in an account's breaker, a refusal of a
// question another account answered.
var errRefusedWrongly = &envelope.Error{Status: 502, Code: "50026", Msg: "Upstream error: an account refused a valid question", Kind: envelope.KindRefusedWrongly}

// another reports whether an account other than u is usable now.
func (pl *Pool) another(u *account) bool {
	now := time.Now()
	for _, o := range pl.accts {
		if o != u && o.usable(now) {
			return true
		}
	}
	return false
}

// throttledByUpstream: the upstream answered 429 or 50011 (not the edge's
// own budget, which shares its Cache-Status detail "quota").
func throttledByUpstream(err error) bool {
	return envelope.KindOf(err) == envelope.KindThrottled
}

// take draws one token for an attempt of f from the best usable account,
// or says why it may not go. Misses that must wait wait in the fair queue,
// in turn with other clients' misses.
func (pl *Pool) take(r *route.Route, cfg *config.Upstream, f *Request, avoid *account) (*account, error) {
	now := time.Now()
	t := f.Tenant
	if until, ok := pl.LockedUntil(now); ok {
		pl.m.Throttled.WithLabelValues("upstream").Inc()
		pl.m.Upstream(int(r.ID), outcomeOf(envelope.KindLockedOut), -1)
		if t != nil {
			t.Acct.Refused(metrics.RefusedUpstream)
		}
		return nil, envelope.ErrLockedOut.With(nil, envelope.CeilSeconds(until.Sub(now)))
	}
	if pl.BreakerOpen() {
		pl.m.Upstream(int(r.ID), metrics.OutcomeBreakerOpen, -1)
		return nil, envelope.ErrBreakerOpen.With(gobreaker.ErrOpenState, int(cfg.BreakerOpenFor/time.Second)+1)
	}
	if t == nil {
		t = unattributed
	}
	var u *account
	var retry time.Duration
	switch {
	case (f.HaveStale || f.Background) && !(f.Poll && f.Background) && pl.refreshes.Allow():
		// A refresh of a copy clients are served from goes ahead of the
		// misses, within its share of the budget. The event stream's
		// refresh of a variant (Poll and Background) yields to them.
		u, retry = pl.queue.takeRefresh(cfg.BudgetWait, avoid)
	case f.HaveStale || f.Background:
		u, retry = pl.queue.take(t, 0, f.Background, avoid)
	default:
		u, retry = pl.queue.take(t, cfg.BudgetWait, false, avoid)
	}
	if u == nil {
		pl.m.Throttled.WithLabelValues("budget").Inc()
		pl.m.Upstream(int(r.ID), outcomeOf(envelope.KindBudget), -1)
		if f.Tenant != nil {
			f.Tenant.Acct.Refused(metrics.RefusedBudget)
		}
		return nil, envelope.ErrBudget.With(nil, envelope.CeilSeconds(retry))
	}
	return u, nil
}

// health is an account's recent record: moving averages of failures (0 or
// 1 per attempt) and of latency.
type health struct {
	mu      sync.Mutex
	errs    float64
	latency float64 // seconds
}

// observe adds one attempt.
func (h *health) observe(took time.Duration, failed bool) {
	const alpha = 0.2
	f := 0.0
	if failed {
		f = 1
	}
	h.mu.Lock()
	h.errs += alpha * (f - h.errs)
	h.latency += alpha * (took.Seconds() - h.latency)
	h.mu.Unlock()
}

// fail adds one failure that took no time of the account's (its answer
// turned out wrong later), leaving the latency as it was.
func (h *health) fail() {
	const alpha = 0.2
	h.mu.Lock()
	h.errs += alpha * (1 - h.errs)
	h.mu.Unlock()
}

func (h *health) errorRatio() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errs
}

// rank orders accounts: failures in steps of 10%, then latency in steps
// of 10 ms; accounts in the same steps are alike and take turns.
func (h *health) rank() (errs, latency int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int(h.errs * 10), int(h.latency * 100)
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}
