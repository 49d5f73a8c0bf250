package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// collectorErrorPage is what a proxy in front of a collector answers when
// the collector is down: a multi-line HTML page with status 500.
const collectorErrorPage = `<html>
<head><title>500 Internal Server Error</title></head>
<body>
<center><h1>500 Internal Server Error</h1></center>
<hr><center>nginx</center>
</body>
</html>
`

// TestTracingExportErrorsStayJSON: the binary, tracing every request to an
// OTLP receiver that answers 500 with an HTML page, and exporting every
// 20 ms (OTEL_BSP_SCHEDULE_DELAY): everything it writes is JSON lines; the
// failed exports are "tracing failed" WARN lines, bounded (one per 10 s,
// however many exports fail), and the process keeps serving.
func TestTracingExportErrorsStayJSON(t *testing.T) {
	bin := buildEdge(t)
	_, upstream, _ := startSim(t, sim.Faults{})
	var exports atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exports.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, collectorErrorPage)
	}))
	defer collector.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // milliseconds; the child inherits it

	f := demoEdge(upstream)
	f.listen, f.admin = freeAddr(t), freeAddr(t)
	f.rest = fmt.Sprintf("tracing: {otlp_endpoint: %q, sample_ratio: 1}\nlog: {format: json}\n", collector.URL)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(f.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	p := startLimited(t, bin, path, f.admin, 4096)
	testkit.WaitFor(t, "5 failed exports", func() bool {
		res, err := http.Get("http://" + f.listen + blocks)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d", blocks, res.StatusCode)
		}
		return exports.Load() >= 5
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20 s of SIGTERM")
	}
	elapsed := time.Since(started)
	logs := p.logs.String()
	p.logs.Lines(t, "") // fails on a line that is not JSON
	failed := p.logs.Lines(t, "tracing failed")
	most := 1 + int(elapsed/(10*time.Second))
	if len(failed) == 0 || len(failed) > most {
		t.Fatalf("%d failed exports in %s logged as %d tracing failed lines, want 1 to %d:\n%s",
			exports.Load(), elapsed.Round(time.Millisecond), len(failed), most, tail(logs, 3000))
	}
	for _, l := range failed {
		msg, _ := l["err"].(string)
		if l["level"] != "WARN" || !strings.Contains(msg, "500 Internal Server Error") || len(msg) > 600 {
			t.Errorf("line %v", l)
		}
	}
	for _, line := range strings.Split(logs, "\n") {
		if len(line) > 2000 {
			t.Errorf("a line of %d bytes: %.300s...", len(line), line)
		}
	}
}

// TestRefusedConfigTextOnePerLine: with log.format text, a refused start
// writes each problem on a line of its own (one logfmt record each); JSON
// keeps its one line with the problems as a list (TestStartFailuresLogJSON).
func TestRefusedConfigTextOnePerLine(t *testing.T) {
	f := demoEdge("http://127.0.0.1:1")
	f.listen, f.admin = freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte(f.yaml()+"nope: 1\nlog: {format: text, access_sample: 2}\nshared: {local_share: 7}\n"), 0o600)
	var stdout, stderr testkit.LogBuffer
	if rc := cli([]string{"-config", path}, &stdout, &stderr); rc != 1 {
		t.Fatalf("exit %d", rc)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{`problem="` + path + `: nope: unknown key"`, `problem="` + path + `: log.access_sample: must be within 0..1, got 2"`,
		`problem="` + path + `: shared.local_share: must be within (0, 1], got 7"`}
	if len(lines) != len(want) {
		t.Fatalf("3 problems written as %d lines:\n%s", len(lines), stderr.String())
	}
	for _, w := range want {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, `msg="configuration refused"`) && strings.Contains(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines hold %s:\n%s", n, w, stderr.String())
		}
	}
}
