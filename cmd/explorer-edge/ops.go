package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"explorer-edge/config"
)

// version and revision name the build. make build and the Dockerfile set
// them with -ldflags "-X main.version=$(git describe --tags --always
// --dirty) -X main.revision=$(git rev-parse HEAD)"; unset, the build
// information Go records stands in (buildVersion).
var version, revision string

// buildVersion is the version and revision of this binary, never empty:
// the stamped ones, else the module version (go install) and the VCS
// revision Go records when built in a git checkout, else "unknown".
func buildVersion() (v, rev string) {
	v, rev = version, revision
	dirty := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" && rev != "" && rev != "unknown" {
		// As git describe --always names an untagged commit.
		v = rev[:min(len(rev), 12)]
		if dirty {
			v += "-dirty"
		}
	}
	if v == "" {
		v = "unknown"
	}
	if rev == "" {
		rev = "unknown"
	}
	return v, rev
}

// buildInfo is the labels of explorer_edge_build_info.
func buildInfo() (v, rev, goVersion string) {
	v, rev = buildVersion()
	return v, rev, runtime.Version()
}

// printVersion is -version.
func printVersion(w io.Writer) {
	v, rev, goVersion := buildInfo()
	fmt.Fprintf(w, "explorer-edge %s (revision %s, %s)\n", v, rev, goVersion)
}

// logStart is the first thing run logs: which build starts, and the EDGE_*
// variables it ignores (the kubelet's service links for a Service named
// edge, a misspelled key), once.
func logStart(log *slog.Logger, cfg *config.Config) {
	v, rev, goVersion := buildInfo()
	log.Info("explorer-edge starting", "version", v, "revision", rev, "go", goVersion)
	if names := config.IgnoredEnv(cfg); len(names) > 0 {
		log.Warn("environment variables that are no config keys are ignored", "variables", names)
	}
	if ws := config.Warnings(cfg); len(ws) > 0 {
		log.Warn("configuration warnings", "warnings", ws)
	}
}

// logFatal logs why the edge cannot start (a configuration's problems, as
// a list) or why it stopped, with the logger the configuration asks for
// (JSON unless log.format is text); main then exits 1.
func logFatal(cfg config.Log, w io.Writer, err error, refused bool) {
	if cfg.Format != "text" {
		cfg.Format = "json"
	}
	log := newLogger(cfg, new(slog.LevelVar), w)
	text := config.Redact(err.Error())
	if refused {
		problems := strings.Split(text, "\n")
		if cfg.Format == "text" { // for a person: one problem a line, one under another
			for _, p := range problems {
				log.Error("configuration refused", "problem", p)
			}
			return
		}
		log.Error("configuration refused", "problems", problems)
		return
	}
	log.Error("explorer-edge stopped", "err", text)
}

// secondsAttr writes a duration in JSON logs as seconds, a float, as
// Prometheus does (and as a log pipeline can compare): "timeout":15, not
// slog's integer nanoseconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// healthcheckTimeout bounds -healthcheck; a container runtime has its own
// timeout too (HEALTHCHECK --timeout).
const healthcheckTimeout = 3 * time.Second

// healthcheck is -healthcheck: GET probe (/healthz, or /readyz) on the
// configuration's admin_listen, exit 0 on 200 and 1 otherwise. distroless
// has no shell and no curl; the edge asks itself. The image's HEALTHCHECK
// asks /healthz: an edge unready during an upstream outage must not be
// restarted by Swarm or autoheal, which would empty its cache.
func healthcheck(path, probe string, stdout, stderr io.Writer) int {
	// A file broken since the start (an edit not yet reloaded) does not
	// make a serving edge unhealthy: what could be read of it, over the
	// defaults, still says where the admin port is.
	cfg, err := config.Check(path)
	if err != nil {
		fmt.Fprintf(stderr, "config problems (the running edge keeps its own):\n%v\n", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthcheckTimeout)
	defer cancel()
	url := "http://" + healthcheckAddr(cfg.AdminListen) + probe
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", probe, err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "%s: %s %s", probe, res.Status, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s", probe, body)
	return 0
}

// healthcheckAddr is where -healthcheck connects for a listener on addr:
// a listener on every interface (":8081", 0.0.0.0, ::) is asked on
// 127.0.0.1; any other address as it is.
func healthcheckAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
