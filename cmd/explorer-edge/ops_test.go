package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// dockerfile is the final stage of the repository's Dockerfile: the config
// it copies to each destination, its ENV, its ENTRYPOINT and HEALTHCHECK.
type dockerfile struct {
	copies      map[string]string // destination -> source in the repository
	env         map[string]string
	entrypoint  []string
	healthcheck string   // the whole instruction
	healthCmd   []string // its CMD, exec form
	args        []string // ARG names, all stages
	labels      string   // every LABEL instruction
	text        string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{copies: map[string]string{}, env: map[string]string{}, text: string(raw)}
	// Join continuation lines, drop comments.
	var lines []string
	cur := ""
	for _, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur += s + " "
			continue
		}
		if cur += trimmed; cur != "" {
			lines = append(lines, cur)
		}
		cur = ""
	}
	final := false
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			final = !strings.Contains(rest, " AS ") // the last stage has no name here
			d.copies, d.env = map[string]string{}, map[string]string{}
		case "ARG":
			name, _, _ := strings.Cut(rest, "=")
			d.args = append(d.args, name)
		case "LABEL":
			d.labels += rest + "\n"
		case "COPY":
			if f := strings.Fields(rest); final && !strings.HasPrefix(f[0], "--from") && len(f) == 2 {
				d.copies[f[1]] = f[0]
			}
		case "ENV":
			if !final {
				continue
			}
			for _, kv := range regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`).FindAllStringSubmatch(rest, -1) {
				d.env[kv[1]] = strings.Trim(kv[2], `"`)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form: %s", rest)
			}
		case "HEALTHCHECK":
			d.healthcheck = rest
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok || json.Unmarshal([]byte(strings.TrimSpace(cmd)), &d.healthCmd) != nil {
				t.Fatalf("HEALTHCHECK is not CMD in exec form: %s", rest)
			}
		}
	}
	return d
}

// flagValue is the value after name in args (the last one wins, as flag does).
func flagValue(args []string, name string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			v = args[i+1]
		}
	}
	return v
}

