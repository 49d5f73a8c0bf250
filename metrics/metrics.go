// Package metrics defines every Prometheus family explorer-edge exports
// (docs/operations.md, Metrics) on a registry of its own. Label values come from
// fixed sets given at construction; per-label series are resolved once, so
// recording on the hit path is an index into a slice and an atomic add.
// Series that are expected to move exist from the start (rate() sees their
// first event); those of route="unknown" that cannot move (a path outside
// the table never reaches the cache or the upstream) are made only if they
// ever do.
package metrics

import (
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const ns = "explorer_edge"

// Result is what the cache made of a request: the label value of
// cache_results_total (and of client_requests_total, with ResultError).
type Result uint8

const (
	ResultHit Result = iota
	ResultMiss
	ResultStale      // served stale while one refresh runs
	ResultStaleError // served stale because the upstream failed
	ResultCollapsed  // a miss that waited for another request's fetch
	ResultPartial    // a batch answered partly from cache
	numResults
	// ResultError is a request answered with an error envelope (client
	// accounting only: it has no cache result).
	ResultError = numResults
	// ResultNone is a request refused before the cache: no cache result.
	ResultNone Result = 255
)

func (r Result) String() string {
	switch r {
	case ResultHit:
		return "hit"
	case ResultMiss:
		return "miss"
	case ResultStale:
		return "stale"
	case ResultStaleError:
		return "stale_error"
	case ResultCollapsed:
		return "collapsed"
	case ResultPartial:
		return "partial"
	case ResultError:
		return "error"
	}
	return "none"
}

// Outcome is how an upstream attempt ended: the label value of
// upstream_requests_total.
type Outcome uint8

func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeErrorEnvelope:
		return "error_envelope"
	case Outcome5xx:
		return "status_5xx"
	case Outcome429:
		return "status_429"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeConnection:
		return "connection"
	case OutcomeMalformed:
		return "malformed"
	case OutcomeTooLarge:
		return "too_large"
	case OutcomeBreakerOpen:
		return "breaker_open"
	case OutcomeBudgetExhausted:
		return "budget_exhausted"
	case OutcomeCredentials:
		return "credentials"
	case OutcomeNotFound:
		return "not_found"
	}
	return "unknown"
}

const (
	OutcomeOK Outcome = iota
	OutcomeErrorEnvelope
	Outcome5xx
	Outcome429
	OutcomeTimeout
	OutcomeConnection
	OutcomeMalformed
	OutcomeTooLarge
	OutcomeBreakerOpen
	OutcomeBudgetExhausted
	OutcomeCredentials // the upstream refused the account's credentials (HTTP 401 or 50102-50113)
	OutcomeNotFound    // the upstream has no such path (HTTP 404): upstream.base_url is wrong
	numOutcomes
)

// Codes are the envelope codes counted by requests_total; others count as
// "other": the edge's own, and the upstream's refusals and "no data"
// answers a client may be served (envelope.VendorCodes, ClassRefusal and
// ClassNoData).
var Codes = []string{"0", "404", "50001", "50004", "50011", "50014", "50015", "50016", "50024", "50025", "50026", "50036",
	"50037", "50038", "50039", "50040", "50041", "50042", "50044", "50045",
	"50102", "50103", "50104", "50105", "50106", "50107", "50111", "50112", "50113", "50115", "other"}

// Rejection reasons (client_rejections_total).
const (
	RejectAuth = iota
	RejectRateLimit
	numRejects
)

