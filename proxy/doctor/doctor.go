// Package doctor asks the configured upstream, with the edge's own
// credentials and at most MaxCalls signed calls within its budget, which
// reading it has of each point the explorer's documentation leaves open
// or says two ways (docs/doctor.md): what block-list's height means,
// whether blocks carry a state, how a height above the head is answered,
// which field of a cross-chain record holds the hash asked, whether its
// updateTime moves, whether position-list takes limit=100; and the clock
// skew from the upstream's Date, whether a 429 carries Retry-After. It
// says what the edge will do and what to set, and which findings make the
// edge unsafe. It never prints a credential.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/signer"
)

// MaxCalls bounds the signed calls one run makes, whatever it finds.
const MaxCalls = 10

// Severities, from harmless to unsafe. A run with an Unsafe finding exits
// non-zero: the edge would serve wrong answers, or none.
const (
	OK     = "ok"     // the edge works with this reading as it is
	Info   = "info"   // not checked, or a reading the edge handles by itself
	Warn   = "warn"   // the edge is correct, but a key should be set (or the clock fixed) for it to be thrifty
	Unsafe = "unsafe" // the edge must not serve against this upstream as configured
)

// Points, the stable names of what is examined (Finding.Point).
const (
	PointUpstream   = "upstream"
	PointCreds      = "credentials"
	PointClock      = "clock"
	PointHeight     = "height"
	PointState      = "state"
	PointNoData     = "nodata"
	PointCrossID    = "cross-id"
	PointUpdate     = "update"
	PointPosition   = "position-limit"
	PointRetryAfter = "retry-after"
)

// UpstreamMaxSkew is how far a request's SVC-ACCESS-TIMESTAMP may be from
// the upstream's clock before it answers 50102 "timestamp expired". The
// API spec does not say; the vendor's sibling APIs document 30 s, and
// explorer-sim refuses at 30 s (sim.MaxSkew).
const UpstreamMaxSkew = 30 * time.Second

// warnSkew is the skew that is already worth fixing: a third of the
// upstream's tolerance, with the Date header's one-second resolution.
const warnSkew = 5 * time.Second

// Finding is what one point was found to be. The JSON names are a stable
// interface (explorer-edge doctor -json).
type Finding struct {
	Point    string `json:"point"`
	Account  string `json:"account,omitempty"` // the account asked, for credentials
	Reading  string `json:"reading"`
	Evidence string `json:"evidence"`
	Advice   string `json:"advice"`
	Severity string `json:"severity"`
}

// Report is a run's findings.
type Report struct {
	Upstream string    `json:"upstream"` // base_url, without any user:password in it
	Chain    string    `json:"chain"`
	Calls    int       `json:"calls"` // signed calls made
	Findings []Finding `json:"findings"`
	Unsafe   bool      `json:"unsafe"` // some finding is Unsafe: exit non-zero
}

// Options says what to examine.
type Options struct {
	Config *config.Config // the edge's configuration, credentials resolved
	// Chain is the chainShortName asked; "" is the first of Config.Chains.
	Chain string
	// CrossChain is the chain of CrossHash; "" is TRADE_ZONE when served,
	// else Chain.
	CrossChain string
	// CrossHash is a known cross-chain hash (the TZ side); "" leaves the
	// cross-chain points unchecked.
	CrossHash string
	// Token is a token contract address for the position-list point; ""
	// takes one from a token transfer of a recent block.
	Token string
	// Transport carries the calls; nil is a transport of the run's own.
	Transport http.RoundTripper
}

// account is one upstream account: the default one, then upstream.accounts.
type account struct {
	name   string
	scheme string
	host   string
	prefix string
	sign   *signer.Signer
	creds  signer.Credentials
	gap    time.Duration // 1/rate: the least time between two calls
	last   time.Time
}

// answer is one call's result.
type answer struct {
	target     string // as asked, without the base_url
	status     int
	code, msg  string
	data       json.RawMessage
	date       time.Time // the upstream's Date, zero when absent
	sent, recv time.Time
	retryAfter string
	hasRetry   bool
	err        error // transport, or a body that is no envelope
}

// ok is a successful envelope.
func (a *answer) ok() bool { return a.err == nil && a.status == http.StatusOK && a.code == "0" }

// says describes the answer in a line for evidence.
func (a *answer) says() string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.code == "0":
		return fmt.Sprintf("HTTP %d, code 0", a.status)
	}
	return fmt.Sprintf("HTTP %d, code %s %q", a.status, a.code, a.msg)
}

