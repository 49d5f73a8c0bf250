// Package node is the composition root: Start wires an edge from its
// configuration (cache, metrics, tracing, the fleet tier, the request core,
// the self-check, both listeners and servers) the same way for the binary
// and for the tests. The request core is made by the function of
// Options.Core (proxy.Build), so that this package does not import it and
// the core's own tests can start whole edges.
package node

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"explorer-edge/cache"
	"explorer-edge/cache/disk"
	"explorer-edge/config"
	"explorer-edge/fleet"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/server"
	"explorer-edge/proxy/stream"
	"explorer-edge/proxy/tracing"
)

// The composition root: Start wires an edge from its configuration (cache,
// metrics, tracing, the fleet tier and its budgets, the proxy, the
// self-check, both listeners and servers) the same way for the binary and
// for the tests. What belongs to the process rather than to one edge
// (GOMAXPROCS, the Go memory limit, the descriptor limit, signals, the
// config file and its watcher) is cmd/explorer-edge's: Start changes no
// process-wide state, except OpenTelemetry's error handler when it builds
// a tracer provider from tracing.otlp_endpoint (tracing.NewTracerProvider).

// Options are what Start takes beside the configuration. Core is
// required; with the rest at their zero values Start starts an edge as the
// binary does, logging nowhere.
type Options struct {
	// Core makes the request core from the parts Start built (proxy.Build).
	Core   func(cfg config.Config, parts Parts) (Core, error)
	Logger *slog.Logger // nil = discard
	// Level is the level Logger's handler reads: a reload sets it to the
	// new log.level before it logs. nil = a reload leaves the level alone.
	Level *slog.LevelVar
	Now   func() time.Time // the clock of cache decisions; nil = time.Now
	// Tracer is used instead of a provider built from cfg.Tracing; the
	// caller shuts it down. nil = built from tracing.otlp_endpoint (none
	// without one) and flushed by Close.
	Tracer trace.TracerProvider
	// Listener and AdminListener are open listeners for the public and the
	// admin port; the node closes them (on a failed Start too). nil =
	// listen on cfg.Listen and cfg.AdminListen.
	Listener, AdminListener net.Listener
	// Fleet changes the shared tier's settings (taken from shared.* and
	// upstream.*) before it connects; nil = as configured. Only in fleet
	// mode (shared.redis_addr set).
	Fleet func(*fleet.Config)
	// Register adds series of the process's own (build_info,
	// memory_bound_bytes) to the node's metrics before anything is
	// served; nil = none.
	Register func(*metrics.Metrics)
	// NoSelfCheck: no upstream self-check at start, nor its retries (tests
	// that count the upstream's calls call SelfCheck themselves). false =
	// each account is asked once before anything is served, and the ones
	// that failed every selfCheckEvery until they answer.
	NoSelfCheck bool
}

// Parts are what Start builds for the request core.
type Parts struct {
	Cache   *cache.Cache
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time     // nil = time.Now
	Tracer  trace.TracerProvider // nil = tracing off
	Shared  *fleet.Redis         // the shared tier; nil on a single node
	Disk    *disk.Store          // the disk tier (cache.disk_path); nil when off
	// DiskOff says why the disk tier is off although cache.disk_path is
	// set (its file could not be opened): /readyz says it. "" otherwise.
	DiskOff string
}

// Core is what the node asks of the request core (proxy.Proxy).
type Core interface {
	SelfCheck(ctx context.Context) error
	RetrySelfCheck(ctx context.Context, every time.Duration)
	Listener(ln net.Listener, cfg server.ListenerConfig) net.Listener
	NewServer(cfg config.Server) *fasthttp.Server
	NewAdminServer(cfg config.Config) *fasthttp.Server
	Reload(cfg config.Config) error
	NoteReload(err error)
	SetDraining(draining bool)
	Close(ctx context.Context) error
	// Events is the hub of the event stream (proxy/stream); nil when
	// stream.enabled is off.
	Events() *stream.Hub
}

// Node is one running edge: the request core and what it was built with,
// serving on both ports. Start it with Start; Close it.
type Node struct {
	p       Core
	cache   *cache.Cache
	disk    *disk.Store // nil when cache.disk_path is empty, or its file could not be opened
	diskOff string      // why the disk tier is off with disk_path set (Parts.DiskOff)
	metrics *metrics.Metrics
	shared  *fleet.Redis             // nil on a single node
	tracer  *sdktrace.TracerProvider // the provider Start built; nil if given or off
	log     *slog.Logger
	level   *slog.LevelVar

	ln, adminLn net.Listener
	srv, admin  *fasthttp.Server
	served      chan error // what the servers' Serve returned

	stopSelfCheck context.CancelFunc
	selfCheckDone chan struct{}

	mu      sync.Mutex    // serializes reloads
	current config.Config // the configuration in force

	drainOnce, closeOnce sync.Once
	drainErr, closeErr   error
}