// Metrics holds every family. Create one per process (or per test) with New.
type Metrics struct {
	Registry *prometheus.Registry
	CDN      CDN // purges carried to a CDN (cdn.go)

	// [route][...]; the last route is "unknown". A nil entry is a series
	// not made at start (see the package doc).
	requests        [][]prometheus.Counter // [route][code]
	requestDuration []prometheus.Observer  // [route]
	cacheResults    [][]prometheus.Counter // [route][result]
	upstream        [][]prometheus.Counter // [route][outcome]
	upstreamDur     []prometheus.Observer  // [route]
	routeNames      []string
	clients         clientFamilies
	accounts        *accountCollector // nil until Accounts
	requestsVec     *prometheus.CounterVec
	cacheResultsVec *prometheus.CounterVec
	upstreamVec     *prometheus.CounterVec
	upstreamDurVec  *prometheus.HistogramVec
	finalHeight     *prometheus.GaugeVec // children made on a chain's first height: none says 0
	finalSource     *prometheus.GaugeVec // {chain,source}: 1 for where the finalized height comes from
	chains          map[string]bool      // the configured chains
	rejections      [numRejects]prometheus.Counter
	codeIndex       map[string]int

	Throttled      *prometheus.CounterVec // {source}: budget, upstream
	BudgetRate     prometheus.Gauge
	BreakerState   prometheus.Gauge
	BatchUnmapped  prometheus.Counter
	ConfigReloads  *prometheus.CounterVec // {result}: ok, error
	SharedUp       prometheus.Gauge
	SharedRequests *prometheus.CounterVec // {op,outcome}
	SharedLockWait *prometheus.CounterVec // {outcome}
	SharedRejected *prometheus.CounterVec // {reason}: what Redis held that the edge would not take
	LogSuppressed  prometheus.Counter     // repeated log lines left out
	Panics         *prometheus.CounterVec // {where}: panics recovered (public, admin, background)
	Purges         *prometheus.CounterVec // {selector,mode}: POST /purge and purges from the fleet
	Reorgs         *prometheus.CounterVec // {chain}: reorganizations seen in block lists
	ReorgProbes    *prometheus.CounterVec // {chain}: block lists asked further back to find a reorganization's fork
	ReadsRefused   *prometheus.CounterVec // {tier,reason}: entries read back from the disk or Redis and not served
	Confirms       *prometheus.CounterVec // {chain}: newest pages asked to confirm what a tier held

	// The listeners, by listener (public, admin).
	AcceptErrors *prometheus.CounterVec // {listener}: accepts failed and retried
	ConnsRefused *prometheus.CounterVec // {listener,reason}: max_conns, max_conns_per_ip
	ConnsOpen    *prometheus.GaugeVec   // {listener}
	ConnsMax     *prometheus.GaugeVec   // {listener}: the cap in force, 0 = none

	// The configuration in force (GET /config on the admin port).
	ConfigHash          *prometheus.GaugeVec // {hash}: 1 for the one in force (SetConfigHash)
	ConfigReloadSuccess prometheus.Gauge     // unix time of the start or of the last reload applied
	configHashMu        sync.Mutex
	configHash          string // the label of ConfigHash's one series
}

// headAgeDesc is explorer_edge_head_age_seconds.
var headAgeDesc = prometheus.NewDesc(ns+"_head_age_seconds",
	"Seconds since the newest head the edge holds was asked of the upstream, by chain: how old the newest block page it serves is. A chain whose newest page no one asked has no series.", []string{"chain"}, nil)

// headAges reads the chains' head ages at scrape time.
type headAges struct {
	chains []string
	age    func(chain string) (seconds float64, ok bool)
}

func (h headAges) Describe(ch chan<- *prometheus.Desc) { ch <- headAgeDesc }
func (h headAges) Collect(ch chan<- prometheus.Metric) {
	for _, c := range h.chains {
		if v, ok := h.age(c); ok {
			ch <- prometheus.MustNewConstMetric(headAgeDesc, prometheus.GaugeValue, v, c)
		}
	}
}

// HeadAges registers explorer_edge_head_age_seconds{chain}; age reads a
// chain's at scrape time. Call it once.
func (m *Metrics) HeadAges(chains []string, age func(chain string) (seconds float64, ok bool)) {
	m.Registry.MustRegister(headAges{chains: chains, age: age})
}

