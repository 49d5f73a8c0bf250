package main

// The moving chain (TestDifferentialFreshness's check, against the
// real binaries): a second explorer-sim whose chain follows real time, a
// block a second, and a second explorer-edge in front of it with the
// shipped TTLs and stale windows. While the load runs, one poller per
// target asks, at irregular intervals, the sim directly, then the edge,
// then the sim again, and judges the edge's answer against what the
// upstream said around it:
//
//   - an answer the edge declares final (max-age of an hour or more) must
//     equal one of the two direct answers: bytes that can still change
//     must not be kept for a day;
//   - the newest block page may be at most 2 blocks behind the direct
//     answer taken just before the edge's;
//   - any other answer may be out of date for no longer than its Age says
//     (+1 s: Age counts whole seconds), nor beyond max-age +
//     stale-while-revalidate (+1 s).
//
// Real time moves between the three requests, so nothing is measured
// against the wall clock; only against direct answers taken before (a
// lower bound on how new the edge's could be) and after.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/signer"
	"explorer-edge/sim"
)

const (
	// tipBound is how many blocks the newest page may lag the upstream:
	// head fresh time 1 s + head stale window 1 s (README, classes).
	tipBound = 2
	// finalMaxAge: a freshness lifetime of an hour or more is a promise
	// that the bytes no longer change.
	finalMaxAge = 3600
	// futureAhead: the hash "not yet mined" is mined a few seconds after
	// the phase starts, settles 2 blocks later, and is then final.
	futureAhead = 5 * time.Second
	// refGrain is the step at which the reference clock walks back through
	// the upstream's past; the chain changes at most once a second.
	refGrain = 250 * time.Millisecond
	// historyRuns bounds each target's record of direct answers; an
	// answer older than it is placed by the reference clock.
	historyRuns = 256
)

// movingConfig configures the moving-chain pair and its poller.
type movingConfig struct {
	simBin, edgeBin string
	dir             string // configuration and logs
	// cache is the moving edge's cache section as a YAML flow mapping,
	// e.g. "{stale_while_revalidate: 30s}"; empty keeps the shipped
	// defaults (the point of the phase).
	cache          string
	minGap, maxGap time.Duration // between two rounds of one target
	t0             time.Time     // start of the run, for the examples' "+x s"
}

// movingTarget is one request target the poller asks, with its record of
// the upstream's distinct answers. Only its own poller touches hist.
type movingTarget struct {
	path string
	tip  bool // the newest block page: the lag rule
	hist []sighting
}

// reply is one answer: status and body as canonical JSON (keys sorted,
// numbers as written), so that an edge answer assembled from parts
// compares equal to the upstream's.
type reply struct {
	status int
	body   string
}

// sighting is a distinct direct answer and the moment it was first seen: the
// end of the first direct request that returned it (the upstream said it
// at the latest then).
type sighting struct {
	reply
	first time.Time
}

// observation is one direct answer and when its request went and came back.
type observation struct {
	reply
	send, recv time.Time
}

// edgeReply is one answer of the edge with the headers the rules read.
type edgeReply struct {
	reply
	send, recv     time.Time
	maxAge, swr    int64 // seconds; -1 absent
	age            int64
	headers        string
	contentEncoded bool // Content-Encoding although none was asked for
}

// movingStats are the phase's counts, for the summary.
type movingStats struct {
	requests    atomic.Int64 // through the edge
	direct      atomic.Int64
	final       atomic.Int64 // answers declared final
	tips        atomic.Int64 // newest pages judged by the lag rule
	late        atomic.Int64 // answers older than the upstream's current one
	byHistory   atomic.Int64 // ... placed in the record of direct answers
	byRef       atomic.Int64 // ... placed by the reference clock
	wrong       atomic.Int64
	errors      atomic.Int64
	refDisagree atomic.Int64 // direct answers the reference clock never gives

	mu      sync.Mutex
	wrongBy map[string]int64 // by the rule broken
	lagSeen bool
	maxLag  int64 // blocks, newest page
	wrongs  []movingWrong
	errs    []string
}

type movingWrong struct {
	at                       time.Duration
	why, target              string
	got, before, after, hdrs string
}

