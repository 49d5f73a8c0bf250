package proxy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/node"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// TestChainModel is the test of the features together: explorer-sim on a
// test clock, a block a second, reorganizations at random depths (1 to 60,
// most below the finalized height), a fleet on a real redis-server whose
// nodes start and stop during the run, two accounts (the second answers
// the newest page 20 blocks behind, and fails with 500s for a while),
// purges of every selector, tracing on with clients sending sampled
// traceparents, and a budget that binds. An oracle keeps what the upstream
// said to each question at each step. After every answer:
//
//   - it equals what the upstream said when it was asked (its Age says
//     when), within the step that covers that time;
//   - a final answer (max-age=86400) equals what the upstream says now,
//     once 2 s have passed since the last reorganization;
//   - the newest page is never more than 2 blocks behind the upstream's head
//     (asked once the node had the step to refresh it), never backwards on
//     a node;
//   - no answer stored before a purge that selects it is served after it;
//
// and at the end the upstream calls are within rate x time + burst. The
// seed is printed; MODEL_SEED replays it, MODEL_STEPS lengthens the run
// (make soak runs 600 steps). It runs under each of explorer-sim's
// profiles in modelProfiles (MODEL_PROFILE runs one): the readings of
// block-list height and of block state change how the edge finds forks
// and finality (docs/explorer-readings.md).
func TestChainModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MODEL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	steps := 60
	if s := os.Getenv("MODEL_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	for _, prof := range modelProfiles {
		if only := os.Getenv("MODEL_PROFILE"); only != "" && only != prof.name {
			continue
		}
		t.Run(prof.name, func(t *testing.T) {
			t.Logf("seed %d (MODEL_SEED=%d to replay), %d steps, profile %s", seed, seed, steps, prof.name)
			m := newModel(t, seed, prof)
			m.run(steps)
			if m.violations > 0 {
				t.Fatalf("%d violations with seed %d: replay with MODEL_SEED=%d MODEL_PROFILE=%s", m.violations, seed, seed, prof.name)
			}
		})
	}
}

// modelProfile is an explorer-sim profile the model runs under, and the
// chain_finality_depth it needs (its blocks carry no state).
type modelProfile struct {
	name  string
	depth int64
}

// modelProfiles: the sim's old readings (height-down, blocks pending or
// done), the vendor's (height-at), and every other reading together, with
// blocks that carry no state and finality by depth.
var modelProfiles = []modelProfile{{"today", 0}, {"vendor", 0}, {"every", 12}}

// oracleMark marks the oracle's own requests to explorer-sim: they are
// not the edge's calls.
const oracleMark = "X-Model-Oracle"

type modelNode struct {
	e    *fleetEdge
	top  int64 // the highest head page it served
	live bool
}

type modelPurge struct {
	at    time.Time
	body  string
	match func(target string) bool
}

type chainModel struct {
	t          *testing.T
	rng        *rand.Rand
	h          *harness
	rdb        *redisServer
	nodes      []*modelNode
	tp         *sdktrace.TracerProvider
	oracle     map[string]map[int64][]byte // target -> step time (unix s) -> body
	purges     []modelPurge
	lastReorg  time.Time
	violations int
	edgeCalls  atomic.Int64 // upstream calls of the edges, both accounts
	mirrorFail atomic.Bool
	started    time.Time
	rate       float64
	burst      int
	h0         int64
}

func newModel(t *testing.T, seed uint64, prof modelProfile) *chainModel {
	m := &chainModel{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), oracle: map[string]map[int64][]byte{},
		rate: 40, burst: 20}
	m.rdb = startRedis(t)
	m.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { m.tp.Shutdown(context.Background()) })
	var base *harness
	mirror := m.startMirror(func() *harness { return base })
	h := newUpstream(t, m.counting, withPurgeToken, simProfile(prof.name), func(c *config.Config, _ *sim.Config) {
		if prof.depth > 0 {
			c.ChainFinalityDepth = map[string]int64{"CHAINX": prof.depth}
		}
		c.Shared.RedisAddr = m.rdb.addr
		c.Shared.Timeout = time.Second
		c.Upstream.Rate, c.Upstream.Burst = m.rate, m.burst
		c.Upstream.Accounts = []config.Account{{Name: "mirror", BaseURL: mirror, APIKey: sim.DemoAPIKey,
			SecretKey: sim.DemoSecretKey, Passphrase: sim.DemoPassphrase, Rate: m.rate, Burst: m.burst}}
	})
	base = h
	m.h = h
	m.h0 = h.sim.Head("CHAINX")
	m.started = time.Now()
	for range 3 {
		m.startNode()
	}
	return m
}