// PanicPlaces are the where label values of panics_total.
var PanicPlaces = []string{"public", "admin", "background"}

// PurgeSelectors are the selector label values of purges_total.
var PurgeSelectors = []string{"url", "hash", "heights", "route", "all"}

// Listeners are the listener label values; Reasons the refusal reasons of
// connections_refused_total.
var (
	Listeners      = []string{"public", "admin"}
	RefusalReasons = []string{"max_conns", "max_conns_per_ip"}
)

// CacheStats is read at scrape time for the cache gauges.
type CacheStats interface {
	Bytes() int64
	Entries() int64
	Evictions() int64
	MaxBytes() int64
	IdentityBytes() int64
}

// New registers every family for the given routes and chains.
func New(routes, chains []string, cs CacheStats) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), chains: map[string]bool{}, codeIndex: map[string]int{}}
	for i, c := range Codes {
		m.codeIndex[c] = i
	}
	m.registerRuntime()
	m.registerRoutes(routes)
	m.registerRejections()
	m.registerUpstream()
	m.registerCache(cs)
	m.registerChains(chains)
	m.registerFinalSource(chains)
	m.registerConfig()
	m.registerListeners()
	m.registerLogAndPanics()
	m.clients = newClientFamilies(m.Registry)
	m.newShared()
	return m
}

// registerRuntime registers the Go and process collectors. Beside the Go
// collector's defaults, go_sched_latencies_seconds: how long runnable
// goroutines waited for a CPU. request_duration_seconds starts once a
// request is read and cannot see that wait, which is most of what a client
// measures on a saturated pod (docs/operations.md, Latency the histogram
// leaves out).
func (m *Metrics) registerRuntime() {
	m.Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// registerRoutes registers the families labelled by route, and resolves
// their series for each route and "unknown", the last.
func (m *Metrics) registerRoutes(routes []string) {
	// A hit takes 2-20 us from request read to response written, a miss
	// up to upstream.timeout (5s by default): 1-2.5-5 steps from 2.5 us to
	// 10 s, so each bucket's bounds are at most 2.5x apart (21 buckets).
	// An upstream call takes 100 us at the very least.
	latency := []float64{
		2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
		1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
		1, 2.5, 5, 10,
	}
	upLatency := latency[5:] // from 100 us
	m.requestsVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
		Help: "Client requests answered, by route and envelope code."}, []string{"route", "code"})
	reqDur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
		Help: "Time from the request read (its headers parsed) to the answer handed to the server for writing, by route; the wait before the read and the write are not in it.", Buckets: latency}, []string{"route"})
	m.cacheResultsVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "cache_results_total",
		Help: "Cache lookups by route and result (hit, miss, stale, stale_error, collapsed, partial)."}, []string{"route", "result"})
	m.upstreamVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_requests_total",
		Help: "Upstream calls (and calls refused before sending: breaker_open, budget_exhausted) by route and outcome."}, []string{"route", "outcome"})
	m.upstreamDurVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "upstream_duration_seconds",
		Help: "Duration of one upstream attempt, by route.", Buckets: upLatency}, []string{"route"})
	m.Registry.MustRegister(m.requestsVec, reqDur, m.cacheResultsVec, m.upstreamVec, m.upstreamDurVec)

	m.routeNames = append(append([]string{}, routes...), "unknown")
	m.resolveRoutes(reqDur)
}