// run is one doctor run.
type run struct {
	o        Options
	cfg      *config.Config
	client   *http.Client
	accts    []*account
	chain    string
	calls    int
	findings []Finding
	saw429   bool
	retryHdr []string // Retry-After values of 429 answers ("" for none)
}

// Run examines the upstream as o says and returns what it found. It makes
// at most MaxCalls signed calls, spaced at least 1/rate of the account
// asked apart, and stops early when the upstream cannot be used at all.
func Run(ctx context.Context, o Options) Report {
	cfg := o.Config
	r := &run{o: o, cfg: cfg, chain: o.Chain}
	if r.chain == "" && len(cfg.Chains) > 0 {
		r.chain = cfg.Chains[0]
	}
	tr := o.Transport
	if tr == nil {
		t := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}
		defer t.CloseIdleConnections()
		tr = t
	}
	timeout := cfg.Upstream.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	r.client = &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect would carry the signed headers elsewhere; it is
		// reported as the answer it is.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	rep := Report{Upstream: redactURL(cfg.Upstream.BaseURL), Chain: r.chain}
	if err := r.accounts(); err != nil {
		r.add(Finding{Point: PointUpstream, Reading: "misconfigured", Evidence: err.Error(),
			Advice: "fix upstream.base_url", Severity: Unsafe})
	} else {
		r.examine(ctx)
	}
	rep.Calls = r.calls
	rep.Findings = r.findings
	for i := range rep.Findings {
		f := &rep.Findings[i]
		f.Evidence = r.redact(f.Evidence)
		f.Advice = r.redact(f.Advice)
		if f.Severity == Unsafe {
			rep.Unsafe = true
		}
	}
	return rep
}

// accounts makes the configured accounts: the upstream block as
// "default", then upstream.accounts over its shared settings (as the
// edge's pool does).
func (r *run) accounts() error {
	up := r.cfg.Upstream
	add := func(name, base string, creds signer.Credentials, rate float64) error {
		u, err := url.Parse(base)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("account %s: base_url %q is not http(s)://host[:port][/prefix]", name, redactURL(base))
		}
		if rate <= 0 {
			rate = up.Rate
		}
		gap := time.Duration(0)
		if rate > 0 {
			gap = time.Duration(float64(time.Second) / rate)
		}
		r.accts = append(r.accts, &account{name: name, scheme: u.Scheme, host: u.Host, prefix: strings.TrimRight(u.Path, "/"),
			sign: signer.New(creds), creds: creds, gap: gap})
		return nil
	}
	if err := add("default", up.BaseURL, signer.Credentials{APIKey: up.APIKey, SecretKey: up.SecretKey, Passphrase: up.Passphrase}, up.Rate); err != nil {
		return err
	}
	for _, a := range up.Accounts {
		base := a.BaseURL
		if base == "" {
			base = up.BaseURL
		}
		if err := add(a.Name, base, signer.Credentials{APIKey: a.APIKey, SecretKey: a.SecretKey, Passphrase: a.Passphrase}, a.Rate); err != nil {
			return err
		}
	}
	return nil
}

// redact replaces every credential of every account in s.
func (r *run) redact(s string) string {
	for _, a := range r.accts {
		for _, secret := range []string{a.creds.SecretKey, a.creds.Passphrase, a.creds.APIKey} {
			if len(secret) >= 4 {
				s = strings.ReplaceAll(s, secret, "[redacted]")
			}
		}
	}
	return s
}

// redactURL is base without user:password.
func redactURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return "(unparsable base_url)"
	}
	u.User = nil
	return u.String()
}

func (r *run) add(f Finding) { r.findings = append(r.findings, f) }

// errCap: the run has made MaxCalls calls.
var errCap = errors.New("not asked: the run's calls are spent (at most 10)")

// call asks a target (a route path and query) once, signed with a, after
// waiting out a's spacing. A 429 is noted (with its Retry-After) and
// asked once more after min(Retry-After, upstream.max_retry_after), if a
// call is left.
func (r *run) call(ctx context.Context, a *account, target string) *answer {
	ans := r.once(ctx, a, target)
	if ans.err == nil && ans.status == http.StatusTooManyRequests && r.calls < MaxCalls {
		wait := a.gap
		if s, err := strconv.Atoi(ans.retryAfter); err == nil && s > 0 {
			wait = max(wait, time.Duration(s)*time.Second)
		}
		if m := r.cfg.Upstream.MaxRetryAfter; m > 0 {
			wait = min(wait, m)
		}
		a.last = time.Now().Add(wait - a.gap)
		ans = r.once(ctx, a, target)
	}
	return ans
}