// listensOnAllInterfaces: a host part that is empty or unspecified.
func listensOnAllInterfaces(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// TestContainerConfigListensOnAllInterfaces: the image's configuration (the
// file the Dockerfile copies where its ENTRYPOINT's -config points, with
// the ENV it sets) passes -check-config and binds the public and admin
// listeners on every interface, so `docker run -p 8080:8080 -p 8081:8081`
// answers; `make run` stays on loopback. No Docker engine runs here: the
// Dockerfile is read as the engine would.
func TestContainerConfigListensOnAllInterfaces(t *testing.T) {
	d := readDockerfile(t)
	configPath := flagValue(d.entrypoint, "-config")
	src, ok := d.copies[configPath]
	if configPath == "" || !ok {
		t.Fatalf("ENTRYPOINT %q: its -config %q is not a file the final stage copies (%v)", d.entrypoint, configPath, d.copies)
	}
	for k, v := range d.env {
		t.Setenv(k, v)
	}
	path := filepath.Join("../..", src)
	var stdout, stderr bytes.Buffer
	if rc := checkConfig(path, &stdout, &stderr); rc != 0 {
		t.Fatalf("-check-config of %s with the image's ENV %v: exit %d\n%s%s", src, d.env, rc, stdout.String(), stderr.String())
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !listensOnAllInterfaces(cfg.Listen) || !listensOnAllInterfaces(cfg.AdminListen) {
		t.Fatalf("the image listens on %q and admins on %q (%s, ENV %v): a published port reaches neither",
			cfg.Listen, cfg.AdminListen, src, d.env)
	}
	if cfg.Log.Format != "json" {
		t.Errorf("the image logs %s, want json", cfg.Log.Format)
	}

	// The health check runs the binary itself, with the same config
	// (distroless has no shell or curl).
	if len(d.healthCmd) == 0 || d.healthCmd[0] != d.entrypoint[0] || flagValue(d.healthCmd, "-config") != configPath ||
		!strings.Contains(strings.Join(d.healthCmd, " "), "-healthcheck") {
		t.Errorf("HEALTHCHECK %q does not run %s -config %s -healthcheck", d.healthcheck, d.entrypoint[0], configPath)
	}

	// make run: the shipped config.yaml, on loopback.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`explorer-edge -config (\S+)`).FindSubmatch(mk)
	if run == nil {
		t.Fatal("make run starts no explorer-edge -config")
	}
	for k := range d.env {
		os.Unsetenv(k)
	}
	local, err := loadConfig(filepath.Join("../..", string(run[1])))
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{local.Listen, local.AdminListen} {
		if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
			t.Errorf("make run's %s listens on %q, want loopback", run[1], addr)
		}
	}
}

// TestHealthcheck: -healthcheck asks /readyz on the configuration's
// admin_listen: 0 while the edge is ready, 1 once it is stopped.
func TestHealthcheck(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	e := startEdge(t, demoEdge(url))
	var out bytes.Buffer
	if rc := cli([]string{"-config", e.path, "-healthcheck"}, &out, &out); rc != 0 {
		t.Fatalf("ready edge: exit %d\n%s", rc, out.String())
	}
	// The file broken since (an edit not reloaded): the edge still serves,
	// and is healthy.
	good, _ := os.ReadFile(e.path)
	e.write(string(good) + "nope: 1\n")
	out.Reset()
	if rc := cli([]string{"-config", e.path, "-healthcheck"}, &out, &out); rc != 0 || !strings.Contains(out.String(), "nope: unknown key") {
		t.Fatalf("ready edge, broken file: exit %d\n%s", rc, out.String())
	}
	e.once.Do(func() { close(e.stop) })
	<-e.done
	out.Reset()
	if rc := cli([]string{"-config", e.path, "-healthcheck"}, &out, &out); rc != 1 {
		t.Fatalf("stopped edge: exit %d\n%s", rc, out.String())
	}
	for addr, want := range map[string]string{
		":8081": "127.0.0.1:8081", "0.0.0.0:8081": "127.0.0.1:8081", "[::]:8081": "127.0.0.1:8081",
		"10.1.2.3:9": "10.1.2.3:9", "[::1]:9": "[::1]:9", "edge.local:8081": "edge.local:8081",
	} {
		if got := healthcheckAddr(addr); got != want {
			t.Errorf("healthcheckAddr(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestIgnoredEnvironmentIsWarnedOnce: the kubelet's service-link variables
// start the edge, with one warning naming them.
func TestIgnoredEnvironmentIsWarnedOnce(t *testing.T) {
	t.Setenv("EDGE_PORT", "tcp://10.0.0.7:8080")
	t.Setenv("EDGE_SERVICE_HOST", "10.0.0.7")
	_, url, _ := startSim(t, sim.Faults{})
	e := startEdge(t, demoEdge(url))
	warned := 0
	for _, l := range e.logs.Lines(t, "") {
		if s, _ := json.Marshal(l["variables"]); strings.Contains(string(s), "EDGE_PORT") {
			warned++
			if l["level"] != "WARN" || !strings.Contains(string(s), "EDGE_SERVICE_HOST") {
				t.Errorf("warning: %v", l)
			}
		}
	}
	if warned != 1 {
		t.Fatalf("%d lines name EDGE_PORT, want 1:\n%s", warned, e.logs)
	}
	var out bytes.Buffer
	if rc := checkConfig(e.path, &out, &out); rc != 0 || !strings.Contains(out.String(), "EDGE_PORT, EDGE_SERVICE_HOST") {
		t.Fatalf("-check-config: exit %d\n%s", rc, out.String())
	}
}

// TestCheckConfigListsEveryProblem: -check-config names every problem of a
// file, with the file and the key path, those found decoding and those
// found validating, and exits 1.
func TestCheckConfigListsEveryProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte(`listen: "127.0.0.1:1"
admin_listen: "127.0.0.1:1"
upstream:
  api_key: k
  secret_key: s
  passphrase: p
  rate: "abc"
  timeout: 5
  retries: 99
log: {level: loud}
nope: 1
`), 0o600)
	var stdout, stderr bytes.Buffer
	if rc := checkConfig(path, &stdout, &stderr); rc != 1 {
		t.Fatalf("exit %d", rc)
	}
	out := stderr.String()
	for _, want := range []string{
		path + `: upstream.rate: "abc" is not a number`,
		path + `: upstream.timeout: 5 has no unit: write 5s`,
		path + `: nope: unknown key`,
		path + `: admin_listen: must differ from listen`,
		path + `: upstream.retries: must be 0..10, got 99`,
		path + `: log.level: "loud" is not`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 6 || strings.Contains(out, "''") {
		t.Errorf("%d lines for 6 problems", n)
	}
	if t.Failed() {
		t.Logf("-check-config said:\n%s", out)
	}
}

// TestVersion: the version make build and the Dockerfile stamp with
// -ldflags is what -version prints; without it, Go's build info stands in.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "explorer-edge")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test -X main.revision=0123abcd", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("-version: %v\n%s", err, out)
	}
	if want := "explorer-edge v9.8.7-test (revision 0123abcd, " + runtime.Version() + ")\n"; string(out) != want {
		t.Fatalf("-version printed %q, want %q", out, want)
	}
	// What make build and the Dockerfile pass.
	mk, _ := exec.Command("make", "-n", "-C", "../..", "build").CombinedOutput()
	if !strings.Contains(string(mk), "-X main.version=") || !strings.Contains(string(mk), "-X main.revision=") {
		t.Errorf("make build does not stamp the version:\n%s", mk)
	}
	d := readDockerfile(t)
	for _, want := range []string{"-X main.version=${VERSION}", "-X main.revision=${REVISION}"} {
		if !strings.Contains(d.text, want) {
			t.Errorf("the Dockerfile's build does not pass %s", want)
		}
	}
	for _, label := range []string{"org.opencontainers.image.version=", "org.opencontainers.image.revision=", "org.opencontainers.image.title="} {
		if !strings.Contains(d.labels, label) {
			t.Errorf("the image has no label %s", label)
		}
	}
	// Unstamped (this test binary): never empty.
	if v, rev := buildVersion(); v == "" || rev == "" {
		t.Errorf("unstamped version %q revision %q", v, rev)
	}
}

// TestBuildInfoMetric: /metrics says which build runs, and so does the
// first log line.
func TestBuildInfoMetric(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	e := startEdge(t, demoEdge(url))
	v, rev := buildVersion()
	if n := e.metric("explorer_edge_build_info", "version", v, "revision", rev, "goversion", runtime.Version()); n != 1 {
		t.Fatalf("explorer_edge_build_info{version=%q,revision=%q,goversion=%q} = %v, want 1", v, rev, runtime.Version(), n)
	}
	lines := e.logs.Lines(t, "")
	if len(lines) == 0 || lines[0]["version"] != v || lines[0]["revision"] != rev || lines[0]["go"] != runtime.Version() {
		t.Fatalf("the first log line does not name the build: %v", lines[0])
	}
}

// TestLogsInJSON: durations in JSON logs are seconds (a float), not
// integer nanoseconds; a start that fails is logged by the same logger,
// as JSON, not printed plain.
func TestLogsInJSON(t *testing.T) {
	var b testkit.LogBuffer
	log := newLogger(config.Log{Level: "info", Format: "json"}, new(slog.LevelVar), &b)
	log.Info("draining", "timeout", 15*time.Second, "backoff", 250*time.Millisecond)
	l := b.Lines(t, "draining")[0]
	if l["timeout"] != 15.0 || l["backoff"] != 0.25 {
		t.Fatalf("durations logged as %v and %v, want 15 and 0.25 (seconds)", l["timeout"], l["backoff"])
	}

	// The public port taken: run fails; the error is a JSON line.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := demoEdge("http://127.0.0.1:1")
	f.listen, f.admin = taken.Addr().String(), freeAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte(f.yaml()+"log: {format: json}\n"), 0o600)
	var stdout, stderr testkit.LogBuffer
	if rc := cli([]string{"-config", path}, &stdout, &stderr); rc != 1 {
		t.Fatalf("exit %d", rc)
	}
	errs := 0
	for _, l := range stderr.Lines(t, "") { // fails on a line that is not JSON
		if l["level"] == "ERROR" {
			errs++
			if s, _ := l["err"].(string); !strings.Contains(s, "address already in use") {
				t.Errorf("error line %v", l)
			}
		}
	}
	if errs != 1 {
		t.Fatalf("%d error lines:\n%s", errs, stderr.String())
	}

	// A configuration refused: a JSON line listing every problem.
	os.WriteFile(path, []byte(f.yaml()+"nope: 1\nlog: {format: json, level: loud}\n"), 0o600)
	stderr = testkit.LogBuffer{}
	if rc := cli([]string{"-config", path}, &stdout, &stderr); rc != 1 {
		t.Fatalf("exit %d", rc)
	}
	lines := stderr.Lines(t, "")
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["msg"] != "configuration refused" {
		t.Fatalf("refused config logged as:\n%s", stderr.String())
	}
	probs, _ := lines[0]["problems"].([]any)
	if len(probs) != 2 || !strings.Contains(probs[0].(string), "nope: unknown key") || !strings.Contains(probs[1].(string), "log.level") {
		t.Fatalf("problems %v", lines[0]["problems"])
	}
}

// TestSecretFileIsReadAgainOnSIGHUP: the upstream secret key comes from a
// file (a mounted Secret); the file rotated and SIGHUP, the edge signs with
// the new one.
func TestSecretFileIsReadAgainOnSIGHUP(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	secret := filepath.Join(t.TempDir(), "upstream-secret")
	os.WriteFile(secret, []byte("00000000000000000000000000000000\n"), 0o600)
	f := demoEdge(url)
	f.secret = ""
	f.more = "  secret_key_file: " + secret
	e := startEdge(t, f)
	// The upstream refuses the edge's own credentials (401 50113): the
	// client is told so in a 502, never given the upstream's 401.
	if status, code, _ := e.get(blocks); status != 502 || code != "50026" {
		t.Fatalf("the wrong secret from the file: %d %s, want 502 50026 (the edge's credentials refused)", status, code)
	}
	os.WriteFile(secret, []byte(sim.DemoSecretKey+"\n"), 0o600)
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("after the file changed and SIGHUP: %d %s", status, code)
	}
}