// selfCheckEvery is how often an upstream account that failed the
// self-check is asked again.
const selfCheckEvery = 30 * time.Second

// tracerFlushTimeout bounds the flush of the spans still batched at Close.
const tracerFlushTimeout = 5 * time.Second

// Start builds an edge for cfg, a validated configuration (config.Check),
// and serves it: the upstream self-check first (unless o.NoSelfCheck),
// then the public and admin listeners, each guarded by its connection caps
// (Listener). Redis being down is no error in fleet mode: the node serves
// alone until it answers.
func Start(cfg config.Config, o Options) (_ *Node, err error) {
	n := &Node{log: o.Logger, level: o.Level, current: cfg, ln: o.Listener, adminLn: o.AdminListener}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			n.release()
		}
	}()
	parts, err := n.collaborators(cfg, o)
	if err != nil {
		return nil, err
	}
	if n.p, err = o.Core(cfg, parts); err != nil {
		n.p = nil // a typed nil in the interface must not be closed
		return nil, err
	}
	if !o.NoSelfCheck {
		n.selfCheck()
	}
	if err := n.listen(cfg); err != nil {
		return nil, err
	}
	n.serve(cfg)
	n.log.Info("explorer-edge listening", "listen", n.Addr(), "admin", n.AdminAddr(),
		"upstream", redactURL(cfg.Upstream.BaseURL), "auth", cfg.Auth.Mode, "fleet", n.shared != nil)
	return n, nil
}

// collaborators builds what the request core takes beside the
// configuration: the cache, the metrics, the disk tier (with
// cache.disk_path), the tracer provider and, in fleet mode, the shared
// tier.
func (n *Node) collaborators(cfg config.Config, o Options) (Parts, error) {
	var err error
	n.cache, err = cache.New(cache.Config{MaxBytes: cfg.Cache.MaxBytes, IdentityBytes: cfg.Cache.IdentityBytes})
	if err != nil {
		return Parts{}, err
	}
	n.metrics = metrics.New(route.Names(), cfg.Chains, n.cache)
	if o.Register != nil {
		o.Register(n.metrics)
	}
	if cfg.Cache.DiskPath != "" {
		n.disk = n.openDisk(cfg, o.Now)
	}
	parts := Parts{Cache: n.cache, Metrics: n.metrics, Logger: n.log, Now: o.Now, Tracer: o.Tracer, Disk: n.disk, DiskOff: n.diskOff}
	if o.Tracer == nil && cfg.Tracing.OTLPEndpoint != "" {
		tp, err := tracing.NewTracerProvider(cfg.Tracing, o.Logger)
		if err != nil {
			return Parts{}, err
		}
		n.tracer, parts.Tracer = tp, tp
		n.log.Info("tracing on", "otlp_endpoint", config.Redact(cfg.Tracing.OTLPEndpoint), "sample_ratio", cfg.Tracing.SampleRatio)
	}
	if cfg.Shared.RedisAddr != "" {
		// Fleet mode: Redis is the second cache tier, the fleet's one
		// upstream budget and its fetch locks.
		n.metrics.RegisterShared()
		fc := FleetConfig(cfg)
		if o.Fleet != nil {
			o.Fleet(&fc)
		}
		if n.shared, err = fleet.New(fc, n.metrics, n.log); err != nil {
			return Parts{}, err
		}
		parts.Shared = n.shared
	}
	return parts, nil
}