func (r *run) once(ctx context.Context, a *account, target string) *answer {
	ans := &answer{target: target}
	if r.calls >= MaxCalls {
		ans.err = errCap
		return ans
	}
	if d := time.Until(a.last.Add(a.gap)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			ans.err = ctx.Err()
			return ans
		case <-t.C:
		}
	}
	path := a.prefix + target
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.scheme+"://"+a.host+path, nil)
	if err != nil {
		ans.err = err
		return ans
	}
	// net/http sends the path and the query as they are written here
	// (plain ASCII, the query escaped already): what is signed is sent.
	ts := signer.Timestamp(time.Now())
	req.Header.Set(signer.HeaderKey, a.creds.APIKey)
	req.Header.Set(signer.HeaderPassphrase, a.creds.Passphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, a.sign.Sign(ts, http.MethodGet, path))
	req.Header.Set("User-Agent", "explorer-edge-doctor")
	r.calls++
	ans.sent = time.Now()
	a.last = ans.sent
	resp, err := r.client.Do(req)
	ans.recv = time.Now()
	if err != nil {
		ans.err = fmt.Errorf("no answer: %w", err)
		return ans
	}
	defer resp.Body.Close()
	ans.status = resp.StatusCode
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		ans.date = d
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		r.saw429 = true
		ans.retryAfter, ans.hasRetry = resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After") != ""
		r.retryHdr = append(r.retryHdr, ans.retryAfter)
	}
	limit := int64(r.cfg.Upstream.MaxResponseBytes)
	if limit <= 0 {
		limit = 8 << 20
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		ans.err = fmt.Errorf("HTTP %d, the body failed: %w", resp.StatusCode, err)
		return ans
	case int64(len(body)) > limit:
		ans.err = fmt.Errorf("HTTP %d, a body larger than upstream.max_response_bytes (%d)", resp.StatusCode, limit)
		return ans
	}
	var env struct {
		Code json.RawMessage `json:"code"`
		Msg  string          `json:"msg"`
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil || len(env.Code) == 0 {
		ans.err = fmt.Errorf("HTTP %d, no explorer envelope (%d bytes: %s)", resp.StatusCode, len(body), snippet(body))
		return ans
	}
	ans.code = strings.Trim(string(env.Code), `"`)
	ans.msg, ans.data = env.Msg, env.Data
	return ans
}

// snippet is the start of a body, for evidence.
func snippet(b []byte) string {
	const n = 80
	s := strings.ToValidUTF8(string(b[:min(len(b), n)]), "?")
	if len(b) > n {
		s += "..."
	}
	return strconv.Quote(s)
}

// block is the part of a block this package reads.
type block struct {
	Height string `json:"height"`
	Hash   string `json:"hash"`
	State  string `json:"state"`
}

// blocks reads the blocks of a block-list answer.
func blocks(a *answer) ([]block, int64, error) {
	var pages []struct {
		BlockList []block `json:"blockList"`
	}
	if err := json.Unmarshal(a.data, &pages); err != nil {
		return nil, 0, fmt.Errorf("data is not a block list: %v", err)
	}
	var out []block
	for _, p := range pages {
		out = append(out, p.BlockList...)
	}
	var top int64 = -1
	for _, b := range out {
		h, err := strconv.ParseInt(b.Height, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("block height %q is not a number", b.Height)
		}
		top = max(top, h)
	}
	return out, top, nil
}

// heights lists the heights of bs for evidence.
func heights(bs []block) string {
	hs := make([]string, len(bs))
	for i, b := range bs {
		hs[i] = b.Height
	}
	return "[" + strings.Join(hs, " ") + "]"
}

// states lists the states of bs for evidence ("" shown as "").
func states(bs []block) string {
	ss := make([]string, len(bs))
	for i, b := range bs {
		ss[i] = b.Height + ":" + strconv.Quote(b.State)
	}
	return strings.Join(ss, " ")
}