// counting counts the edges' calls to explorer-sim (the oracle's carry
// oracleMark).
func (m *chainModel) counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(oracleMark) == "" && strings.HasPrefix(r.URL.Path, "/api/") {
			m.edgeCalls.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

// startMirror is the second account: the same chain, but its newest page
// is the page of 20 blocks before the head, and it answers 500 while
// mirrorFail holds. Its lag is made of height=, which means the blocks
// down from it under height-down only: under height-at (the block at it)
// it is current.
func (m *chainModel) startMirror(base func() *harness) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.edgeCalls.Add(1)
		if m.mirrorFail.Load() {
			http.Error(w, "mirror failing", 500)
			return
		}
		h := base()
		target := r.URL.RequestURI()
		if r.URL.Path == "/api/v5/chainx/block/block-list" && r.URL.Query().Get("height") == "" && !h.sim.Profile().HeightAt {
			target += "&height=" + strconv.FormatInt(h.sim.Head(strings.ToUpper(r.URL.Query().Get("chainShortName")))-20, 10)
		}
		req, _ := http.NewRequest("GET", target, nil)
		ts := signer.Timestamp(time.Now())
		req.Header.Set(signer.HeaderKey, sim.DemoAPIKey)
		req.Header.Set(signer.HeaderPassphrase, sim.DemoPassphrase)
		req.Header.Set(signer.HeaderTimestamp, ts)
		req.Header.Set(signer.HeaderSign, signer.Sign(sim.DemoSecretKey, ts, "GET", target))
		h.sim.Handler().ServeHTTP(w, req)
	})}
	go hs.Serve(ln)
	m.t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

func (m *chainModel) startNode() {
	e := &fleetEdge{harness: m.h.sibling()}
	e.cfg.Cache.DiskPath = m.t.TempDir() // the disk tier too: memory, disk, Redis, upstream
	e.shared = e.startNode(NodeOptions{Options: node.Options{Tracer: m.tp}}).Fleet()
	m.nodes = append(m.nodes, &modelNode{e: e, live: true})
}

func (m *chainModel) stopNode(n *modelNode) {
	n.live = false
	n.e.node.Drain(context.Background())
}

func (m *chainModel) violate(format string, args ...any) {
	m.violations++
	if m.violations <= 20 {
		m.t.Errorf(format, args...)
	}
}