// moving is the pair of processes and the poller.
type moving struct {
	cfg               movingConfig
	sim, edge         *child
	simAddr, edgeAddr string
	simHC, edgeHC     *fasthttp.HostClient
	sg                *signer.Signer
	ref               *refClock
	start             time.Time // nothing the edge answers is older
	targets           []*movingTarget
	stats             movingStats
}

// startMoving starts the moving sim and edge on free ports and builds the
// targets from the chain as it is now.
func startMoving(ctx context.Context, cfg movingConfig) (m *moving, err error) {
	m = &moving{cfg: cfg, start: time.Now(), sg: signer.New(sim.DemoCredentials()), ref: newRefClock()}
	defer func() {
		if err != nil {
			m.kill()
		}
	}()
	m.sim, err = startOnFreePorts(ctx, 1, func(addrs []string) (*child, string, error) {
		m.simAddr = addrs[0]
		c, err := startChild("explorer-sim (moving)", cfg.simBin,
			[]string{"-listen", m.simAddr, "-seed", fmt.Sprint(simSeed)},
			filepath.Join(cfg.dir, "moving-sim.log"))
		return c, "http://" + m.simAddr + "/sim/stats", err
	})
	if err != nil {
		return m, err
	}
	m.edge, err = startOnFreePorts(ctx, 2, func(addrs []string) (*child, string, error) {
		m.edgeAddr = addrs[0]
		path := filepath.Join(cfg.dir, "moving-edge.yaml")
		if err := os.WriteFile(path, []byte(movingEdgeConfig(addrs[0], addrs[1], "http://"+m.simAddr, cfg.cache)), 0o600); err != nil {
			return nil, "", err
		}
		c, err := startChild("explorer-edge (moving)", cfg.edgeBin, []string{"-config", path}, filepath.Join(cfg.dir, "moving-edge.log"))
		return c, "http://" + addrs[1] + "/healthz", err
	})
	if err != nil {
		return m, err
	}
	client := func(addr string) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr: addr, MaxConns: 64, MaxIdemponentCallAttempts: 1,
			ReadTimeout: 10 * time.Second, WriteTimeout: 5 * time.Second,
			MaxResponseBodySize: 16 << 20, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true,
		}
	}
	m.simHC, m.edgeHC = client(m.simAddr), client(m.edgeAddr)
	m.targets, err = movingTargets(time.Now())
	return m, err
}