// resolveRoutes makes the series of each route that are expected to move:
// all of them for a route of the table; for "unknown", only its duration
// and requests_total with code 404 (package doc).
func (m *Metrics) resolveRoutes(reqDur *prometheus.HistogramVec) {
	unknown := len(m.routeNames) - 1
	for id, r := range m.routeNames {
		m.requestDuration = append(m.requestDuration, reqDur.WithLabelValues(r))
		codes := make([]prometheus.Counter, len(Codes))
		res := make([]prometheus.Counter, numResults)
		out := make([]prometheus.Counter, numOutcomes)
		m.requests = append(m.requests, codes)
		m.cacheResults = append(m.cacheResults, res)
		m.upstream = append(m.upstream, out)
		m.upstreamDur = append(m.upstreamDur, nil)
		if id == unknown {
			codes[m.codeIndex["404"]] = m.requestsVec.WithLabelValues(r, "404")
			continue
		}
		for i, c := range Codes {
			codes[i] = m.requestsVec.WithLabelValues(r, c)
		}
		for rs := range numResults {
			res[rs] = m.cacheResultsVec.WithLabelValues(r, rs.String())
		}
		for o := range numOutcomes {
			out[o] = m.upstreamVec.WithLabelValues(r, o.String())
		}
		m.upstreamDur[id] = m.upstreamDurVec.WithLabelValues(r)
	}
}

// registerRejections registers client_rejections_total, by reason.
func (m *Metrics) registerRejections() {
	rej := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_rejections_total",
		Help: "Client requests refused before the cache, by reason (auth, rate_limit)."}, []string{"reason"})
	m.Registry.MustRegister(rej)
	m.rejections[RejectAuth] = rej.WithLabelValues("auth")
	m.rejections[RejectRateLimit] = rej.WithLabelValues("rate_limit")
}

// registerUpstream registers the upstream budget's and breaker's families
// (those by route are registerRoutes').
func (m *Metrics) registerUpstream() {
	m.Throttled = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_throttled_total",
		Help: "Times the upstream budget held a call back: source budget (our bucket was empty), upstream (it answered 429/50011) or bytes (no room for its answer among those being fetched within budget_wait)."}, []string{"source"})
	m.BudgetRate = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "upstream_budget_rate",
		Help: "Upstream budget in requests per second (lowered after a 429 until the upstream recovers)."})
	m.BreakerState = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "breaker_state",
		Help: "Upstream circuit breaker: 0 closed, 1 half-open, 2 open."})
	m.BatchUnmapped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "batch_unmapped_total",
		Help: "Batch answers with a record matching no hash asked; the request was then cached whole."})
	m.Registry.MustRegister(m.Throttled, m.BudgetRate, m.BreakerState, m.BatchUnmapped)
	for _, s := range []string{"budget", "upstream", "bytes"} {
		m.Throttled.WithLabelValues(s)
	}
}

// registerCache registers the cache's gauges, read from cs at scrape
// time, and purges_total.
func (m *Metrics) registerCache(cs CacheStats) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, f)
	}
	m.Registry.MustRegister(
		gauge("cache_bytes", "Bytes held by cache entries and their identity copies.", func() float64 { return float64(cs.Bytes()) }),
		gauge("cache_identity_bytes", "Bytes of cache_bytes held by identity copies of answers (cache.identity_bytes).", func() float64 { return float64(cs.IdentityBytes()) }),
		gauge("cache_entries", "Entries in the cache.", func() float64 { return float64(cs.Entries()) }),
		gauge("cache_max_bytes", "Configured bound on cache bytes (cache.max_bytes).", func() float64 { return float64(cs.MaxBytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "cache_evictions_total",
			Help: "Entries evicted for space or expired."}, func() float64 { return float64(cs.Evictions()) }),
	)
	m.Purges = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "purges_total",
		Help: "Purges applied to this node's cache, by selector (url, hash, heights, route, all) and mode (hard, soft)."}, []string{"selector", "mode"})
	m.Registry.MustRegister(m.Purges)
	m.cdnFamilies()
	for _, s := range PurgeSelectors {
		for _, mode := range []string{"hard", "soft"} {
			m.Purges.WithLabelValues(s, mode)
		}
	}
}

