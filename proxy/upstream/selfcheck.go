package upstream

import (
	"context"
	"errors"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The upstream self-check: at start, and again while it fails, each
// account is asked the cheapest question there is (the first chain's
// newest block, block-list limit=1), signed and within its budget, to say
// whether upstream.base_url and the credentials work before clients find
// out. Its result is in /readyz's reason. A base_url the upstream answers
// 404 to, or credentials it refuses, make the pod not ready while nothing
// is cached: a rollout of a wrong configuration stops at its first pod,
// and the pods before it keep serving. Any other failure (a timeout, a
// 5xx: the upstream down) leaves readiness to the breaker, as without a
// self-check. A failed account is asked again every RetrySelfCheck
// interval until it answers, and any answer it gives a client clears it
// too: a failed self-check never keeps a healthy pod unready.
//
// The first account to answer is asked one question more, once: what the
// upstream makes of block-list height (docs/explorer-readings.md), the
// blocks down from it (explorer-sim's old reading, height-down) or the
// block at it alone (the vendor's, height-at). It is logged, and
// HeightReading says it; the edge's fork search walks pages that mean the
// same under both (proxy/reorg.go), so nothing waits for it.

// selfCheckState is an account's last self-check.
type selfCheckState struct {
	ok bool
	// misconfigured: the account's base_url (404) or credentials were
	// refused: the configuration is wrong, not the upstream down.
	misconfigured bool
	why           string
	at            time.Time
}

// checkPassed is the state of an account that answered.
var checkPassed = &selfCheckState{ok: true}

// errSelfCheckDeferred: no budget token was free for an account's
// self-check; it is asked again later.
var errSelfCheckDeferred = errors.New("upstream self-check deferred: the upstream budget is spent")

// SelfCheck asks every upstream account block-list limit=1 of chain, at once, and keeps each result for Ready. It returns nil when
// every account answered (any envelope: the URL and the credentials
// work), or an error naming each account's problem: 404, the base_url;
// HTTP 401 or 50102-50113, the credentials; else the upstream's failure,
// or errSelfCheckDeferred when no budget token was free. It never waits
// for the budget: it takes a token as a background refresh does.
func (pl *Pool) SelfCheck(ctx context.Context, chain string) error {
	return pl.selfCheck(ctx, chain, false)
}

// selfCheck is SelfCheck, of the accounts not known to answer only when
// failedOnly.
func (pl *Pool) selfCheck(ctx context.Context, chain string, failedOnly bool) error {
	r := &route.Table[route.BlockList]
	target := r.Path + "?chainShortName=" + url.QueryEscape(chain) + "&limit=1"
	errs := make([]error, len(pl.accts))
	var wg sync.WaitGroup
	for i, u := range pl.accts {
		if st := u.checked.Load(); failedOnly && st != nil && st.ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pl.checkAccount(ctx, u, r, target, chain)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	switch {
	case err == nil:
		pl.log.Info("upstream self-check ok", "accounts", len(pl.accts), "question", target)
	case errors.Is(err, errSelfCheckDeferred) || ctx.Err() != nil:
		pl.log.Warn("upstream self-check not done", "err", err.Error())
	case pl.misconfigured():
		// The configuration is wrong: nothing will work until it is fixed.
		pl.log.Error("upstream self-check failed", "problems", strings.ReplaceAll(err.Error(), "\n", "; "), "question", target)
	default:
		// The upstream down or slow: the breaker and stale copies see to it.
		pl.log.Warn("upstream self-check failed", "problems", strings.ReplaceAll(err.Error(), "\n", "; "), "question", target)
	}
	return err
}

// checkAccount asks u target once and records the result on u; the
// first account to answer learns the height reading (learnHeight).
func (pl *Pool) checkAccount(ctx context.Context, u *account, r *route.Route, target, chain string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ok, _ := u.budget.Take(0, true); !ok {
		return errSelfCheckDeferred
	}
	var a Answer
	_, err := u.breaker.Execute(func() (_ struct{}, err error) {
		a, err = u.call(context.Background(), r, target, u.cfg.Load().Timeout)
		return struct{}{}, err
	})
	if err == nil {
		u.checked.Store(checkPassed)
		pl.learnHeight(u, r, chain, a)
		return nil
	}
	st := &selfCheckState{why: err.Error(), at: time.Now()}
	var e *envelope.Error
	switch {
	case errors.As(err, &e) && e.Kind == envelope.KindNotFound:
		st.misconfigured, st.why = true, "the upstream answered 404, no such path: upstream.base_url is wrong"
	case errors.As(err, &e) && e.Kind == envelope.KindCredentials:
		st.misconfigured, st.why = true, "the upstream refused the credentials (api_key, secret_key, passphrase)"
		if e.Err != nil { // which code: frozen, blocked, without permission, the keys may be right
			st.why += " or the account: " + e.Err.Error()
		}
	case errors.As(err, &e):
		st.why = "the upstream failed: " + e.Msg
	}
	u.checked.Store(st)
	return errors.New("account " + u.name + ": " + st.why)
}

// RetrySelfCheck asks the accounts that failed SelfCheck (or were not
// asked for want of a budget token) again every `every`, until each has
// answered it or a client's call, or ctx ends. It returns at once when
// every account is known to answer.
func (pl *Pool) RetrySelfCheck(ctx context.Context, chain string, every time.Duration) {
	for !pl.selfChecked() {
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !pl.selfChecked() {
			pl.selfCheck(ctx, chain, true)
		}
	}
}

// misconfigured reports whether an account's base_url or credentials were
// refused at its last self-check.
func (pl *Pool) misconfigured() bool {
	for _, u := range pl.accts {
		if st := u.checked.Load(); st != nil && st.misconfigured {
			return true
		}
	}
	return false
}

// selfChecked reports whether every account is known to answer.
func (pl *Pool) selfChecked() bool {
	for _, u := range pl.accts {
		if st := u.checked.Load(); st == nil || !st.ok {
			return false
		}
	}
	return true
}

// SelfCheckReason is what the self-check adds to Ready: whether it makes
// the pod not ready (an account's base_url or credentials refused, no
// account known to answer, and nothing cached to serve) and the words for
// the reason; "" when no account has failed it.
func (pl *Pool) SelfCheckReason(empty bool) (notReady bool, why string) {
	var failed []string
	misconfigured, answers := true, false
	for _, u := range pl.accts {
		st := u.checked.Load()
		switch {
		case st == nil:
		case st.ok:
			answers = true
		default:
			failed = append(failed, "account "+u.name+": "+st.why+" (at "+st.at.UTC().Format(time.RFC3339)+")")
			misconfigured = misconfigured && st.misconfigured
		}
	}
	if len(failed) == 0 {
		return false, ""
	}
	return misconfigured && !answers && empty, "upstream self-check failed: " + strings.Join(failed, "; ")
}

// The readings of block-list height HeightReading names.
const (
	HeightUnknown = "unknown"     // not learned (yet): no account answered, or no token was free
	HeightDown    = "height-down" // the blocks from that height down, a page of them
	HeightAt      = "height-at"   // the block at that height alone (the vendor's v6 page)
	HeightOther   = "other"       // neither: see the log line
)

// HeightReading is the upstream's reading of block-list height, learned
// at the self-check (HeightUnknown until then).
func (pl *Pool) HeightReading() string {
	if h := pl.height.Load(); h != nil {
		return *h
	}
	return HeightUnknown
}

// learnHeight asks u, once per pool, block-list height=head-5&limit=2 of
// chain (head: the newest block of the self-check's answer a) and logs
// what it answers: two blocks, head-5 and head-6, is height-down; one,
// head-5, is height-at. One call, within u's budget (none free: not
// learned, and asked again at the next self-check).
func (pl *Pool) learnHeight(u *account, r *route.Route, chain string, a Answer) {
	if pl.height.Load() != nil || a.Code != "0" {
		return
	}
	blocks := route.Blocks(route.BlockList, -1, a.Body)
	if len(blocks) == 0 || blocks[0].Height < 10 {
		return // an empty or young chain: nothing to tell the readings apart
	}
	if ok, _ := u.budget.Take(0, true); !ok {
		return
	}
	at := blocks[0].Height - 5
	target := r.Path + "?chainShortName=" + url.QueryEscape(chain) + "&height=" + strconv.FormatInt(at, 10) + "&limit=2"
	var b Answer
	_, err := u.breaker.Execute(func() (_ struct{}, err error) {
		b, err = u.call(context.Background(), r, target, u.cfg.Load().Timeout)
		return struct{}{}, err
	})
	if err != nil || b.Code != "0" {
		pl.log.Warn("upstream block-list height reading not learned", "account", u.name, "question", target, "err", err, "code", b.Code)
		return
	}
	got := route.Blocks(route.BlockList, at, b.Body)
	reading := HeightOther
	switch {
	case len(got) == 2 && got[0].Height == at && got[1].Height == at-1:
		reading = HeightDown
	case len(got) == 1 && got[0].Height == at:
		reading = HeightAt
	}
	if !pl.height.CompareAndSwap(nil, &reading) {
		return
	}
	heights := make([]int64, len(got))
	for i, g := range got {
		heights[i] = g.Height
	}
	if reading == HeightOther {
		pl.log.Warn("upstream block-list height reading is neither the blocks down from it nor the block at it", "account", u.name,
			"question", target, "heights", heights)
		return
	}
	pl.log.Info("upstream block-list height reading learned", "reading", reading, "account", u.name, "question", target, "heights", heights)
}