// movingEdgeConfig is the moving edge's configuration: the shipped TTLs
// and stale windows unless cache is given; an upstream quota that is not
// the subject.
func movingEdgeConfig(listen, admin, upstream, cache string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# explorer-edge in front of the moving chain, written by bench/soak
listen: %q
admin_listen: %q
upstream:
  base_url: %q
  api_key: %q
  secret_key: %q
  passphrase: %q
  rate: 500
  burst: 500
`, listen, admin, upstream, sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase)
	if cache != "" {
		fmt.Fprintf(&b, "cache: %s\n", cache)
	}
	b.WriteString("log:\n  level: warn\n  format: json\n")
	return b.String()
}

// kill ends both processes at once (the deferred cleanup).
func (m *moving) kill() {
	m.edge.kill()
	m.sim.kill()
	m.ref.close()
}

// stop ends both processes gracefully, the edge first.
func (m *moving) stop() {
	m.edge.stop()
	m.sim.stop()
	m.ref.close()
}

// movingTargets are the targets of the phase, built from a reference view
// of the chain at now: newest pages of both chains, pages and blocks at
// settled, newest and future heights, hash lists mixing mined, soon mined,
// plain and unknown hashes, and a holder list.
func movingTargets(now time.Time) ([]*movingTarget, error) {
	ref := sim.New(sim.Config{Seed: simSeed, Now: func() time.Time { return now }})
	defer ref.Close()
	const cx, tz = "CHAINX", "TRADE_ZONE"
	head, headTZ := ref.Head(cx), ref.Head(tz)
	mined := ref.InternalTxHashes(cx, 3)
	future, err := futureHash(now, cx, head)
	if err != nil {
		return nil, err
	}
	var plain string // a transfer of a settled block: mined, no internal transactions
	for h := head - 40; plain == "" && h > head-80; h-- {
		for _, hash := range ref.TxHashes(cx, h) {
			if n, _ := internalRows(ref, cx, hash); n == 0 {
				plain = hash
				break
			}
		}
	}
	cross := ref.CrossHashes(tz, 4)
	tokens := ref.TokenContracts(cx)
	unknown, unknown2 := ref.UnknownHash(1), ref.UnknownHash(2)
	if len(mined) < 3 || plain == "" || len(cross) < 4 || len(tokens) == 0 {
		return nil, fmt.Errorf("moving chain: the reference has no content at %v", now)
	}
	const bl = "/api/v5/chainx/block/block-list?chainShortName="
	const tl = "/api/v5/chainx/block/transaction-list?chainShortName="
	const itm = "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName="
	const tm = "/api/v5/chainx/tz/cross/transaction-multi?chainShortName="
	n := func(h int64) string { return strconv.FormatInt(h, 10) }
	tips := []string{bl + cx, bl + tz + "&limit=3"}
	others := []string{
		bl + cx + "&limit=5&page=2",
		bl + cx + "&height=" + n(head-50) + "&limit=2",
		bl + cx + "&height=" + n(head-9990) + "&limit=1", // leaves the reachable window after 9 s
		bl + cx + "&height=" + n(head+4) + "&limit=2",    // not produced yet
		tl + cx + "&height=" + n(head-30),
		tl + cx + "&height=" + n(head) + "&limit=5", // the newest: pending, then done
		tl + cx + "&height=" + n(head+3),            // not yet mined
		tl + tz + "&height=" + n(headTZ-20) + "&protocolType=internal",
		itm + cx + "&txId=" + strings.Join(mined, ","),
		itm + cx + "&txId=" + mined[0] + "," + future,
		itm + cx + "&txId=" + future,
		itm + cx + "&txId=" + mined[1] + "," + plain,
		itm + cx + "&txId=" + plain,
		itm + cx + "&txId=" + unknown,
		itm + cx + "&txId=" + mined[2] + "," + unknown,
		tm + tz + "&txId=" + strings.Join(cross[:3], ","),
		tm + tz + "&txId=" + cross[0] + "," + unknown,
		tm + tz + "&txId=" + unknown2,
		"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=" + tz + "&txid=" + cross[3],
		"/api/v5/chainx/token/position-list?chainShortName=" + cx + "&tokenContractAddress=" + tokens[0] + "&limit=3",
	}
	var out []*movingTarget
	for _, p := range tips {
		out = append(out, &movingTarget{path: p, tip: true})
	}
	for _, p := range others {
		out = append(out, &movingTarget{path: p})
	}
	return out, nil
}

// futureHash is a transaction with internal transactions in a block mined
// a few seconds after now (above head + 1), found with a view of the same
// chain whose clock runs ahead.
func futureHash(now time.Time, chain string, head int64) (string, error) {
	for ahead := futureAhead; ahead <= 4*futureAhead; ahead += time.Second {
		fut := sim.New(sim.Config{Seed: simSeed, Now: func() time.Time { return now.Add(ahead) }})
		for _, hash := range fut.InternalTxHashes(chain, 50) {
			if n, h := internalRows(fut, chain, hash); n > 0 && h > head+1 {
				fut.Close()
				return hash, nil
			}
		}
		fut.Close()
	}
	return "", fmt.Errorf("moving chain: no transaction with internal transactions in the %v after head %d", 4*futureAhead, head)
}

// internalRows asks s for hash's internal transactions: how many, and the
// height of the first.
func internalRows(s *sim.Server, chain, hash string) (n int, height int64) {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet,
		"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName="+chain+"&txId="+hash, nil))
	var env struct {
		Data []struct {
			TransactionList []struct {
				Height string `json:"height"`
			} `json:"transactionList"`
		} `json:"data"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &env) != nil || len(env.Data) == 0 || len(env.Data[0].TransactionList) == 0 {
		return 0, 0
	}
	height, _ = strconv.ParseInt(env.Data[0].TransactionList[0].Height, 10, 64)
	return len(env.Data[0].TransactionList), height
}

// refClock is an in-process explorer-sim of the same seed and defaults as
// the moving one, on a clock set per question: what the upstream said at
// any past moment (its chain is a function of the wall clock).
type refClock struct {
	mu  sync.Mutex
	at  time.Time
	sim *sim.Server
}