// registerChains registers the families labelled by chain.
func (m *Metrics) registerChains(chains []string) {
	// A chain gets its finalized height on its first block list: until
	// then it has no series, not a height of 0 (metrics_test).
	m.finalHeight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "chain_final_height",
		Help: "Highest block height seen with state done, by chain; no series until one is known."}, []string{"chain"})
	m.Reorgs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reorgs_total",
		Help: "Chain reorganizations seen: a block list with another hash at a height than the edge saw before."}, []string{"chain"})
	m.ReorgProbes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reorg_probes_total",
		Help: "Block lists asked further back than any client asked, to find the fork of a reorganization deeper than the list that showed it."}, []string{"chain"})
	m.ReadsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reads_refused_total",
		Help: "Entries read back from a tier under memory (tier: disk, shared) and not served, by reason (entry: not what the edge would have stored from the upstream, another key's, or out of bounds; unconfirmed: showing blocks above what this node confirmed from the upstream, or hashes other than the upstream's). Each is a miss."}, []string{"tier", "reason"})
	m.Confirms = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "truth_confirms_total",
		Help: "Newest block pages asked of the upstream to confirm an entry read back from the disk or Redis that showed blocks this node had not confirmed (at most one per chain per second)."}, []string{"chain"})
	m.Registry.MustRegister(m.finalHeight, m.Reorgs, m.ReorgProbes, m.ReadsRefused, m.Confirms)
	for _, tier := range []string{"disk", "shared"} {
		for _, reason := range []string{"entry", "unconfirmed"} {
			m.ReadsRefused.WithLabelValues(tier, reason)
		}
	}
	for _, c := range chains {
		m.chains[c] = true
		m.Reorgs.WithLabelValues(c)
		m.ReorgProbes.WithLabelValues(c)
		m.Confirms.WithLabelValues(c)
	}
}

// registerConfig registers the families of the configuration in force
// and its reloads.
func (m *Metrics) registerConfig() {
	m.ConfigReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "config_reloads_total",
		Help: "Configuration reloads by result (ok, error)."}, []string{"result"})
	m.ConfigHash = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "config_hash_info",
		Help: "Always 1; hash is the SHA-256 of the configuration in force, secrets redacted (GET /config on the admin port): nodes that run the same configuration show the same hash."}, []string{"hash"})
	m.ConfigReloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_last_reload_success_timestamp_seconds",
		Help: "Unix time the configuration in force was applied: at start or by the last reload that succeeded."})
	m.Registry.MustRegister(m.ConfigReloads, m.ConfigHash, m.ConfigReloadSuccess)
	for _, r := range []string{"ok", "error"} {
		m.ConfigReloads.WithLabelValues(r)
	}
}

// registerListeners registers the families labelled by listener.
func (m *Metrics) registerListeners() {
	m.AcceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "accept_errors_total",
		Help: "Failed accepts of a listener (EMFILE, ENFILE, ...), each retried after a backoff."}, []string{"listener"})
	m.ConnsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "connections_refused_total",
		Help: "Connections answered with an envelope and closed at accept, by listener and reason (max_conns, max_conns_per_ip)."}, []string{"listener", "reason"})
	m.ConnsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "connections_open",
		Help: "Connections open, by listener."}, []string{"listener"})
	m.ConnsMax = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "connections_max",
		Help: "Connection cap in force, by listener (server.max_conns, lowered at start to fit the descriptor limit; admin_max_conns); 0 = none."}, []string{"listener"})
	m.Registry.MustRegister(m.AcceptErrors, m.ConnsRefused, m.ConnsOpen, m.ConnsMax)
	for _, l := range Listeners {
		m.AcceptErrors.WithLabelValues(l)
		m.ConnsOpen.WithLabelValues(l)
		m.ConnsMax.WithLabelValues(l)
		for _, r := range RefusalReasons {
			m.ConnsRefused.WithLabelValues(l, r)
		}
	}
}

