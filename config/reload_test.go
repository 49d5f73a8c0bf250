package config

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReloadRulesCoverEveryKey: every key of Config (walked by reflection
// over its koanf tags) is either applied by a reload or refused until a
// restart, and no rule names a key Config does not have. A key added to
// Config without a rule fails here.
func TestReloadRulesCoverEveryKey(t *testing.T) {
	rules := ReloadRules()
	keys := Keys()
	for _, k := range keys {
		if _, ok := rules[k]; !ok {
			t.Errorf("key %s is neither applied by a reload nor refused: give it a rule in reloadRules (config/reload.go) and a row in docs/operations.md, Reload", k)
		}
	}
	for k := range rules {
		if !slices.Contains(keys, k) {
			t.Errorf("reloadRules names %s, which is no key of Config", k)
		}
	}
}

// reloadDocRow is a row of the table in docs/operations.md, Reload:
// | `key` | applied | ... or | `key` | restart | ...
var reloadDocRow = regexp.MustCompile("^\\| `([a-z0-9_.\\[\\]]+)` \\| (applied|restart) \\|")

// TestReloadDocMatchesCode: docs/operations.md (Reload) lists every key
// with the rule the code applies, and no other.
func TestReloadDocMatchesCode(t *testing.T) {
	text, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## Reload\n")
	if !ok {
		t.Fatal("docs/operations.md has no section ## Reload")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	doc := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if m := reloadDocRow.FindStringSubmatch(line); m != nil {
			if _, twice := doc[m[1]]; twice {
				t.Errorf("docs/operations.md lists %s twice", m[1])
			}
			doc[m[1]] = m[2] == "applied"
		}
	}
	var want strings.Builder
	for _, k := range Keys() {
		applied, ok := reloadRules[k]
		word := map[bool]string{true: "applied", false: "restart"}[applied]
		fmt.Fprintf(&want, "| `%s` | %s |\n", k, word)
		got, listed := doc[k]
		switch {
		case !ok:
			continue // TestReloadRulesCoverEveryKey says so
		case !listed:
			t.Errorf("docs/operations.md (Reload) does not list %s (%s)", k, word)
		case got != applied:
			t.Errorf("docs/operations.md (Reload) says %s is %s; the code: %s", k, map[bool]string{true: "applied", false: "restart"}[got], word)
		}
	}
	for k := range doc {
		if _, ok := reloadRules[k]; !ok {
			t.Errorf("docs/operations.md (Reload) lists %s, which has no rule in the code", k)
		}
	}
	if t.Failed() {
		t.Logf("the code's table, in the doc's form:\n%s", want.String())
	}
}

// TestReloadRefusesRestartOnlyKeysByName: a reload that adds
// tracing.otlp_endpoint (set up once, at start) is refused naming it, with
// every other restart-only key it changes; one that changes only applied
// keys lists them, secrets by key and never by value.
func TestReloadRefusesRestartOnlyKeysByName(t *testing.T) {
	old := Default()
	old.Upstream.SecretKey = "old-secret-value-1234"
	next := old
	next.Tracing.OTLPEndpoint = "http://collector:4318"
	changed, err := ReloadChanges(&old, &next)
	if err == nil || err.Error() != "restart to change tracing.otlp_endpoint" {
		t.Fatalf("adding tracing.otlp_endpoint: %v, want refused naming it", err)
	}
	if !slices.Equal(changed, []string{"tracing.otlp_endpoint"}) {
		t.Fatalf("changed %v", changed)
	}

	next = old
	next.Listen = ":9090"
	next.Shared.LockWait = time.Second
	next.Upstream.Rate = 7 // applied, but the reload is refused whole
	_, err = ReloadChanges(&old, &next)
	if err == nil || err.Error() != "restart to change listen; restart to change shared.lock_wait" {
		t.Fatalf("restart-only keys: %v", err)
	}

	next = old
	next.Upstream.SecretKey = "new-secret-value-5678"
	next.Cache.TTL = map[string]PerClass{"block-list": {Head: 2 * time.Second}}
	next.Log.Level = "debug"
	next.Auth.Clients = []Client{{Name: "web"}}
	next.Chains = []string{"chainx", " trade_zone"} // case is no change
	changed, err = ReloadChanges(&old, &next)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"upstream.secret_key", "auth.clients", "cache.ttl", "log.level"}
	if !slices.Equal(changed, want) {
		t.Fatalf("changed %v, want %v", changed, want)
	}
	if s := fmt.Sprint(changed); strings.Contains(s, "secret-value") {
		t.Fatalf("a secret's value among the changed keys: %s", s)
	}

	// List items are named by index; their rules are the list's fields'.
	old.Upstream.Accounts = []Account{{Name: "mirror", BaseURL: "http://m:1", Rate: 1, Burst: 1}}
	next = old
	next.Upstream.Accounts = []Account{{Name: "mirror", BaseURL: "http://m:1", Rate: 5, Burst: 1}}
	if changed, err := ReloadChanges(&old, &next); err != nil || !slices.Equal(changed, []string{"upstream.accounts[0].rate"}) {
		t.Fatalf("account rate: %v %v", changed, err)
	}
	next.Upstream.Accounts = []Account{{Name: "mirror", BaseURL: "http://m:2", Rate: 1, Burst: 1}}
	if _, err := ReloadChanges(&old, &next); err == nil || err.Error() != "restart to change upstream.accounts[0].base_url" {
		t.Fatalf("account base_url: %v", err)
	}
	next.Upstream.Accounts = nil
	if _, err := ReloadChanges(&old, &next); err == nil || err.Error() != "restart to change upstream.accounts" {
		t.Fatalf("account removed: %v", err)
	}
}