// examine runs every check in order; a failure of the first call, the
// newest page, ends it (nothing else can be learnt).
func (r *run) examine(ctx context.Context) {
	def := r.accts[0]
	blockPath := route.Table[route.BlockList].Path
	q := "?chainShortName=" + url.QueryEscape(r.chain)
	head := r.call(ctx, def, blockPath+q+"&limit=2")
	if !r.reached(def, head, true) {
		r.retryAfter()
		return
	}
	r.clock(head)
	headBlocks, top, err := blocks(head)
	if err != nil || top < 0 {
		why := "no block in it"
		if err != nil {
			why = err.Error()
		}
		r.add(Finding{Point: PointHeight, Reading: "unknown", Evidence: "the newest page (" + head.target + ") " + head.says() + ": " + why,
			Advice: "check chains: the upstream must serve " + r.chain, Severity: Unsafe})
		r.retryAfter()
		return
	}
	deep := r.height(ctx, def, blockPath+q, top)
	r.state(headBlocks, deep)
	for _, a := range r.accts[1:] {
		ans := r.call(ctx, a, blockPath+q+"&limit=1")
		if errors.Is(ans.err, errCap) {
			r.add(Finding{Point: PointCreds, Account: a.name, Reading: "not-checked", Evidence: ans.err.Error(),
				Advice: "run doctor with a configuration of this account alone", Severity: Warn})
			continue
		}
		r.reached(a, ans, false)
	}
	r.noData(ctx, def, blockPath+q, top)
	r.position(ctx, def, top)
	r.cross(ctx, def)
	r.retryAfter()
}

// reached judges whether account a could be used from its first answer:
// the upstream reached, the path known, the credentials taken. first says
// the answer is the run's first (an unusable upstream ends the run).
func (r *run) reached(a *account, ans *answer, first bool) bool {
	where := "account " + a.name + ": " + ans.target + " "
	switch {
	case ans.err != nil && ans.status == 0:
		r.add(Finding{Point: PointUpstream, Account: a.name, Reading: "unreachable", Evidence: where + ans.says(),
			Advice: "check upstream.base_url, the network and upstream.timeout; the edge serves only stale copies while it cannot reach the upstream", Severity: Unsafe})
		return false
	case ans.status == http.StatusNotFound:
		r.add(Finding{Point: PointUpstream, Account: a.name, Reading: "not-found", Evidence: where + ans.says(),
			Advice: "upstream.base_url is wrong: the routes are asked at base_url + " + config.APIPath + "/...", Severity: Unsafe})
		return false
	case ans.err != nil:
		r.add(Finding{Point: PointUpstream, Account: a.name, Reading: "not-an-explorer", Evidence: where + ans.says(),
			Advice: "upstream.base_url does not point at the explorer's read API", Severity: Unsafe})
		return false
	}
	if first {
		r.add(Finding{Point: PointUpstream, Reading: "reachable", Evidence: where + ans.says(), Severity: OK})
	}
	if ans.ok() {
		r.add(Finding{Point: PointCreds, Account: a.name, Reading: "accepted", Evidence: where + ans.says(), Severity: OK})
		return true
	}
	if envelope.CredentialsRefused(ans.status, ans.code) || ans.status == http.StatusForbidden {
		advice := "the upstream refuses this account: check its api_key, secret_key and passphrase (or their _file), and that the key is not frozen, blocked or without permission"
		if ans.code == "50102" || ans.code == "50112" {
			advice = "the upstream refused the request's timestamp: set the clock right (NTP); the edge signs with this host's clock"
			if !ans.date.IsZero() {
				advice += fmt.Sprintf(" (the upstream's clock is %s ahead of this host's)", skewOf(ans).Round(time.Second))
			}
		}
		r.add(Finding{Point: PointCreds, Account: a.name, Reading: "refused", Evidence: where + ans.says(), Advice: advice, Severity: Unsafe})
		return false
	}
	if ans.status == http.StatusTooManyRequests {
		r.add(Finding{Point: PointCreds, Account: a.name, Reading: "not-checked", Evidence: where + ans.says() + " (throttled twice)",
			Advice: "run doctor again when the account's budget has recovered", Severity: Unsafe})
		return false
	}
	r.add(Finding{Point: PointUpstream, Account: a.name, Reading: "failing", Evidence: where + ans.says(),
		Advice: "the upstream failed the cheapest question there is; run doctor again, and check upstream.base_url", Severity: Unsafe})
	return false
}

// skewOf is how far the upstream's clock is ahead of this host's, from
// ans's Date: Date is whole seconds, so the upstream's time was within
// [Date, Date+1s) when it answered, taken here as Date+0.5s against the
// middle of the call.
func skewOf(ans *answer) time.Duration {
	mid := ans.sent.Add(ans.recv.Sub(ans.sent) / 2)
	return ans.date.Add(500 * time.Millisecond).Sub(mid)
}

