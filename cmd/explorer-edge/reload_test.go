package main

import (
	"encoding/json"
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
