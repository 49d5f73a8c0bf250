// Command explorer-edge is the caching edge in front of the chain explorer's
// read API. It loads its configuration, wires the cache, metrics and proxy,
// serves the public and admin listeners, reloads on SIGHUP and drains on
// SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/knadh/koanf/providers/file"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy"
	"explorer-edge/proxy/node"
	"explorer-edge/proxy/route"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// mainUsage is the synopsis: every subcommand, then the flags of the first
// form (`explorer-edge -h`).
const mainUsage = `usage: explorer-edge [-config FILE] [-check-config | -healthcheck [-healthcheck-path P] | -version]
       explorer-edge purge [-admin URL] [-token-file F] [-soft] SELECTOR
       explorer-edge inspect [-admin URL] [-token-file F] (-url URI | -top N | -config)
       explorer-edge doctor [-config FILE] [-json] [-chain C] [-token ADDR] [-cross-hash H]
The first form serves (or checks the configuration, or asks a running
edge's admin port whether it is alive). purge drops cached answers and
inspect tells what the edge holds for a URL, on a running edge's admin
port; doctor asks the configured upstream which reading it has of each
point the explorer's documentation leaves open; each says more with -h.
`

// cli is the command line: it returns the exit status. A start that fails
// is logged by the logger the configuration asks for (JSON by default),
// as everything else the edge says.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "purge" {
		return purgeCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "inspect" {
		return inspectCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "doctor" {
		return doctorCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("explorer-edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mainUsage, "\nflags:\n"); fs.PrintDefaults() }
	path := fs.String("config", "config.yaml", "configuration file (YAML); EDGE_* environment variables override it")
	check := fs.Bool("check-config", false, "validate the configuration, list every problem, exit 0 or 1")
	health := fs.Bool("healthcheck", false, "ask -healthcheck-path on the configuration's admin_listen: exit 0 on 200, 1 otherwise (a container HEALTHCHECK)")
	healthPath := fs.String("healthcheck-path", "/healthz", "what -healthcheck asks: /healthz (alive) or /readyz (ready to serve)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		// A misspelled subcommand would otherwise start an edge.
		fmt.Fprintf(stderr, "explorer-edge: unknown command %q\n%s", fs.Arg(0), mainUsage)
		return 2
	}
	if *healthPath != "/healthz" && *healthPath != "/readyz" {
		fmt.Fprintf(stderr, "explorer-edge: -healthcheck-path %q: want /healthz or /readyz\n", *healthPath)
		return 2
	}
	switch {
	case *version:
		printVersion(stdout)
		return 0
	case *health:
		return healthcheck(*path, *healthPath, stdout, stderr)
	case *check:
		return checkConfig(*path, stdout, stderr)
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		if line := ignoredLine(&cfg); line != "" {
			err = fmt.Errorf("%w\n%s", err, line) // listed with the problems
		}
		logFatal(cfg.Log, stderr, err, true)
		return 1
	}
	if err := run(cfg, *path, stderr, nil); err != nil {
		logFatal(cfg.Log, stderr, err, false)
		return 1
	}
	return 0
}

// checkConfig is -check-config: every problem of the configuration at path
// (environment included) on stderr and exit status 1, or "config ok" and 0.
// EDGE_* variables that are no config keys are named on stderr with the
// problems (a misspelled variable is often why a key is missing), and so
// are the warnings (config.Warnings: demo credentials, placeholders),
// which alone do not make it fail.
func checkConfig(path string, stdout, stderr io.Writer) int {
	cfg, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
	}
	if line := ignoredLine(&cfg); line != "" {
		fmt.Fprintln(stderr, line)
	}
	for _, w := range config.Warnings(&cfg) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	if err != nil {
		return 1
	}
	fmt.Fprintln(stdout, "config ok")
	return 0
}

// ignoredLine names the EDGE_* variables that are no config keys, or "".
func ignoredLine(cfg *config.Config) string {
	if names := config.IgnoredEnv(cfg); len(names) > 0 {
		return "ignored, no config keys: " + strings.Join(names, ", ")
	}
	return ""
}

// loadConfig is the configuration at path, validated; its error lists
// every problem, one a line. On error the Config holds what could be read
// (its log settings say how to report the error).
func loadConfig(path string) (config.Config, error) {
	return config.Check(path, route.CheckConfig)
}

// newLogger writes JSON lines (or text) at the level held by level, which a
// reload may change.
func newLogger(cfg config.Log, level *slog.LevelVar, w io.Writer) *slog.Logger {
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	opts.ReplaceAttr = secondsAttr
	return slog.New(slog.NewJSONHandler(w, opts))
}

// run serves until SIGTERM/SIGINT (or stop, in tests) and drains. The edge
// itself is proxy.Start's; run owns the process: its settings, signals
// and the config file.
func run(cfg config.Config, path string, logOut io.Writer, stop <-chan struct{}) error {
	level := new(slog.LevelVar)
	log := newLogger(cfg.Log, level, logOut)
	logStart(log, &cfg)
	nofile, err := processSettings(&cfg, log)
	if err != nil {
		return err
	}
	// Signals are caught before anything is served: once /healthz answers,
	// SIGHUP reloads instead of killing the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// So is the file's watch (watch_config): a change made once the edge
	// answers is seen.
	changes, unwatch := watchConfig(cfg, path, log)
	defer unwatch()
	edge, err := proxy.Start(cfg, node.Options{Logger: log, Level: level, Register: processMetrics(cfg.Cache.MaxBytes)})
	if err != nil {
		return err
	}
	// Editors and the kubelet write a file in steps (truncate, write,
	// rename): reload once it has been quiet for watchSettle, not on the
	// first event, which may see half a file.
	var settle <-chan time.Time
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				reloadFile(edge, path, nofile)
				continue
			}
			return shutdown(edge, log)
		case <-changes:
			settle = time.After(watchSettle)
		case <-settle:
			settle = nil
			reloadFile(edge, path, nofile)
		case <-stop:
			return shutdown(edge, log)
		case err := <-edge.Err(): // a listener failed
			ctx, cancel := context.WithTimeout(context.Background(), edge.Config().ShutdownTimeout)
			defer cancel()
			edge.Close(ctx)
			return err
		}
	}
}

