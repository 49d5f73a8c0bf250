package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"explorer-edge/sim"
)

// TestImageHealthcheckIsLiveness runs the Dockerfile's HEALTHCHECK command
// (its config swapped for one pointing at a stand-in admin port) against an
// edge that is alive but unready, as one with an empty cache during an
// upstream outage is: the check passes. It asked /readyz and failed, and
// Swarm or autoheal would have restarted the container, emptying its cache.
func TestImageHealthcheckIsLiveness(t *testing.T) {
	d := readDockerfile(t)
	if len(d.healthCmd) < 2 || d.healthCmd[0] != d.entrypoint[0] {
		t.Fatalf("HEALTHCHECK %q does not run the edge's binary %q", d.healthCmd, d.entrypoint)
	}
	var mu sync.Mutex
	var asked []string
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/healthz":
			w.Write([]byte("ok\n"))
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: breaker open for account default and nothing cached\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer admin.Close()
	f := demoEdge("http://127.0.0.1:1")
	f.listen, f.admin = freeAddr(t), strings.TrimPrefix(admin.URL, "http://")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(f.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	// A repeated -config overrides the image's, as in `docker run`.
	args := append(append([]string(nil), d.healthCmd[1:]...), "-config", path)
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := asked
		asked = nil
		return s
	}
	var out bytes.Buffer
	if rc := cli(args, &out, &out); rc != 0 || !slices.Equal(seen(), []string{"/healthz"}) {
		t.Fatalf("HEALTHCHECK %q on an alive, unready edge: exit %d, want 0 after asking /healthz only\n%s", d.healthCmd, rc, out.String())
	}
	// Readiness is still there for whoever asks for it.
	if rc := cli([]string{"-config", path, "-healthcheck", "-healthcheck-path", "/readyz"}, &out, &out); rc != 1 || !slices.Equal(seen(), []string{"/readyz"}) {
		t.Fatalf("-healthcheck-path /readyz on an unready edge: exit %d, want 1 after asking /readyz\n%s", rc, out.String())
	}
	if rc := cli([]string{"-config", path, "-healthcheck", "-healthcheck-path", "/metrics"}, &out, &out); rc != 2 {
		t.Fatalf("-healthcheck-path /metrics: exit %d, want 2", rc)
	}
}

// TestUsageListsEverySubcommand: `explorer-edge -h` names every subcommand
// cli dispatches (purge, inspect) and every flag, and exits 0; a word that
// is no subcommand is refused rather than ignored (it started an edge).
func TestUsageListsEverySubcommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if rc := cli([]string{"-h"}, &stdout, &stderr); rc != 0 {
		t.Errorf("-h: exit %d, want 0", rc)
	}
	usage := stderr.String()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	subs := []string{"purge", "inspect"}
	for _, m := range regexp.MustCompile(`args\[0\] == "(\w+)"`).FindAllStringSubmatch(string(src), -1) {
		subs = append(subs, m[1])
	}
	slices.Sort(subs)
	for _, sub := range slices.Compact(subs) {
		if !strings.Contains(usage, "explorer-edge "+sub+" ") {
			t.Errorf("-h does not list the subcommand %s:\n%s", sub, usage)
		}
	}
	for _, flag := range []string{"-config", "-check-config", "-healthcheck", "-healthcheck-path", "-version"} {
		if !regexp.MustCompile(`(?m)^\s+` + flag + `( |$)`).MatchString(usage) {
			t.Errorf("-h does not list %s:\n%s", flag, usage)
		}
	}
	stderr.Reset()
	if rc := cli([]string{"-config", "no-such-file.yaml", "purgee"}, &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), `unknown command "purgee"`) {
		t.Errorf("a misspelled subcommand: exit %d, want 2 naming it:\n%s", rc, stderr.String())
	}
}