func newRefClock() *refClock {
	r := &refClock{}
	r.sim = sim.New(sim.Config{Seed: simSeed, Now: func() time.Time { return r.at }})
	return r
}

func (r *refClock) said(target string, at time.Time) reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = at
	rec := httptest.NewRecorder()
	r.sim.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return reply{rec.Code, canonJSON(rec.Body.Bytes())}
}

// saidDuring reports whether the upstream said want at some moment from
// from to to (looked at every refGrain and at to).
func (r *refClock) saidDuring(target string, from, to time.Time, want reply) bool {
	for at := from; ; at = at.Add(refGrain) {
		if at.After(to) {
			at = to
		}
		if r.said(target, at) == want {
			return true
		}
		if !at.Before(to) {
			return false
		}
	}
}

func (r *refClock) close() {
	if r != nil {
		r.sim.Close()
	}
}

// canonJSON is body with object keys sorted and insignificant space gone.
func canonJSON(body []byte) string {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "not JSON: " + string(body)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "not JSON: " + string(body)
	}
	return string(b)
}

// topHeight is the height of the first block of a block-list answer.
func topHeight(body string) (int64, bool) {
	var env struct {
		Data []struct {
			BlockList []struct {
				Height string `json:"height"`
			} `json:"blockList"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(body), &env) != nil || len(env.Data) == 0 || len(env.Data[0].BlockList) == 0 {
		return 0, false
	}
	h, err := strconv.ParseInt(env.Data[0].BlockList[0].Height, 10, 64)
	return h, err == nil
}

// poll runs one poller per target until until (a round under way
// finishes) or ctx ends.
func (m *moving) poll(ctx context.Context, until time.Time) {
	var wg sync.WaitGroup
	for i, t := range m.targets {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			wait := time.Duration(r.Int64N(int64(500 * time.Millisecond))) // spread the first round
			timer := time.NewTimer(wait)
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				if !time.Now().Before(until) {
					return
				}
				m.round(t)
				gap := m.cfg.minGap
				if m.cfg.maxGap > m.cfg.minGap {
					gap += time.Duration(r.Int64N(int64(m.cfg.maxGap - m.cfg.minGap)))
				}
				timer.Reset(min(gap, max(time.Until(until), 0)))
			}
		})
	}
	wg.Wait()
}

// round asks t directly, through the edge, directly again, and judges.
func (m *moving) round(t *movingTarget) {
	before, err := m.direct(t.path)
	if err != nil {
		m.clientError(t, "direct", err)
		return
	}
	e, err := m.viaEdge(t.path)
	if err != nil {
		m.clientError(t, "edge", err)
		return
	}
	after, err := m.direct(t.path)
	if err != nil {
		m.clientError(t, "direct", err)
		return
	}
	for _, o := range []observation{before, after} {
		t.record(o)
		m.checkRef(t, o)
	}
	v := m.judge(t, before, e, after)
	st := &m.stats
	st.requests.Add(1)
	if v.final {
		st.final.Add(1)
	}
	switch v.placed {
	case "history":
		st.late.Add(1)
		st.byHistory.Add(1)
	case "reference":
		st.late.Add(1)
		st.byRef.Add(1)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if v.tip {
		st.tips.Add(1)
		if !st.lagSeen || v.lag > st.maxLag {
			st.maxLag, st.lagSeen = v.lag, true
		}
	}
	if v.why == "" {
		return
	}
	st.wrong.Add(1)
	if st.wrongBy == nil {
		st.wrongBy = map[string]int64{}
	}
	st.wrongBy[v.rule]++
	if len(st.wrongs) < keepWrong {
		st.wrongs = append(st.wrongs, movingWrong{
			at: e.send.Sub(m.cfg.t0), why: v.why, target: t.path, hdrs: e.headers,
			got:    fmt.Sprintf("%d %s", e.status, clip([]byte(e.body), 200)),
			before: fmt.Sprintf("%d %s", before.status, clip([]byte(before.body), 200)),
			after:  fmt.Sprintf("%d %s", after.status, clip([]byte(after.body), 200)),
		})
	}
}

func (m *moving) clientError(t *movingTarget, via string, err error) {
	st := &m.stats
	st.errors.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.errs) < keepWrong {
		st.errs = append(st.errs, fmt.Sprintf("+%.1fs %s %s: %v", time.Since(m.cfg.t0).Seconds(), via, t.path, err))
	}
}

// direct asks the moving sim, signed with the demo account as the edge signs.
func (m *moving) direct(target string) (observation, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(target)
	req.Header.SetHost(m.simAddr)
	ts := signer.Timestamp(time.Now())
	req.Header.Set(signer.HeaderKey, sim.DemoAPIKey)
	req.Header.Set(signer.HeaderPassphrase, sim.DemoPassphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, m.sg.Sign(ts, http.MethodGet, target))
	send := time.Now()
	err := m.simHC.Do(req, resp)
	recv := time.Now()
	m.stats.direct.Add(1)
	if err != nil {
		return observation{}, err
	}
	return observation{reply{resp.StatusCode(), canonJSON(resp.Body())}, send, recv}, nil
}

// viaEdge asks the moving edge, without gzip or validators.
func (m *moving) viaEdge(target string) (edgeReply, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(target)
	req.Header.SetHost(m.edgeAddr)
	send := time.Now()
	err := m.edgeHC.Do(req, resp)
	recv := time.Now()
	if err != nil {
		return edgeReply{}, err
	}
	e := edgeReply{reply: reply{resp.StatusCode(), canonJSON(resp.Body())}, send: send, recv: recv}
	e.maxAge, e.swr = cacheControl(string(resp.Header.Peek(fasthttp.HeaderCacheControl)))
	e.age, _ = strconv.ParseInt(string(resp.Header.Peek("Age")), 10, 64)
	e.contentEncoded = len(resp.Header.Peek(fasthttp.HeaderContentEncoding)) > 0
	var hs []string
	for _, k := range []string{"Cache-Status", "Cache-Control", "Age"} {
		hs = append(hs, k+": "+string(resp.Header.Peek(k)))
	}
	e.headers = strings.Join(hs, "; ")
	return e, nil
}

// cacheControl reads max-age and stale-while-revalidate (seconds; -1 absent).
func cacheControl(v string) (maxAge, swr int64) {
	maxAge, swr = -1, -1
	for d := range strings.SplitSeq(v, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "max-age":
			maxAge = n
		case "stale-while-revalidate":
			swr = n
		}
	}
	return maxAge, swr
}

// record adds a direct answer to t's history if it differs from the last.
func (t *movingTarget) record(o observation) {
	if n := len(t.hist); n > 0 && t.hist[n-1].reply == o.reply {
		return
	}
	t.hist = append(t.hist, sighting{o.reply, o.recv})
	if len(t.hist) > historyRuns {
		t.hist = append(t.hist[:0], t.hist[len(t.hist)-historyRuns:]...)
	}
}

// checkRef counts a direct answer that the reference clock gives at no
// moment of its request: the reference, and so every judgment it helps
// make, would be wrong.
func (m *moving) checkRef(t *movingTarget, o observation) {
	if m.ref.saidDuring(t.path, o.send, o.recv, o.reply) {
		return
	}
	m.stats.refDisagree.Add(1)
	m.stats.mu.Lock()
	defer m.stats.mu.Unlock()
	if len(m.stats.errs) < keepWrong {
		m.stats.errs = append(m.stats.errs, fmt.Sprintf("+%.1fs the reference disagrees with explorer-sim on %s: %d %s",
			o.send.Sub(m.cfg.t0).Seconds(), t.path, o.status, clip([]byte(o.body), 200)))
	}
}

// verdict is the judgment of one edge answer.
type verdict struct {
	why    string // "" right
	rule   string // the rule broken: "newest page", "final", "Age", "windows", "other"
	final  bool   // declared final
	tip    bool   // lag measured
	lag    int64  // blocks behind the direct answer before (newest page)
	placed string // "history" or "reference": the answer was out of date, placed there
}

// judge applies the rules to the edge's answer e, asked between the direct
// answers before and after (already recorded in t's history).
func (m *moving) judge(t *movingTarget, before observation, e edgeReply, after observation) (v verdict) {
	if e.contentEncoded {
		v.why, v.rule = "Content-Encoding although none was asked for", "other"
		return v
	}
	if t.tip && e.status == http.StatusOK && before.status == http.StatusOK {
		edgeTop, ok := topHeight(e.body)
		upTop, upOK := topHeight(before.body)
		if !ok || !upOK {
			v.why, v.rule = "newest page without a block", "newest page"
			return v
		}
		v.tip, v.lag = true, upTop-edgeTop
		if v.lag > tipBound {
			v.why = fmt.Sprintf("the newest page is %d blocks behind the upstream (top %d, the upstream's %d just before); bound %d",
				v.lag, edgeTop, upTop, tipBound)
			v.rule = "newest page"
			return v
		}
	}
	current := e.reply == before.reply || e.reply == after.reply
	if e.maxAge >= finalMaxAge {
		v.final = true
		if !current {
			v.why = fmt.Sprintf("declared final (max-age=%d) but equal to neither direct answer, before or after", e.maxAge)
			v.rule = "final"
		}
		return v
	}
	if current {
		return v
	}
	if e.status != http.StatusOK && e.status != before.status && e.status != after.status {
		v.why = fmt.Sprintf("%d while the upstream answered %d before and %d after", e.status, before.status, after.status)
		v.rule = "other"
		return v
	}
	outdated, placed, ok := m.outdatedBy(t, e.reply, e)
	if !ok {
		v.why, v.rule = "bytes the upstream never said since the phase began", "other"
		return v
	}
	late := e.send.Sub(outdated)
	if late <= 0 {
		return v
	}
	v.placed = placed
	switch {
	case late > time.Duration(e.age+1)*time.Second:
		v.why = fmt.Sprintf("out of date for at least %.2fs (placed by the %s) but Age says %d", late.Seconds(), placed, e.age)
		v.rule = "Age"
	case e.maxAge >= 0 && late > time.Duration(e.maxAge+max(e.swr, 0)+1)*time.Second:
		v.why = fmt.Sprintf("out of date for at least %.2fs (placed by the %s), beyond max-age %d + stale-while-revalidate %d",
			late.Seconds(), placed, e.maxAge, max(e.swr, 0))
		v.rule = "windows"
	}
	return v
}

// outdatedBy is a moment by which the upstream had stopped saying r,
// which the edge answered to a request sent at e.send: the first sighting
// of the direct answer that followed r's last run in the history or, for
// an answer no direct request saw, the reference clock's first moment
// after the last one it said r. An answer the upstream said while the
// edge's request was under way (a miss fetched after a block) is not out
// of date: outdatedBy is then e.send. ok is false if the upstream said r
// at no moment since the phase began.
func (m *moving) outdatedBy(t *movingTarget, r reply, e edgeReply) (at time.Time, placed string, ok bool) {
	for i := len(t.hist) - 1; i >= 0; i-- {
		if t.hist[i].reply == r {
			if i+1 < len(t.hist) {
				return t.hist[i+1].first, "history", true
			}
			return e.send, "history", true // still the newest direct answer
		}
	}
	if m.ref.saidDuring(t.path, e.send, e.recv, r) {
		return e.send, "reference", true
	}
	for at := e.send.Add(-refGrain); !at.Before(m.start.Add(-refGrain)); at = at.Add(-refGrain) {
		if m.ref.said(t.path, at) == r {
			return at.Add(refGrain), "reference", true
		}
	}
	return time.Time{}, "", false
}

// wrongRules says how many wrong answers broke each rule.
func (st *movingStats) wrongRules() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var parts []string
	for _, r := range []string{"newest page", "final", "Age", "windows", "other"} {
		if n := st.wrongBy[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// print writes the phase's wrong answers and errors.
func (st *movingStats) print(w io.Writer) {
	for i, wa := range st.wrongs {
		fmt.Fprintf(w, "moving-chain wrong answer %d at +%.1fs: %s\n  target:   %s\n  edge:     %s\n  headers:  %s\n  upstream: before %s\n            after  %s\n",
			i+1, wa.at.Seconds(), wa.why, wa.target, wa.got, wa.hdrs, wa.before, wa.after)
	}
	for _, e := range st.errs {
		fmt.Fprintln(w, "moving-chain error:", e)
	}
}