// processSettings sets what belongs to the process, not to one edge:
// GOMAXPROCS, the Go memory limit and the descriptor limit, which may
// lower cfg's server.max_conns. It returns the descriptor limit (0:
// unknown).
func processSettings(cfg *config.Config, log *slog.Logger) (nofile uint64, err error) {
	if cfg.Server.GOMAXPROCS > 0 {
		runtime.GOMAXPROCS(cfg.Server.GOMAXPROCS)
	}
	// Without a memory limit the Go heap of a full, evicting cache settles
	// near 2x cache.max_bytes (bench: BenchmarkMemory); a soft limit of
	// 1.5x plus a baseline keeps RSS within that bound. GOMEMLIMIT wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := cache.MemoryLimit(cfg.Cache.MaxBytes)
		debug.SetMemoryLimit(limit)
		log.Info("memory limit", "bytes", limit, "source", "1.5 x cache.max_bytes + 32 MiB")
	}
	// Every connection the edge may hold must fit the descriptor limit:
	// past it accept fails with EMFILE, and so does an upstream call.
	nofile, err = raiseDescriptorLimit()
	if err != nil {
		log.Warn("could not raise the soft descriptor limit to the hard one", "limit", nofile, "err", err.Error())
	}
	configured, err := fitDescriptors(cfg, nofile)
	if err != nil {
		return nofile, err
	}
	if configured > 0 {
		log.Warn("server.max_conns lowered to fit the descriptor limit", "limit", nofile, "configured", configured,
			"max_conns", cfg.Server.MaxConns, "admin_max_conns", cfg.AdminMaxConns, "upstream_max_conns", cfg.Upstream.MaxConns,
			"reserved", reservedDescriptors)
	}
	return nofile, nil
}

// processMetrics adds the process's own series to an edge's metrics: the
// build, and the memory bound when a limit is in force.
func processMetrics(maxBytes int64) func(*metrics.Metrics) {
	return func(m *metrics.Metrics) {
		m.BuildInfo(buildInfo())
		if b := memoryBound(maxBytes); b > 0 {
			m.MemoryBound(b)
		}
	}
}

// watchConfig is watch_config: a value on the channel for each change of
// the file at path, until unwatch. The file provider watches with
// fsnotify; it stops for good on an error (the file removed, say). Without
// watch_config the channel never receives.
func watchConfig(cfg config.Config, path string, log *slog.Logger) (changes <-chan struct{}, unwatch func()) {
	changed := make(chan struct{}, 1)
	if !cfg.WatchConfig || path == "" {
		return changed, func() {}
	}
	watch := file.Provider(path)
	err := watch.Watch(func(_ any, err error) {
		if err != nil {
			log.Warn("config watch stopped; SIGHUP still reloads", "err", err.Error())
			return
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		log.Warn("config watch unavailable", "err", err.Error())
		return changed, func() {}
	}
	return changed, func() { watch.Unwatch() }
}

// reloadFile reloads the file at path into node (SIGHUP, watch_config).
func reloadFile(n *node.Node, path string, nofile uint64) {
	next, err := loadConfig(path)
	if err == nil {
		// The same limit lowers the same max_conns: unchanged, it does
		// not make the reload refused.
		_, err = fitDescriptors(&next, nofile)
	}
	if err != nil {
		n.RefuseReload(err)
		return
	}
	n.Reload(next)
}

// shutdown drains node: it stops accepting, lets in-flight requests and
// background refreshes finish within shutdown_timeout, then closes it.
// Past that time the process exits with them still running.
func shutdown(n *node.Node, log *slog.Logger) error {
	timeout := n.Config().ShutdownTimeout
	log.Info("draining", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := n.Close(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("drain timed out; requests or refreshes still in flight were cut", "timeout", timeout)
		return nil
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// watchSettle is how long the config file must stay unchanged before
// watch_config reloads it.
const watchSettle = 100 * time.Millisecond
