package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"explorer-edge/sim"
)

// TestSIGHUPNamesWhatItChanges: a reload that adds tracing.otlp_endpoint
// (set up once, at start) is refused naming the key, and the old
// configuration keeps serving; a reload of keys a reload applies logs
// "config reloaded" with those keys, a secret by its key and never by its
// value.
func TestSIGHUPNamesWhatItChanges(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	f := demoEdge(url)
	e := startEdge(t, f)
	f.listen, f.admin = e.file.listen, e.file.admin

	// Wrong credentials beside the new key: were anything of the file
	// applied, the next request would fail.
	tracing := f
	tracing.key, tracing.secret, tracing.pass = "other-key", "11111111111111111111111111111111", "other-passphrase"
	tracing.rest = `tracing: {otlp_endpoint: "http://127.0.0.1:1"}`
	e.write(tracing.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("error", 1)
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("after the refused reload: %d %s", status, code)
	}
	refusal := ""
	for _, l := range e.logs.Lines(t, "") {
		if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "config reload refused") {
			refusal, _ = l["err"].(string)
		}
		if l["msg"] == "config reloaded" {
			t.Fatalf("a reload that applied nothing logged %v", l)
		}
	}
	if !strings.Contains(refusal, "restart to change tracing.otlp_endpoint") {
		t.Fatalf("refusal %q does not name tracing.otlp_endpoint:\n%s", refusal, e.logs)
	}

	const newPass = "a-new-passphrase-never-logged"
	applied := f
	applied.pass = newPass
	applied.more = "  timeout: 3s"
	applied.rest = "log: {level: info, access_sample: 0.5}"
	e.write(applied.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	var changed []string
	for _, l := range e.logs.Lines(t, "") {
		if l["msg"] == "config reloaded" {
			b, _ := json.Marshal(l["changed"])
			json.Unmarshal(b, &changed)
		}
	}
	want := []string{"upstream.passphrase", "upstream.timeout", "log.access_sample"}
	if !slices.Equal(changed, want) {
		t.Fatalf("config reloaded with changed=%v, want %v:\n%s", changed, want, e.logs)
	}
	if strings.Contains(e.logs.String(), newPass) {
		t.Fatalf("the new passphrase is in the logs:\n%s", e.logs)
	}
}

// TestCheckConfigWarnsAndNamesIgnoredEnv: -check-config warns, and still
// exits 0, on explorer-sim's demo credentials (the shipped config.yaml's)
// and on a placeholder secret, without printing either value; with
// problems, the EDGE_* variables it ignored are listed beside them (a
// misspelled variable is why a secret is missing).
func TestCheckConfigWarnsAndNamesIgnoredEnv(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if rc := checkConfig("../../config.yaml", &stdout, &stderr); rc != 0 || stdout.String() != "config ok\n" {
		t.Fatalf("config.yaml: exit %d\n%s%s", rc, stdout.String(), stderr.String())
	}
	for _, want := range []string{"warning: upstream.api_key: explorer-sim's demo credentials", "warning: upstream.secret_key: explorer-sim's demo", "warning: upstream.passphrase: explorer-sim's demo"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("config.yaml: no %q in:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), sim.DemoSecretKey) {
		t.Errorf("the demo secret is printed:\n%s", stderr.String())
	}

	dir := t.TempDir()
	placeholder := filepath.Join(dir, "placeholder.yaml")
	os.WriteFile(placeholder, []byte("upstream: {api_key: edge-prod, secret_key: REPLACE-ME-0123456789, passphrase: Change-Me-Now}\n"), 0o600)
	stdout.Reset()
	stderr.Reset()
	if rc := checkConfig(placeholder, &stdout, &stderr); rc != 0 {
		t.Fatalf("placeholders: exit %d\n%s", rc, stderr.String())
	}
	out := stderr.String()
	if !strings.Contains(out, "warning: upstream.secret_key: a placeholder") || !strings.Contains(out, "warning: upstream.passphrase: a placeholder") ||
		strings.Contains(out, "upstream.api_key") || strings.Contains(out, "0123456789") || strings.Contains(out, "Change-Me-Now") {
		t.Fatalf("placeholders:\n%s", out)
	}

	// A misspelled variable: the secret it meant is missing.
	t.Setenv("EDGE_UPSTREAM__SECRETKEY", "the-real-secret-value")
	missing := filepath.Join(dir, "missing.yaml")
	os.WriteFile(missing, []byte("upstream: {api_key: edge-prod, passphrase: p4ssphrase}\n"), 0o600)
	stdout.Reset()
	stderr.Reset()
	if rc := checkConfig(missing, &stdout, &stderr); rc != 1 {
		t.Fatalf("missing secret: exit %d\n%s", rc, stderr.String())
	}
	out = stderr.String()
	if !strings.Contains(out, "upstream: api_key, secret_key and passphrase are all required") ||
		!strings.Contains(out, "ignored, no config keys: EDGE_UPSTREAM__SECRETKEY") || strings.Contains(out, "the-real-secret-value") {
		t.Fatalf("the problem and the ignored variable beside it:\n%s", out)
	}
}

// TestStartSelfCheck: at start the edge asks the upstream one signed
// question; refused credentials are logged and make /readyz say so (503:
// nothing cached), and once the credentials are fixed by a reload the
// first good answer makes the pod ready again.
func TestStartSelfCheck(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	wrong := edgeFile{upstream: url, key: "not-the-key", secret: "00000000000000000000000000000000", pass: "not-the-passphrase"}
	e := startEdge(t, wrong)
	failed := 0
	for _, l := range e.logs.Lines(t, "") {
		if l["msg"] == "upstream self-check failed" && l["level"] == "ERROR" && strings.Contains(l["problems"].(string), "refused the credentials") {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d self-check failures logged, want 1:\n%s", failed, e.logs)
	}
	readyz := func() (int, string) {
		res, err := http.Get("http://" + e.file.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if status, body := readyz(); status != 503 || !strings.Contains(body, "upstream self-check failed") || !strings.Contains(body, "refused the credentials") {
		t.Fatalf("/readyz with refused credentials: %d %s", status, body)
	}
	right := demoEdge(url)
	right.listen, right.admin = e.file.listen, e.file.admin
	e.write(right.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	if status, code, _ := e.get(blocks); status != 200 || code != "0" {
		t.Fatalf("after the reload: %d %s", status, code)
	}
	if status, body := readyz(); status != 200 || strings.Contains(body, "self-check") {
		t.Fatalf("/readyz after a good answer: %d %s", status, body)
	}
}