// registerLogAndPanics registers log_suppressed_total and panics_total.
func (m *Metrics) registerLogAndPanics() {
	m.LogSuppressed = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "log_suppressed_total",
		Help: "Log lines left out because the same line (message, route, code) went out less than log.repeat_interval ago."})
	m.Panics = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "panics_total",
		Help: "Panics recovered, by where they happened (public, admin: a request handler, answered 500; background: a refresh or a flight, its waiters answered 500). Each is a bug: the log holds its stack."}, []string{"where"})
	m.Registry.MustRegister(m.LogSuppressed, m.Panics)
	for _, w := range PanicPlaces {
		m.Panics.WithLabelValues(w)
	}
}

// newShared makes the shared-tier families; RegisterShared registers them,
// in fleet mode only.
func (m *Metrics) newShared() {
	m.SharedUp = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "shared_up",
		Help: "1 when the shared tier (Redis) answers, 0 when the node goes on alone; absent in single-node mode."})
	m.SharedRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "shared_requests_total",
		Help: "Shared tier (Redis) operations by op (get, set, lock, rate) and outcome (ok, miss, error, timeout)."}, []string{"op", "outcome"})
	m.SharedRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "shared_rejected_total",
		Help: "Values read from Redis that the edge refused, by reason (entry: not a valid answer, its sizes or times out of bounds; budget: an impossible budget state, reset; lock: a fetch lock without an expiry, repaired; purge_seq, purge_floor, purge_record: a purge log counter, floor or record no node publishes, ignored). A rejected entry is a miss."}, []string{"reason"})
	m.SharedLockWait = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "shared_lock_waits_total",
		Help: "Waits for another node's fetch, by outcome (filled, timeout)."}, []string{"outcome"})
}

// SharedRejectReasons are the reason label values of shared_rejected_total.
var SharedRejectReasons = []string{"entry", "budget", "lock", "purge_seq", "purge_floor", "purge_record"}

// RegisterShared adds the shared-tier families (fleet mode only).
func (m *Metrics) RegisterShared() {
	m.Registry.MustRegister(m.SharedUp, m.SharedRequests, m.SharedLockWait, m.SharedRejected)
	for _, r := range SharedRejectReasons {
		m.SharedRejected.WithLabelValues(r)
	}
	for _, op := range []string{"get", "set", "lock", "rate"} {
		for _, o := range []string{"ok", "miss", "error", "timeout"} {
			m.SharedRequests.WithLabelValues(op, o)
		}
	}
	for _, o := range []string{"filled", "timeout"} {
		m.SharedLockWait.WithLabelValues(o)
	}
}

// SetConfigHash makes hash the one series of config_hash_info; the
// previous one goes once the new one is there, so no scrape finds none.
func (m *Metrics) SetConfigHash(hash string) {
	m.configHashMu.Lock()
	defer m.configHashMu.Unlock()
	m.ConfigHash.WithLabelValues(hash).Set(1)
	if m.configHash != "" && m.configHash != hash {
		m.ConfigHash.DeleteLabelValues(m.configHash)
	}
	m.configHash = hash
}

// BuildInfo registers explorer_edge_build_info{version,revision,goversion},
// always 1: which build a process runs, for dashboards and for joining
// onto other series (Prometheus' own *_build_info convention).
func (m *Metrics) BuildInfo(version, revision, goVersion string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
		Help: "Always 1; the labels name the running build: version (git describe), revision (commit) and goversion."},
		[]string{"version", "revision", "goversion"})
	g.WithLabelValues(version, revision, goVersion).Set(1)
	m.Registry.MustRegister(g)
}

// MemoryBound registers explorer_edge_memory_bound_bytes: the resident
// memory the process is sized to stay within (cache.RSSBound: 1.5 x
// cache.max_bytes + 64 MiB, or GOMEMLIMIT + 32 MiB when that is set), the
// line the memory panel draws and ExplorerEdgeMemoryNearBound compares
// process_resident_memory_bytes with.
func (m *Metrics) MemoryBound(bytes int64) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "memory_bound_bytes",
		Help: "Resident memory the edge is sized to stay within: its Go memory limit (go_gc_gomemlimit_bytes) + 32 MiB; by default 1.5 x cache.max_bytes + 64 MiB. Give the pod some 64 MiB more."})
	g.Set(float64(bytes))
	m.Registry.MustRegister(g)
}