// clock is the clock finding from an answer's Date.
func (r *run) clock(ans *answer) {
	if ans.date.IsZero() {
		r.add(Finding{Point: PointClock, Reading: "unknown", Evidence: "the upstream's answer has no Date header",
			Advice: "keep this host's clock synchronized (NTP): the upstream refuses timestamps off by more than about 30 s", Severity: Info})
		return
	}
	skew := skewOf(ans)
	abs := skew.Abs()
	way := "ahead of"
	if skew < 0 {
		way = "behind"
	}
	ev := fmt.Sprintf("the upstream's Date %s against this host's %s: its clock is %s %s this host's (+-1s)",
		ans.date.UTC().Format(time.RFC3339), ans.recv.UTC().Format(time.RFC3339), abs.Round(100*time.Millisecond), way)
	f := Finding{Point: PointClock, Reading: "in-sync", Evidence: ev, Severity: OK}
	tolerance := r.cfg.Auth.MaxSkew
	switch {
	case abs >= UpstreamMaxSkew:
		f.Reading, f.Severity = "skewed", Unsafe
		f.Advice = fmt.Sprintf("set this host's clock right (NTP): the upstream refuses a timestamp more than %s from its clock, so every call the edge signs would soon be refused", UpstreamMaxSkew)
	case abs > warnSkew:
		f.Reading, f.Severity = "skewed", Warn
		f.Advice = fmt.Sprintf("set this host's clock right (NTP): more than %s off leaves little of the upstream's %s tolerance", warnSkew, UpstreamMaxSkew)
		if r.cfg.Auth.Mode == "signed" && tolerance > 0 && abs > tolerance/2 {
			f.Advice += fmt.Sprintf("; signed clients with true clocks are judged against this one (auth.max_skew %s)", tolerance)
		}
	}
	r.add(f)
}

// Words for what the edge does with each reading, kept here so the text
// and -json say the same.
const (
	adviceHeightAt = "the edge's fork search reads the newest-first pages rather than counting on height=X to list the blocks below X; nothing to set"
	adviceHeightDn = "the edge's fork search can ask height=X&limit=100 for the 100 blocks from X down; nothing to set"
	adviceStateOK  = "finality comes from state done: an answer at or below the highest done block is final, cached long and kept on disk; nothing to set"
	adviceStateNo  = "blocks carry no state: set chain_finality_depth for the chain (finality by depth), else the finalized height never rises, nothing is final and the disk tier stays empty"
)

// height asks height=top-10&limit=5 and names the reading; it returns the
// blocks of the answer (for the state point), nil when it could not tell.
func (r *run) height(ctx context.Context, a *account, base string, top int64) []block {
	x := top - 10
	if x < 4 {
		r.add(Finding{Point: PointHeight, Reading: "unknown", Evidence: fmt.Sprintf("the newest block is %d: too few blocks to tell", top),
			Advice: "run doctor again when the chain is older than 15 blocks", Severity: Unsafe})
		return nil
	}
	ans := r.call(ctx, a, fmt.Sprintf("%s&height=%d&limit=5", base, x))
	ev := fmt.Sprintf("newest block %d; %s answered %s", top, ans.target, ans.says())
	if !ans.ok() {
		r.add(Finding{Point: PointHeight, Reading: "unknown", Evidence: ev,
			Advice: "the edge cannot tell what height=X answers: run doctor again; do not serve until it can", Severity: Unsafe})
		return nil
	}
	bs, _, err := blocks(ans)
	if err != nil {
		r.add(Finding{Point: PointHeight, Reading: "unknown", Evidence: ev + ": " + err.Error(), Severity: Unsafe,
			Advice: "the upstream's block list is not the explorer's: check upstream.base_url"})
		return nil
	}
	ev += ", blocks " + heights(bs)
	run := func(from, step int64) bool {
		for i, b := range bs {
			if b.Height != strconv.FormatInt(from+int64(i)*step, 10) {
				return false
			}
		}
		return true
	}
	f := Finding{Point: PointHeight, Evidence: ev}
	switch {
	case len(bs) == 1 && run(x, -1):
		f.Reading, f.Advice, f.Severity = "height-at", adviceHeightAt, Info
	case len(bs) == 5 && run(x, -1):
		f.Reading, f.Advice, f.Severity = "height-down", adviceHeightDn, OK
	case len(bs) > 1 && run(x, +1):
		f.Reading, f.Severity = "height-up", Unsafe
		f.Advice = "the upstream lists the blocks from X upward, a reading the edge does not know: its fork search would look above the fork; do not serve"
	case len(bs) > 0 && bs[0].Height != strconv.FormatInt(x, 10):
		f.Reading, f.Severity = "height-ignored", Unsafe
		f.Advice = "the upstream does not answer the height asked: the edge would cache one height's answer under another; do not serve"
	default:
		f.Reading, f.Severity = "unknown", Unsafe
		f.Advice = "the answer fits no known reading of height: do not serve until it is understood"
	}
	r.add(f)
	if f.Severity == Unsafe {
		return nil
	}
	return bs
}

