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
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/knadh/koanf/providers/file"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy"
)

func main() {
	path := flag.String("config", "config.yaml", "configuration file (YAML); EDGE_* environment variables override it")
	check := flag.Bool("check-config", false, "validate the configuration, list every problem, exit 0 or 1")
	flag.Parse()

	cfg, err := loadConfig(*path)
	if *check {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("config ok")
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := run(cfg, *path, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "explorer-edge:", err)
		os.Exit(1)
	}
}

func loadConfig(path string) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s:\n%w", path, err)
	}
	return cfg, nil
}

func newLogger(cfg config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// run serves until SIGTERM/SIGINT (or stop, in tests) and drains.
func run(cfg config.Config, path string, logOut io.Writer, stop <-chan struct{}) error {
	log := newLogger(cfg.Log, logOut)
	if cfg.Server.GOMAXPROCS > 0 {
		runtime.GOMAXPROCS(cfg.Server.GOMAXPROCS)
	}
	c, err := cache.New(cache.Config{MaxBytes: cfg.Cache.MaxBytes})
	if err != nil {
		return err
	}
	defer c.Close()
	m := metrics.New(proxy.RouteNames(), cfg.Chains, c)
	opts := proxy.Options{Cache: c, Metrics: m, Logger: log}
	p, err := proxy.New(cfg, opts)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		return err
	}
	srv := p.NewServer(cfg.Server)
	admin := &fasthttp.Server{Handler: p.AdminHandler(), Name: "explorer-edge-admin", ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- admin.Serve(adminLn) }()
	log.Info("explorer-edge listening", "listen", ln.Addr().String(), "admin", adminLn.Addr().String(),
		"upstream", cfg.Upstream.BaseURL, "auth", cfg.Auth.Mode, "fleet", cfg.Shared.RedisAddr != "")

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	reload := make(chan struct{}, 1)
	if cfg.WatchConfig && path != "" {
		// The file provider watches with fsnotify; a change reloads as SIGHUP does.
		if err := file.Provider(path).Watch(func(any, error) {
			select {
			case reload <- struct{}{}:
			default:
			}
		}); err != nil {
			log.Warn("config watch unavailable", "err", err)
		}
	}
	doReload := func() {
		next, err := loadConfig(path)
		if err == nil {
			err = p.Reload(next)
		}
		if err != nil {
			m.ConfigReloads.WithLabelValues("error").Inc()
			log.Error("config reload refused; the previous configuration keeps serving", "err", err.Error())
			return
		}
		m.ConfigReloads.WithLabelValues("ok").Inc()
		log.Info("config reloaded")
	}
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				doReload()
				continue
			}
			return shutdown(p, srv, admin, cfg.ShutdownTimeout, log)
		case <-reload:
			doReload()
		case <-stop:
			return shutdown(p, srv, admin, cfg.ShutdownTimeout, log)
		case err := <-errc:
			return err
		}
	}
}

// shutdown stops accepting, lets in-flight requests finish within timeout,
// then exits.
func shutdown(p *proxy.Proxy, srv, admin *fasthttp.Server, timeout time.Duration, log *slog.Logger) error {
	log.Info("draining", "timeout", timeout)
	p.SetDraining(true)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.ShutdownWithContext(ctx)
	admin.ShutdownWithContext(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info("stopped")
	return nil
}