// BudgetTokens registers the gauge of tokens left in the upstream bucket,
// read at scrape time.
func (m *Metrics) BudgetTokens(f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "upstream_budget_tokens",
		Help: "Tokens left in the upstream budget bucket."}, f))
}

// ThrottledSeconds registers the gauge of the lock-out an upstream 429
// imposed, in seconds left (0: none), read at scrape time.
func (m *Metrics) ThrottledSeconds(f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "upstream_throttled_seconds",
		Help: "Seconds left of the lock-out an upstream 429 (Retry-After, capped at upstream.max_retry_after) imposed; 0 when none."}, f))
}

// CodeIndex returns the requests_total label index of an envelope code.
// Codes outside the fixed set count as "other".
func (m *Metrics) CodeIndex(code string) int {
	if i, ok := m.codeIndex[code]; ok {
		return i
	}
	return len(Codes) - 1
}

// Request records one answered client request.
func (m *Metrics) Request(route, code int, seconds float64) {
	c := m.requests[route][code]
	if c == nil {
		c = m.requestsVec.WithLabelValues(m.routeNames[route], Codes[code])
	}
	c.Inc()
	m.requestDuration[route].Observe(seconds)
}

// CacheResult records one cache outcome.
func (m *Metrics) CacheResult(route int, result Result) {
	c := m.cacheResults[route][result]
	if c == nil {
		c = m.cacheResultsVec.WithLabelValues(m.routeNames[route], result.String())
	}
	c.Inc()
}

// Upstream records one upstream attempt (seconds < 0: not sent).
func (m *Metrics) Upstream(route int, outcome Outcome, seconds float64) {
	c := m.upstream[route][outcome]
	if c == nil {
		c = m.upstreamVec.WithLabelValues(m.routeNames[route], outcome.String())
	}
	c.Inc()
	if seconds < 0 {
		return
	}
	if o := m.upstreamDur[route]; o != nil {
		o.Observe(seconds)
	} else {
		m.upstreamDurVec.WithLabelValues(m.routeNames[route]).Observe(seconds)
	}
}

// FinalSources are the values of chain_final_height_source's source
// label (proxy/truth: Source): unknown before a chain's first block list;
// state, blocks marked done; depth, blocks without a state, the head less
// chain_finality_depth; none, blocks without a state and no depth
// configured, so nothing is final.
var FinalSources = []string{"unknown", "state", "depth", "none"}

// registerFinalSource registers chain_final_height_source, every chain at
// unknown until its first block list.
func (m *Metrics) registerFinalSource(chains []string) {
	m.finalSource = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "chain_final_height_source",
		Help: "Where each chain's finalized height comes from: 1 for the source in force (state: blocks marked done; depth: its blocks carry no state, the head less chain_finality_depth; none: no state and no depth configured, nothing is final; unknown: no block list yet), 0 for the others."}, []string{"chain", "source"})
	m.Registry.MustRegister(m.finalSource)
	for _, c := range chains {
		m.FinalSource(c, "unknown")
	}
}

// FinalSource sets where the finalized height of a configured chain comes
// from (one of FinalSources).
func (m *Metrics) FinalSource(chain, source string) {
	if m.finalSource == nil || !m.chains[chain] {
		return
	}
	for _, s := range FinalSources {
		v := 0.0
		if s == source {
			v = 1
		}
		m.finalSource.WithLabelValues(chain, s).Set(v)
	}
}

// FinalHeight sets the finalized height of a configured chain; a height
// of 0 (none known) makes no series.
func (m *Metrics) FinalHeight(chain string, h int64) {
	if h > 0 && m.chains[chain] {
		m.finalHeight.WithLabelValues(chain).Set(float64(h))
	}
}

// Reject records a refused client request.
func (m *Metrics) Reject(reason int) { m.rejections[reason].Inc() }