// state names the blocks' state reading from the newest page and the
// blocks 10 and more below it.
func (r *run) state(head, deep []block) {
	if deep == nil {
		r.add(Finding{Point: PointState, Reading: "unknown", Evidence: "no blocks 10 deep were read", Severity: Warn,
			Advice: "run doctor again; until it is known, finality comes only from a block's state done"})
		return
	}
	ev := "newest " + states(head) + "; 10 deep " + states(deep)
	count := func(bs []block, s string) (n int) {
		for _, b := range bs {
			if b.State == s {
				n++
			}
		}
		return n
	}
	f := Finding{Point: PointState, Evidence: ev}
	switch {
	case count(head, "")+count(deep, "") == len(head)+len(deep):
		f.Reading, f.Advice, f.Severity = "state-empty", adviceStateNo, Warn
	case count(deep, "done") == len(deep):
		f.Reading, f.Advice, f.Severity = "state-pending-done", adviceStateOK, OK
	case count(deep, "pending") > 0:
		f.Reading, f.Severity = "state-pending-deep", Warn
		f.Advice = "blocks 10 deep are still pending: finality from done lags the head by more than 10 blocks, so fewer answers are final; a chain_finality_depth for the chain would make them final sooner"
	default:
		f.Reading, f.Severity = "unknown", Warn
		f.Advice = "states other than pending, done or empty: finality comes only from done; set chain_finality_depth for the chain if no block is ever done"
	}
	r.add(f)
}

// noData asks a height far above the head.
func (r *run) noData(ctx context.Context, a *account, base string, top int64) {
	ans := r.call(ctx, a, fmt.Sprintf("%s&height=%d&limit=1", base, top+100_000))
	ev := ans.target + " answered " + ans.says()
	f := Finding{Point: PointNoData, Evidence: ev}
	switch {
	case errors.Is(ans.err, errCap):
		f.Reading, f.Severity = "not-checked", Info
	case ans.ok():
		bs, _, err := blocks(ans)
		switch {
		case err == nil && len(bs) == 0:
			f.Reading, f.Severity = "nodata-empty", OK
			f.Advice = "an empty list: the edge caches it for the route's negative time; nothing to set"
		default:
			f.Reading, f.Severity = "unknown", Warn
			f.Evidence += ", blocks " + heights(bs)
			f.Advice = "a height above the head answered blocks: see the height point"
		}
	case ans.err == nil && envelope.NoData(ans.status, ans.code): // the edge's own table (envelope.ClassOf)
		f.Reading, f.Severity = "nodata-code", Info
		f.Advice = "a \"no data\" code: the edge caches it like an empty answer for the route's negative time, so asking again costs no call; nothing to set"
	case ans.err == nil && envelope.RefusedQuestion(ans.status, ans.code):
		f.Reading, f.Severity = "refused", Info
		f.Advice = "a refusal of the question: the edge caches it for the route's negative time; nothing to set"
	default:
		f.Reading, f.Severity = "unknown", Warn
		f.Advice = "neither an empty list nor a \"no data\" code: the edge does not cache it, and each repeat costs a call"
	}
	r.add(f)
}

// position asks position-list limit=100 of a token: Options.Token, or the
// contract of a token transfer in the block 10 below the head.
func (r *run) position(ctx context.Context, a *account, top int64) {
	token := r.o.Token
	f := Finding{Point: PointPosition}
	if token == "" {
		h := top - 10
		ans := r.call(ctx, a, route.Table[route.TransactionList].Path+"?chainShortName="+url.QueryEscape(r.chain)+
			"&height="+strconv.FormatInt(h, 10)+"&protocolType=token_20&limit=20")
		token = tokenIn(ans)
		if token == "" {
			f.Reading, f.Severity = "not-checked", Info
			f.Evidence = "no token contract known: " + ans.target + " answered " + ans.says() + " without a token transfer"
			f.Advice = "give -token with a token contract address to check position-list limit=100"
			r.add(f)
			return
		}
	}
	ans := r.call(ctx, a, route.Table[route.PositionList].Path+"?chainShortName="+url.QueryEscape(r.chain)+
		"&tokenContractAddress="+url.QueryEscape(token)+"&limit=100")
	f.Evidence = ans.target + " answered " + ans.says()
	switch {
	case errors.Is(ans.err, errCap):
		f.Reading, f.Severity = "not-checked", Info
	case ans.ok():
		var pages []struct {
			Limit        string            `json:"limit"`
			PositionList []json.RawMessage `json:"positionList"`
		}
		_ = json.Unmarshal(ans.data, &pages)
		n, lim := 0, ""
		for _, p := range pages {
			n += len(p.PositionList)
			lim = p.Limit
		}
		f.Evidence += fmt.Sprintf(", limit %q, %d positions", lim, n)
		if lim == "100" || n > 50 {
			f.Reading, f.Severity = "position-limit-100", OK
			f.Advice = "limit=100 is taken: upstream.position_list_max_limit may stay at 100 (its default)"
		} else {
			f.Reading, f.Severity = "position-limit-50", Warn
			f.Advice = "limit=100 was answered with 50 or fewer: set upstream.position_list_max_limit to 50, so that the edge refuses what the upstream silently cuts"
		}
	case ans.err == nil && envelope.RefusedQuestion(ans.status, ans.code):
		f.Reading, f.Severity = "position-limit-50", Warn
		f.Advice = "limit=100 is refused: set upstream.position_list_max_limit to 50 (the edge caches the upstream's refusal meanwhile, so it costs a call per negative lifetime)"
	default:
		f.Reading, f.Severity = "unknown", Warn
		f.Advice = "the upstream neither took nor refused limit=100 (" + ans.says() + "); check the token (-token)"
	}
	r.add(f)
}