// record asks the upstream target now, for the oracle, once a step.
func (m *chainModel) record(target string) {
	now := m.h.clock.Now().Unix()
	by := m.oracle[target]
	if by == nil {
		by = map[int64][]byte{}
		m.oracle[target] = by
	}
	if _, ok := by[now]; ok {
		return
	}
	req, _ := http.NewRequest("GET", m.h.cfg.Upstream.BaseURL+target, nil)
	ts := signer.Timestamp(time.Now())
	req.Header.Set(signer.HeaderKey, sim.DemoAPIKey)
	req.Header.Set(signer.HeaderPassphrase, sim.DemoPassphrase)
	req.Header.Set(signer.HeaderTimestamp, ts)
	req.Header.Set(signer.HeaderSign, signer.Sign(sim.DemoSecretKey, ts, "GET", target))
	req.Header.Set(oracleMark, "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	res.Body.Close()
	by[now] = b.Bytes()
}

var maxAgeRe = regexp.MustCompile(`max-age=(\d+)`)

// ask has node n answer target and checks the answer.
func (m *chainModel) ask(n *modelNode, target string) resp {
	m.record(target)
	tp := fmt.Sprintf("00-%032x-%016x-01", m.rng.Uint64(), m.rng.Uint64()|1)
	r := n.e.get(target, "traceparent", tp)
	if r.status != 200 || r.code() != "0" {
		return r // an error envelope (the budget binds): nothing to check
	}
	now := m.h.clock.Now()
	age, _ := strconv.ParseInt(r.header["Age"], 10, 64)
	stored := now.Unix() - age
	ok := false
	for _, s := range []int64{stored, stored - 1} {
		if b, found := m.oracle[target][s]; found && bytes.Equal(b, r.body) {
			ok = true
		}
	}
	if !ok {
		m.violate("%s: %q (Age %d) differs from what the upstream said when it was asked", target, r.header["Cache-Status"], age)
	}
	if mm := maxAgeRe.FindStringSubmatch(r.header["Cache-Control"]); mm != nil && mm[1] == "86400" &&
		now.Sub(m.lastReorg) > 2*time.Second {
		m.record(target)
		if !bytes.Equal(m.oracle[target][now.Unix()], r.body) {
			m.violate("%s: a final answer (%q, Age %d) of a replaced branch, %s after the last reorg", target, r.header["Cache-Status"], age, now.Sub(m.lastReorg))
		}
	}
	for _, p := range m.purges {
		if p.match(target) && stored < p.at.Unix() {
			m.violate("%s: stored %d s before purge %s, served after it (%q)", target, p.at.Unix()-stored, p.body, r.header["Cache-Status"])
		}
	}
	return r
}

func (m *chainModel) tx(height int64) string {
	return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
}

func heightOf(target string) int64 {
	_, v, ok := strings.Cut(target, "height=")
	if !ok {
		return -1
	}
	h, _ := strconv.ParseInt(v, 10, 64)
	return h
}

// purge posts a random purge to a live node, hard, and remembers what it
// selects.
func (m *chainModel) purge(n *modelNode) {
	head := m.h.sim.Head("CHAINX")
	now := m.h.clock.Now()
	var p modelPurge
	switch m.rng.IntN(4) {
	case 0:
		target := m.tx(head - int64(m.rng.IntN(40)))
		p = modelPurge{body: fmt.Sprintf(`{"url":%q}`, target), match: func(t string) bool { return t == target }}
	case 1:
		lo := head - int64(m.rng.IntN(60))
		hi := lo + int64(m.rng.IntN(10))
		p = modelPurge{body: fmt.Sprintf(`{"heights":{"chain":"chainx","from":%d,"to":%d}}`, lo, hi),
			match: func(t string) bool {
				h := heightOf(t)
				return strings.Contains(t, "transaction-list") && h >= lo && h <= hi
			}}
	case 2:
		p = modelPurge{body: `{"route":"transaction-list","chain":"chainx"}`, match: func(t string) bool { return strings.Contains(t, "transaction-list") }}
	default:
		p = modelPurge{body: `{"all":true}`, match: func(string) bool { return true }}
	}
	before := map[*modelNode]float64{}
	for _, o := range m.live() {
		before[o] = purgesApplied(o.e.harness)
	}
	n.e.purge(p.body)
	p.at = now
	m.purges = append(m.purges, p)
	// The promise holds once the purge has reached every node (each polls
	// the fleet's purge log every 200 ms).
	for o, b := range before {
		testkit.WaitFor(m.t, "the purge on every node", func() bool { return purgesApplied(o.e.harness) > b })
	}
}

// purgesApplied is the purges a node applied, of every selector and mode.
func purgesApplied(h *harness) float64 {
	return gathered(h.t, h).value(h.t, "explorer_edge_purges_total")
}

func (m *chainModel) live() []*modelNode {
	var out []*modelNode
	for _, n := range m.nodes {
		if n.live {
			out = append(out, n)
		}
	}
	return out
}

func (m *chainModel) run(steps int) {
	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	for step := range steps {
		m.h.clock.Advance(time.Second)
		switch {
		case step == steps/4:
			m.mirrorFail.Store(true)
		case step == steps/2:
			m.mirrorFail.Store(false)
		case step == steps/3:
			m.stopNode(m.nodes[1])
		case step == steps/2+1 || step == 3*steps/4:
			m.startNode()
		}
		if step > 3 && m.rng.IntN(12) == 0 {
			depth := 1 + m.rng.IntN(60)
			m.h.sim.SetFaults(sim.Faults{Reorg: depth})
			m.lastReorg = m.h.clock.Now()
			m.t.Logf("step %d: reorg of %d blocks", step, depth)
		}
		live := m.live()
		if step > 3 && m.rng.IntN(10) == 0 {
			m.purge(live[m.rng.IntN(len(live))])
		}
		head := m.h.sim.Head("CHAINX")
		for _, n := range live {
			m.ask(n, blocks) // stale: refreshed now
			waitRefreshes(m.t, n.e.p)
			r := m.ask(n, blocks)
			if r.status != 200 {
				continue
			}
			heights, _ := blockListOf(m.t, r.body)
			if len(heights) == 0 {
				continue
			}
			if lag := head - heights[0]; lag > 2 {
				m.violate("step %d: the newest page %d blocks behind the head (%q)", step, lag, r.header["Cache-Status"])
			}
			if heights[0] < n.top {
				m.violate("step %d: the newest page went back from %d to %d on a node", step, n.top, heights[0])
			}
			n.top = max(n.top, heights[0])
			for range 6 {
				m.ask(n, m.tx(head-int64(m.rng.IntN(70))))
			}
		}
		// The clock moves between steps only: a refresh asked in this
		// step is answered in it.
		for _, n := range live {
			waitRefreshes(m.t, n.e.p)
		}
	}
	elapsed := time.Since(m.started).Seconds()
	bound := 2 * (m.rate*elapsed + float64(m.burst))
	m.t.Logf("%d upstream calls of the edges in %.1f s (bound %.0f), %d purges", m.edgeCalls.Load(), elapsed, bound, len(m.purges))
	if float64(m.edgeCalls.Load()) > bound {
		m.violate("%d upstream calls in %.1f s: over rate x time + burst of both accounts (%.0f)", m.edgeCalls.Load(), elapsed, bound)
	}
	var onDisk float64
	for _, n := range m.nodes {
		onDisk += metricValue(m.t, n.e.m.Registry, "explorer_edge_disk_writes_total")
	}
	m.t.Logf("%.0f answers written to the nodes' disk tiers", onDisk)
	if onDisk == 0 {
		m.t.Error("no answer reached a disk tier: the model did not exercise it")
	}
}

// metricValue is the value of the unlabelled family name in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			if c := f.GetMetric()[0].GetCounter(); c != nil {
				return c.GetValue()
			}
		}
	}
	return 0
}

// waitRefreshes waits until p has no background refresh under way.
func waitRefreshes(t *testing.T, p *Proxy) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.work.mu.Lock()
		n := len(p.work.refreshing)
		p.work.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("background refreshes still under way after 5 s")
}
