package config

import (
	"slices"
	"strings"
	"testing"

	"explorer-edge/sim"
)

// TestWarnings: explorer-sim's demo credentials and placeholder secrets
// are named by key, anywhere in the configuration, never by value; a real
// configuration has none.
func TestWarnings(t *testing.T) {
	if want := []string{sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase}; !slices.Equal(demoCredentials, want) {
		t.Fatalf("demoCredentials %v are not explorer-sim's %v", demoCredentials, want)
	}
	c := valid()
	if ws := Warnings(&c); len(ws) != 0 {
		t.Fatalf("warnings for real credentials: %v", ws)
	}
	c.Upstream.APIKey = sim.DemoAPIKey
	c.Upstream.Accounts = []Account{{Name: "m", SecretKey: "<replace me>"}}
	c.Auth.Clients = []Client{{Name: "web", Passphrase: "changeme-later"}}
	c.Shared.RedisPassword = "Change-Me-please"
	c.Admin.PurgeToken = "replace-with-a-long-token"
	c.Upstream.BaseURL = "http://replace.example" // not a credential
	ws := Warnings(&c)
	var keys []string
	for _, w := range ws {
		k, _, _ := strings.Cut(w, ": ")
		keys = append(keys, k)
	}
	want := []string{"upstream.api_key", "upstream.accounts[0].secret_key", "auth.clients[0].passphrase", "shared.redis_password", "admin.purge_token"}
	if !slices.Equal(keys, want) {
		t.Fatalf("warned of %v, want %v:\n%s", keys, want, strings.Join(ws, "\n"))
	}
	for _, v := range []string{sim.DemoAPIKey, "<replace me>", "changeme-later", "Change-Me-please", "replace-with"} {
		if strings.Contains(strings.Join(ws, "\n"), v) {
			t.Errorf("a value in the warnings: %q", v)
		}
	}
}