// TestImageLabels: the final stage carries the OCI labels a registry shows
// (source, licenses) besides version and revision, licenses naming the
// repository's LICENSE, and make image passes the source.
func TestImageLabels(t *testing.T) {
	d := readDockerfile(t)
	for _, want := range []string{
		`org.opencontainers.image.source="${SOURCE}"`,
		`org.opencontainers.image.licenses="Apache-2.0"`,
		`org.opencontainers.image.version="${VERSION}"`,
		`org.opencontainers.image.revision="${REVISION}"`,
	} {
		if !strings.Contains(d.labels, want) {
			t.Errorf("final stage has no label %s:\n%s", want, d.labels)
		}
	}
	lic, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lic), "Apache License") || !strings.Contains(string(lic), "Version 2.0") {
		t.Error("LICENSE is not Apache 2.0: fix org.opencontainers.image.licenses")
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "--build-arg SOURCE=") {
		t.Error("make image does not pass SOURCE")
	}
}

// TestContainerDocsSimReachable: where the docs run explorer-sim in a
// container, it listens on every interface, so the edge's container can
// reach it (its default, 127.0.0.1:8900, is the sim's own loopback).
func TestContainerDocsSimReachable(t *testing.T) {
	for _, file := range []string{"../../Dockerfile", "../../deploy/README.md"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Join continued lines (a trailing backslash, also in comments).
		text := regexp.MustCompile(`\\\n#?\s*`).ReplaceAllString(string(raw), " ")
		found := false
		for _, line := range strings.Split(text, "\n") {
			if !strings.Contains(line, "--entrypoint /usr/local/bin/explorer-sim") {
				continue
			}
			found = true
			m := regexp.MustCompile(`-listen (\S+)`).FindStringSubmatch(line)
			if m == nil || !listensOnAllInterfaces(m[1]) {
				t.Errorf("%s: explorer-sim in a container on loopback, out of the edge's reach: %s", file, strings.TrimSpace(line))
			}
		}
		if !found {
			t.Errorf("%s shows no explorer-sim container", file)
		}
	}
}

// TestConfigHeaderPointsToReference: config.yaml's header names the
// configuration reference, docs/configuration.md (it named README.md).
func TestConfigHeaderPointsToReference(t *testing.T) {
	raw, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(raw), "\n\n")
	if !strings.Contains(header, "docs/configuration.md") {
		t.Fatalf("config.yaml's header does not point to docs/configuration.md:\n%s", header)
	}
	if _, err := os.Stat("../../docs/configuration.md"); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeSecondQuestionIsAHit runs the README's first commands (the
// block after "Then, in another terminal:") against explorer-sim and an
// edge, a reader's pause of 3 s before the last question, and checks each
// Cache-Status the README shows. The second question was the head's block
// list again, fresh for 1 s: a reader saw a miss where the README showed
// a hit.
func TestReadmeSecondQuestionIsAHit(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "Then, in another terminal:\n\n```sh\n")
	script, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md: no sh block after \"Then, in another terminal:\"")
	}
	_, url, _ := startSim(t, sim.Faults{})
	e := startEdge(t, demoEdge(url))
	script = strings.NewReplacer("localhost:8080", e.file.listen, "localhost:8081", e.file.admin).Replace(script)
	lines := strings.Split(strings.TrimSpace(script), "\n")
	var want []string
	last := -1
	for i, l := range lines {
		if s, ok := strings.CutPrefix(l, "# Cache-Status: "); ok {
			want = append(want, s)
		} else if strings.HasPrefix(l, "curl -si") {
			last = i
		}
	}
	if len(want) < 2 || last < 0 {
		t.Fatalf("README's commands show %d Cache-Status lines, want 2 or more:\n%s", len(want), script)
	}
	// The reader looks at the first answers before asking the last question.
	lines = append(lines[:last], append([]string{"sleep 3"}, lines[last:]...)...)
	cmd := exec.Command("sh", "-ec", strings.Join(lines, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's commands: %v\n%s", err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "Cache-Status: "); ok {
			got = append(got, s)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("README's commands printed %d Cache-Status lines, the README shows %d:\n%s", len(got), len(want), out)
	}
	// The ttl counts down; the rest is what the reader should see.
	ttl := regexp.MustCompile(`ttl=\d+`)
	for i := range want {
		if ttl.ReplaceAllString(got[i], "ttl=") != ttl.ReplaceAllString(want[i], "ttl=") {
			t.Errorf("question %d: Cache-Status %q, the README shows %q", i+1, got[i], want[i])
		}
	}
}