// tokenIn is the first token contract of a transaction-list answer.
func tokenIn(ans *answer) string {
	if !ans.ok() {
		return ""
	}
	var pages []struct {
		BlockList []struct {
			Token string `json:"tokenContractAddress"`
		} `json:"blockList"`
	}
	_ = json.Unmarshal(ans.data, &pages)
	for _, p := range pages {
		for _, t := range p.BlockList {
			if t.Token != "" {
				return t.Token
			}
		}
	}
	return ""
}

// crossRecord is the part of a cross-chain record this package reads.
type crossRecord map[string]any

// cross asks transaction-fills of Options.CrossHash twice: which field
// holds the hash asked, and whether updateTime moves.
func (r *run) cross(ctx context.Context, a *account) {
	if r.o.CrossHash == "" {
		why := "no cross-chain hash known: give -cross-hash (a TZ-side hash of a cross-chain transfer)"
		r.add(Finding{Point: PointCrossID, Reading: "not-checked", Evidence: why, Severity: Info,
			Advice: "the edge files records under the hash asked, found in whichever field holds it, and caches an answer where none does whole"})
		r.add(Finding{Point: PointUpdate, Reading: "not-checked", Evidence: why, Severity: Info,
			Advice: "the edge holds a record final only once its updateTime is older than cache.cross_chain_settle"})
		return
	}
	chain := r.o.CrossChain
	if chain == "" {
		chain = r.chain
		for _, c := range r.cfg.Chains {
			if strings.EqualFold(c, "TRADE_ZONE") {
				chain = c
			}
		}
	}
	target := route.Table[route.TransactionFills].Path + "?chainShortName=" + url.QueryEscape(chain) + "&txid=" + url.QueryEscape(r.o.CrossHash)
	first := r.call(ctx, a, target)
	recs, err := records(first)
	ev := first.target + " answered " + first.says()
	if err != nil || len(recs) == 0 {
		if first.ok() {
			ev += ": no record"
			if err != nil {
				ev += ", " + err.Error()
			}
		}
		sev := Info
		if first.err == nil && !first.ok() {
			sev = Warn
		}
		r.add(Finding{Point: PointCrossID, Reading: "not-checked", Evidence: ev, Severity: sev,
			Advice: "give -cross-hash a hash the upstream has a record of"})
		r.add(Finding{Point: PointUpdate, Reading: "not-checked", Evidence: ev, Severity: sev,
			Advice: "give -cross-hash a hash the upstream has a record of"})
		return
	}
	rec := recs[0]
	id, _ := rec["id"].(string)
	f := Finding{Point: PointCrossID, Evidence: fmt.Sprintf("%s; id %s", ev, id)}
	if strings.EqualFold(id, r.o.CrossHash) {
		f.Reading, f.Severity = "cross-id-asked", OK
		f.Advice = "records are filed under their id, the hash asked; nothing to set"
	} else {
		f.Reading = "cross-id-other"
		field := ""
		for _, k := range []string{"tzTxHash", "chainxTxHash"} {
			if v, _ := rec[k].(string); strings.EqualFold(v, r.o.CrossHash) {
				field = k
				break
			}
		}
		if field != "" {
			f.Severity = Info
			f.Evidence += "; the hash asked is in " + field
			f.Advice = "the id is not the hash asked: the edge files records under the hash asked, found in " + field + "; nothing to set"
		} else {
			f.Severity = Warn
			f.Evidence += "; no field holds the hash asked"
			f.Advice = "no field holds the hash asked: the edge caches such an answer whole under its question, so batches of other hashes cost a call each"
		}
	}
	r.add(f)
	r.update(ctx, a, target, first, rec)
}

