package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"explorer-edge/sim"
)

// inspectCLI runs "explorer-edge inspect args..." and returns its exit
// status and output.
func inspectCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := inspectCmd(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestInspectCommand runs the inspect subcommand against a running edge:
// -url tells what the edge holds for a request, -top the most-asked keys,
// -config the configuration in force (no secret in it), its hash (the one
// config_hash_info carries) and the outcome of the last SIGHUP.
func TestInspectCommand(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	const token = "cli-inspect-token-0123456789abcdef"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := demoEdge(url)
	f.rest = "admin:\n  purge_token_file: " + tokenFile + "\n  top_sample: 1"
	e := startEdge(t, f)
	admin := "http://" + e.file.admin
	run := func(args ...string) map[string]any {
		t.Helper()
		code, out, errOut := inspectCLI(append([]string{"-admin", admin, "-token-file", tokenFile}, args...)...)
		var env struct {
			Code string           `json:"code"`
			Data []map[string]any `json:"data"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &env) != nil || env.Code != "0" || len(env.Data) != 1 {
			t.Fatalf("inspect %q: exit %d\n%s\n%s", args, code, out, errOut)
		}
		if !strings.Contains(out, "\n  ") {
			t.Errorf("inspect %q: not indented:\n%s", args, out)
		}
		return env.Data[0]
	}
	key := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&page=1&limit=5"
	if got := run("-url", blocks); got["key"] != key || got["state"] != "miss" || got["entry"] != nil {
		t.Fatalf("-url before any ask: %v", got)
	}
	e.get(blocks)
	e.get(blocks)
	got := run("-url", strings.Replace(blocks, "chainx&", "ChainX&page=1&", 1))
	entry, _ := got["entry"].(map[string]any)
	// Made of the blocks of the page of 100 the first ask fetched
	// (cache.block_pages, on by default): source "blocks".
	if got["key"] != key || entry["source"] != "blocks" || entry["class"] != "head" || entry["etag"] == "" {
		t.Fatalf("-url after two asks: %v", got)
	}
	top := run("-top", "3")
	keys, _ := top["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["key"] != key || keys[0].(map[string]any)["requests"] != 2.0 {
		t.Fatalf("-top 3: %v", top)
	}

	conf := func() (map[string]any, string) {
		t.Helper()
		code, out, errOut := inspectCLI("-admin", admin, "-token-file", tokenFile, "-config")
		if code != 0 {
			t.Fatalf("-config: exit %d %s", code, errOut)
		}
		// The api key too: a prefix at most.
		for _, secret := range []string{sim.DemoSecretKey, sim.DemoPassphrase, token, sim.DemoAPIKey} {
			if strings.Contains(out, secret) {
				t.Fatalf("-config shows a secret (%.6s...):\n%s", secret, out)
			}
		}
		return run("-config"), out
	}
	c, _ := conf()
	hash, _ := c["hash"].(string)
	if len(hash) != 64 || c["last_reload"] != nil || e.metric("explorer_edge_config_hash_info", "hash", hash) != 1 {
		t.Fatalf("-config at start: hash %q last_reload %v", hash, c["last_reload"])
	}
	started := e.metric("explorer_edge_config_last_reload_success_timestamp_seconds")
	if started <= 0 {
		t.Fatalf("config_last_reload_success_timestamp_seconds = %v", started)
	}

	// A reload refused: its reason in -config; the hash stays.
	moved := e.file
	moved.listen = freeAddr(t)
	e.write(moved.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("error", 1)
	c, _ = conf()
	last, _ := c["last_reload"].(map[string]any)
	if c["hash"] != hash || last["result"] != "error" || !strings.Contains(fmt.Sprint(last["error"]), "restart to change listen") {
		t.Fatalf("-config after a refused reload: hash %v last_reload %v", c["hash"], last)
	}
	// A reload applied: a new hash, in the metric too.
	changed := e.file
	changed.rest += "\nlog:\n  level: debug"
	e.write(changed.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("ok", 1)
	c, _ = conf()
	last, _ = c["last_reload"].(map[string]any)
	newHash, _ := c["hash"].(string)
	if newHash == hash || last["result"] != "ok" || e.metric("explorer_edge_config_hash_info", "hash", newHash) != 1 ||
		e.metric("explorer_edge_config_hash_info") != 1 {
		t.Fatalf("-config after a reload: hash %v (was %s) last_reload %v", newHash, hash, last)
	}
	if ts := e.metric("explorer_edge_config_last_reload_success_timestamp_seconds"); ts < started {
		t.Fatalf("config_last_reload_success_timestamp_seconds went back: %v < %v", ts, started)
	}

	// Refusals: exit 1 with the edge's message.
	if code, _, errOut := inspectCLI("-admin", admin, "-token-file", tokenFile, "-url", "/api/v5/chainx/block/block-list?chainShortName=chainx&height=x"); code != 1 ||
		!strings.Contains(errOut, "HTTP 400: Parameter height error") {
		t.Fatalf("a bad url: exit %d %q", code, errOut)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("not-the-token-at-all-0123456789"), 0o600)
	if code, out, errOut := inspectCLI("-admin", admin, "-token-file", wrong, "-config"); code != 1 || !strings.Contains(errOut, "HTTP 401") || strings.Contains(out+errOut, "not-the-token") {
		t.Fatalf("wrong token: exit %d %q %q", code, out, errOut)
	}
	// The token from the environment.
	t.Setenv("EDGE_ADMIN__PURGE_TOKEN", token)
	if code, out, _ := inspectCLI("-admin", admin, "-url", blocks); code != 0 || !strings.Contains(out, key) {
		t.Fatalf("token from the environment: exit %d %s", code, out)
	}
	// Usage errors never reach the edge.
	for _, args := range [][]string{{}, {"-url", blocks, "-config"}, {"-top", "3", "-url", blocks}, {"stray"}} {
		if code, _, errOut := inspectCLI(append([]string{"-admin", admin}, args...)...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("inspect %q: exit %d %q, want a usage error", args, code, errOut)
		}
	}
	// Dispatched from the command line.
	var out, errOut bytes.Buffer
	if code := cli([]string{"inspect", "-admin", admin, "-url", blocks}, &out, &errOut); code != 0 || !strings.Contains(out.String(), key) {
		t.Fatalf("explorer-edge inspect: exit %d %s %s", code, out.String(), errOut.String())
	}
}
