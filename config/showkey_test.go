package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestShownKey(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "",
		"abc":                  "xxxxx",
		"abcdefg":              "a…",
		"abcdefgh":             "ab…",
		"web-key-0123456789ab": "web-…",
		"é-key-0123456789":     "é-k…",
		"ééééééé":              "é…", // 14 bytes: a cut inside a rune steps back
	} {
		if got := ShownKey(in); got != want {
			t.Errorf("ShownKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRedactedShowsKeysByPrefix: no api key (the upstream's, an account's,
// a client's, one read from a *_file) appears whole in Redacted, as a
// value or inside another; each shows its first 4 characters and "…".
func TestRedactedShowsKeysByPrefix(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "api_key")
	if err := os.WriteFile(keyFile, []byte("FILE-client-api-key-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `upstream:
  api_key: UPST-upstream-api-key-0123456789
  secret_key: s
  passphrase: p
  accounts:
    - {name: second, base_url: "http://second.example", rate: 5, burst: 5, api_key: ACCT-account-api-key-0123456789, secret_key: s2, passphrase: p2}
auth:
  mode: signed
  clients:
    - {name: web, api_key: CLNT-client-api-key-0123456789, secret_key: 0123456789abcdef0123456789abcdef, passphrase: pp}
    - {name: file, api_key_file: `+keyFile+`, secret_key: 0123456789abcdef0123456789abcdeX, passphrase: pq}
shared:
  prefix: "edge:CLNT-client-api-key-0123456789:"
`)
	c, err := Check(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, k := range []string{"UPST-upstream-api-key-0123456789", "ACCT-account-api-key-0123456789", "CLNT-client-api-key-0123456789", "FILE-client-api-key-0123456789", "api-key-0123456789"} {
		if strings.Contains(out, k) {
			t.Errorf("Redacted shows %s:\n%s", k, out)
		}
	}
	for _, want := range []string{`"api_key":"UPST…"`, `"api_key":"ACCT…"`, `"api_key":"CLNT…"`, `"api_key":"FILE…"`, `"prefix":"edge:xxxxx:"`} {
		if !strings.Contains(out, want) {
			t.Errorf("Redacted lacks %s:\n%s", want, out)
		}
	}
}