// update compares the updateTime of two answers to one question, and its
// age by the upstream's clock.
func (r *run) update(ctx context.Context, a *account, target string, first *answer, rec crossRecord) {
	t1, _ := rec["updateTime"].(string)
	if t1 == "" {
		r.add(Finding{Point: PointUpdate, Reading: "update-absent", Evidence: "the record has no updateTime", Severity: Info,
			Advice: "without updateTime a record with a status is final at once"})
		return
	}
	second := r.call(ctx, a, target)
	recs, _ := records(second)
	f := Finding{Point: PointUpdate}
	if len(recs) == 0 {
		f.Reading, f.Severity = "not-checked", Info
		f.Evidence = "asked again: " + second.says()
		r.add(f)
		return
	}
	t2, _ := recs[0]["updateTime"].(string)
	ms1, _ := strconv.ParseInt(t1, 10, 64)
	upNow := first.recv
	if !first.date.IsZero() {
		upNow = first.date.Add(500 * time.Millisecond)
	}
	age := upNow.Sub(time.UnixMilli(ms1))
	f.Evidence = fmt.Sprintf("updateTime %s, then %s asked again %s later; %s old by the upstream's clock",
		t1, t2, second.sent.Sub(first.sent).Round(time.Millisecond), age.Round(time.Second))
	// An updateTime of about the time it was asked (within the Date's
	// resolution and a call) is a record that is changing as it is read.
	if t2 != t1 || age.Abs() < 5*time.Second {
		f.Reading, f.Severity = "update-moves", Warn
		f.Advice = "updateTime moves on a record with a status: keep cache.cross_chain_settle longer than it moves for; the edge holds a record final only once its updateTime is older than that"
	} else {
		f.Reading, f.Severity = "update-fixed", OK
		f.Advice = "updateTime did not move; the edge holds a record with a status final once its updateTime is older than cache.cross_chain_settle"
	}
	r.add(f)
}

// records reads the cross-chain records of an answer.
func records(a *answer) ([]crossRecord, error) {
	if !a.ok() {
		return nil, errors.New(a.says())
	}
	var out []crossRecord
	if err := json.Unmarshal(a.data, &out); err != nil {
		return nil, fmt.Errorf("data is not a list of records: %v", err)
	}
	return out, nil
}

// retryAfter says whether a 429 was seen and carried Retry-After.
func (r *run) retryAfter() {
	f := Finding{Point: PointRetryAfter}
	switch {
	case !r.saw429:
		f.Reading, f.Severity = "not-observed", Info
		f.Evidence = "no call was answered 429 (doctor never provokes one)"
		f.Advice = "the edge locks an account out for min(Retry-After, upstream.max_retry_after) on a 429, and backs off without one"
	default:
		f.Evidence = fmt.Sprintf("%d answer(s) 429, Retry-After %q", len(r.retryHdr), r.retryHdr)
		f.Reading, f.Severity = "present", OK
		f.Advice = "the edge waits min(Retry-After, upstream.max_retry_after) before asking again"
		for _, v := range r.retryHdr {
			if v == "" {
				f.Reading, f.Severity = "absent", Warn
				f.Advice = "a 429 without Retry-After: lower upstream.rate to the account's quota, the edge cannot know how long to wait"
			}
		}
	}
	r.add(f)
}

// WriteText writes the report for a person: one block per finding, then
// the verdict.
func (rep Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "explorer-edge doctor: %s, chain %s, %d signed calls\n\n", rep.Upstream, rep.Chain, rep.Calls)
	for _, f := range rep.Findings {
		name := f.Point
		if f.Account != "" {
			name += " (" + f.Account + ")"
		}
		fmt.Fprintf(&b, "%-7s %s: %s\n", strings.ToUpper(f.Severity), name, f.Reading)
		fmt.Fprintf(&b, "        seen: %s\n", f.Evidence)
		if f.Advice != "" {
			fmt.Fprintf(&b, "        do:   %s\n", f.Advice)
		}
	}
	if rep.Unsafe {
		var what []string
		for _, f := range rep.Findings {
			if f.Severity == Unsafe {
				what = append(what, f.Point)
			}
		}
		fmt.Fprintf(&b, "\nunsafe: the edge must not serve against this upstream as configured (%s)\n", strings.Join(what, ", "))
	} else {
		fmt.Fprintln(&b, "\nsafe: the edge can serve against this upstream; set what the findings above advise")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