// openDisk opens the disk tier in cache.disk_path (docs/disk.md), on the
// clock of cache decisions (now; nil: time.Now), and registers its
// metrics. Its entries are tagged by route and chain
// numbers: a file written under another route table or chain list starts
// empty (disk.Options.TagSpace).
//
// A file that cannot be opened (another process holds it, an immutable
// file, a directory or a symlink named disk.db, a purge outstanding and
// the file not removable) does not stop the node: it serves without the
// tier, loudly (an ERROR line, explorer_edge_disk_open 0, /readyz's
// reason), and marks the directory so that the next start begins with an
// empty file: the purges applied meanwhile do not reach it. -check-config
// checks the directory only; what the file holds is known at open.
func (n *Node) openDisk(cfg config.Config, now func() time.Time) *disk.Store {
	chains := make([]string, len(cfg.Chains))
	for i, c := range cfg.Chains {
		chains[i] = strings.ToUpper(strings.TrimSpace(c))
	}
	var d *disk.Store
	// The store's counters are read at scrape time only, once it is open.
	observe := n.metrics.Disk(cfg.Cache.DiskMaxBytes, func() metrics.DiskStats {
		if d == nil {
			return metrics.DiskStats{} // off: could not be opened
		}
		s := d.Stats()
		return metrics.DiskStats{Hits: s.Hits, Misses: s.Misses, Writes: s.Writes, Drops: s.Drops, WriteErrors: s.WriteErrors,
			Evictions: s.Evictions, Expired: s.Expired, Corrupt: s.Corrupt, Deleted: s.Deleted, Bytes: s.Bytes, Entries: s.Entries,
			Resident: d.Resident(), Open: !s.Broken}
	})
	opened, err := disk.Open(disk.Options{Dir: cfg.Cache.DiskPath, MaxBytes: cfg.Cache.DiskMaxBytes, MaxBody: cfg.Upstream.MaxResponseBytes, Logger: n.log,
		TagSpace: "routes:" + strings.Join(route.Names(), ",") + " chains:" + strings.Join(chains, ","), Now: now,
		// What waits for the writer may have left memory: a sixteenth of
		// it at most (docs/disk.md, Memory).
		QueueBytes: cfg.Cache.MaxBytes / 16,
		Metrics:    disk.Metrics{ReadSeconds: observe}})
	if err != nil {
		n.diskOff = err.Error()
		n.log.Error("disk tier off: its file could not be opened; serving without it", "path", cfg.Cache.DiskPath, "err", err)
		if merr := disk.Distrust(cfg.Cache.DiskPath); merr != nil {
			n.log.Error("disk tier off, and the directory could not be marked: a later start may serve answers purged meanwhile unless disk.db is removed first",
				"path", cfg.Cache.DiskPath, "err", merr)
		}
		return nil
	}
	d = opened
	st := d.Stats()
	n.log.Info("disk tier open", "path", cfg.Cache.DiskPath, "max_bytes", cfg.Cache.DiskMaxBytes, "entries", st.Entries, "bytes", st.Bytes)
	return d
}

// FleetConfig takes the shared tier's settings from the configuration: the
// composition root adapts the one to the other, so fleet knows nothing of
// the configuration file.
func FleetConfig(c config.Config) fleet.Config {
	var addrs []string
	for _, a := range strings.Split(c.Shared.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	s := c.Shared
	return fleet.Config{
		Addrs: addrs, Username: s.RedisUsername, Password: s.RedisPassword, TLS: s.RedisTLS, Cluster: s.RedisCluster,
		Timeout: s.Timeout, LockTTL: s.LockTTL, LockWait: s.LockWait, Prefix: s.Prefix,
		Rate: c.Upstream.Rate, Burst: c.Upstream.Burst, LocalShare: s.LocalShare, MaxBody: c.Upstream.MaxResponseBytes,
	}
}

// selfCheck asks each upstream account one signed question before anything
// is served: whether base_url and the credentials work (logged; in
// /readyz). An account that failed is asked again, at a low rate, until
// it answers or the node closes.
func (n *Node) selfCheck() {
	n.p.SelfCheck(context.Background())
	ctx, stop := context.WithCancel(context.Background())
	n.stopSelfCheck, n.selfCheckDone = stop, make(chan struct{})
	go func() {
		defer close(n.selfCheckDone)
		n.p.RetrySelfCheck(ctx, selfCheckEvery)
	}()
}

// listen opens the listeners the options did not give.
func (n *Node) listen(cfg config.Config) error {
	var err error
	if n.ln == nil {
		if n.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return err
		}
	}
	if n.adminLn == nil {
		n.adminLn, err = net.Listen("tcp", cfg.AdminListen)
	}
	return err
}

// serve serves the public and admin servers on their guarded listeners.
func (n *Node) serve(cfg config.Config) {
	n.srv, n.admin = n.p.NewServer(cfg.Server), n.p.NewAdminServer(cfg)
	n.served = make(chan error, 2)
	public, admin := n.p.Listener(n.ln, server.PublicListener(cfg.Server)), n.p.Listener(n.adminLn, server.AdminListener(cfg))
	go func() { n.served <- n.srv.Serve(public) }()
	go func() { n.served <- n.admin.Serve(admin) }()
}

