package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"explorer-edge/sim"
)

// purgeCLI runs "explorer-edge purge args..." and returns its exit status and output.
func purgeCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := purgeCmd(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestPurgeCommand runs the purge subcommand against a running edge: each
// selector purges what it names, and the next request is a miss.
func TestPurgeCommand(t *testing.T) {
	s, url, _ := startSim(t, sim.Faults{})
	const token = "cli-purge-token-0123456789abcdef"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := demoEdge(url)
	f.rest = "admin:\n  purge_token_file: " + tokenFile
	e := startEdge(t, f)
	admin := "http://" + e.file.admin
	cacheStatus := func(target string) string {
		status, code, h := e.get(target)
		if status != 200 || code != "0" {
			t.Fatalf("%s: %d %s", target, status, code)
		}
		return h.Get("Cache-Status")
	}
	final := s.FinalizedHeight("CHAINX")
	txs := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", final-2)
	hash := s.CrossHashes("CHAINX", 1)[0]
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=CHAINX&txid=" + hash
	for _, c := range []struct {
		target string
		args   []string
		want   string
	}{
		{blocks, []string{"-url", strings.Replace(blocks, "chainx&", "CHAINX&page=1&", 1)}, "purged (hard, by url): 1 entries in memory, 0 in Redis"},
		{txs, []string{"-chain", "chainx", "-from", fmt.Sprint(final - 3), "-to", fmt.Sprint(final - 1), "-soft"}, "purged (soft, by heights): "},
		{fills, []string{"-hash", hash, "-chain", "CHAINX"}, "purged (hard, by hash): 2 entries"},
		// A settled page: a head block list is fresh for a second, and on a
		// loaded machine its refresh could be under way at the purge.
		{txs, []string{"-route", "transaction-list", "-chain", "chainx"}, "purged (hard, by route): 1 entries"},
		{txs, []string{"-all"}, "purged (hard, by all):"},
	} {
		cacheStatus(c.target)
		if cs := cacheStatus(c.target); !strings.Contains(cs, "hit") {
			t.Fatalf("%s not cached: %q", c.target, cs)
		}
		code, out, errOut := purgeCLI(append([]string{"-admin", admin, "-token-file", tokenFile}, c.args...)...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("purge %q: exit %d, %q %q; want %q", c.args, code, out, errOut, c.want)
		}
		want := "fwd=miss"
		if strings.Contains(c.want, "soft") {
			want = "stale-while-revalidate"
		}
		if cs := cacheStatus(c.target); !strings.Contains(cs, want) {
			t.Fatalf("%s after purge %q: %q, want %s", c.target, c.args, cs, want)
		}
	}

	// The token from the environment; -json prints the answer.
	t.Setenv("EDGE_ADMIN__PURGE_TOKEN", token)
	if code, out, _ := purgeCLI("-admin", admin, "-all", "-json"); code != 0 || !strings.HasPrefix(out, `{"code":"0"`) {
		t.Fatalf("-json: exit %d %q", code, out)
	}
	// Refusals: exit 1 with the edge's message, and nothing of the token.
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("not-the-token-at-all-0123456789"), 0o600)
	if code, out, errOut := purgeCLI("-admin", admin, "-token-file", wrong, "-all"); code != 1 || !strings.Contains(errOut, "HTTP 401") || strings.Contains(out+errOut, "not-the-token") {
		t.Fatalf("wrong token: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := purgeCLI("-admin", admin, "-route", "blocks"); code != 1 || !strings.Contains(errOut, "Parameter route") {
		t.Fatalf("unknown route: exit %d %q", code, errOut)
	}
	// Usage errors never reach the edge.
	for _, args := range [][]string{{}, {"-all", "-route", "block-list"}, {"-hash", hash}, {"-chain", "chainx", "-from", "1"}, {"-all", "-chain", "chainx"}, {"stray"}} {
		if code, _, errOut := purgeCLI(append([]string{"-admin", admin}, args...)...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("purge %q: exit %d %q, want a usage error", args, code, errOut)
		}
	}
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if n := e.metric("explorer_edge_purges_total"); n != 6 {
		t.Fatalf("purges_total = %v, want 6 (5 selectors and -json; refusals are not purges)", n)
	}
}