// release closes what a failed Start had built.
func (n *Node) release() {
	for _, ln := range []net.Listener{n.ln, n.adminLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if n.p != nil { // the core's pollers and the hub's heartbeat
		n.p.Close(context.Background())
		if hub := n.p.Events(); hub != nil {
			hub.Close()
		}
	}
	n.closeParts()
}

// Core is the node's request core.
func (n *Node) Core() Core { return n.p }

// Metrics is the node's metrics (its /metrics).
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// Disk is the node's disk tier; nil when cache.disk_path is empty.
func (n *Node) Disk() *disk.Store { return n.disk }

// Cache is the node's in-memory cache.
func (n *Node) Cache() *cache.Cache { return n.cache }

// Fleet is the node's shared tier; nil on a single node.
func (n *Node) Fleet() *fleet.Redis { return n.shared }

// Addr is the public listener's address.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// AdminAddr is the admin listener's address.
func (n *Node) AdminAddr() string { return n.adminLn.Addr().String() }

// Config is the configuration in force: Start's, or the last one a
// Reload applied.
func (n *Node) Config() config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.current
}

// Err receives what a server's Serve returned: an error when a listener
// failed while serving (the binary exits with it), nil once Drain stopped
// it.
func (n *Node) Err() <-chan error { return n.served }

// Reload applies cfg, a validated configuration, as SIGHUP does: every
// changed key is applied or refused by name (config.ReloadRules), and a
// configuration with a key that needs a restart is refused whole, the
// previous one serving on. Either way the outcome is in GET /config
// (NoteReload), config_reloads_total and the log, keys only, never values.
func (n *Node) Reload(cfg config.Config) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	changed, err := config.ReloadChanges(&n.current, &cfg)
	if err == nil {
		err = n.p.Reload(cfg)
	}
	if err != nil {
		n.refuse(err)
		return err
	}
	n.p.NoteReload(nil)
	if n.level != nil {
		_ = n.level.UnmarshalText([]byte(cfg.Log.Level))
	}
	n.current = cfg
	n.metrics.ConfigReloads.WithLabelValues("ok").Inc()
	n.log.Info("config reloaded", "changed", changedKeys(changed))
	return nil
}

// RefuseReload records a reload that failed before Reload could be asked
// (the file did not load, or did not validate) as Reload records one it
// refuses; the configuration in force serves on.
func (n *Node) RefuseReload(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refuse(err)
}

func (n *Node) refuse(err error) {
	n.p.NoteReload(err)
	n.metrics.ConfigReloads.WithLabelValues("error").Inc()
	n.log.Error("config reload refused; the previous configuration keeps serving", "err", config.Redact(err.Error()))
}

// changedKeys is never nil, so that a reload that changed nothing logs
// changed=[] rather than null.
func changedKeys(keys []string) []string {
	if keys == nil {
		return []string{}
	}
	return keys
}

// Drain stops serving: /readyz says draining, both servers stop accepting
// and close their listeners, and requests in flight finish until ctx ends
// (its error then). The node's proxy, cache and fleet tier stay usable
// until Close. Calls after the first return its result.
func (n *Node) Drain(ctx context.Context) error {
	n.drainOnce.Do(func() {
		n.p.SetDraining(true)
		// Streams first: each is told to come back (retry:) and ends, and
		// new ones are refused, before the servers stop; open streams do
		// not hold Shutdown (they are hijacked).
		if hub := n.p.Events(); hub != nil {
			hub.Drain()
		}
		n.drainErr = n.srv.ShutdownWithContext(ctx)
		if err := n.admin.ShutdownWithContext(ctx); n.drainErr == nil {
			n.drainErr = err
		}
	})
	return n.drainErr
}

// Close is what SIGTERM does: Drain, then background refreshes end (until
// ctx ends), the self-check stops, and the fleet tier, the tracer provider
// Start built (its batched spans flushed) and the cache close. Past ctx,
// what still runs is cut: its error (context.DeadlineExceeded) is
// returned, the rest closed all the same. Calls after the first return its
// result.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		err := n.Drain(ctx)
		// Background refreshes end before the cache closes: a refresh's
		// store raced the cache's Close.
		if perr := n.p.Close(ctx); err == nil {
			err = perr
		}
		// The pollers stopped with the core; the streams end now.
		if hub := n.p.Events(); hub != nil {
			hub.Close()
		}
		n.closeParts()
		n.closeErr = err
	})
	return n.closeErr
}

// closeParts closes the collaborators, the proxy's users first.
func (n *Node) closeParts() {
	if n.stopSelfCheck != nil {
		n.stopSelfCheck()
		<-n.selfCheckDone
	}
	if n.shared != nil {
		n.shared.Close()
	}
	if n.disk != nil {
		// After the core: nothing is kept any more; what is queued is
		// written (a kill -9 loses it).
		if err := n.disk.Close(); err != nil {
			n.log.Error("disk tier close", "err", err)
		}
	}
	if n.tracer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tracerFlushTimeout)
		n.tracer.Shutdown(ctx)
		cancel()
	}
	if n.cache != nil {
		n.cache.Close()
	}
}

// redactURL hides a password in a URL's user info before it is logged.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
