package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeConfig writes text to a config.yaml of its own and returns the path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const credentials = "upstream: {api_key: k, secret_key: s, passphrase: p}\n"

// TestDurationWithoutUnitIsRefused: a number where a duration goes (YAML
// 5, or "5" from the environment) is refused with the key and how to write
// it; mapstructure's weak typing took it as 5 nanoseconds. 0 needs no unit.
func TestDurationWithoutUnitIsRefused(t *testing.T) {
	t.Setenv("EDGE_UPSTREAM__API_KEY", "k")
	t.Setenv("EDGE_UPSTREAM__SECRET_KEY", "s")
	t.Setenv("EDGE_UPSTREAM__PASSPHRASE", "p")
	for _, c := range []struct{ name, yaml, env, key, want string }{
		{name: "yaml int", yaml: "upstream: {timeout: 5}\n", key: "upstream.timeout", want: "5s"},
		{name: "yaml float", yaml: "upstream: {retry_backoff: 0.5}\n", key: "upstream.retry_backoff", want: "0.5s"},
		{name: "yaml string", yaml: "server: {read_timeout: \"10\"}\n", key: "server.read_timeout", want: "10s"},
		{name: "environment", env: "5", key: "upstream.timeout", want: "5s"},
		{name: "ttl", yaml: "cache: {ttl: {block-list: {head: 2}}}\n", key: "cache.ttl.block-list.head", want: "2s"},
		{name: "one window", yaml: "cache: {stale_while_revalidate: 30}\n", key: "cache.stale_while_revalidate", want: "30s"},
		{name: "a class's window", yaml: "cache: {stale_while_revalidate: {head: 3}}\n", key: "cache.stale_while_revalidate.head", want: "3s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("EDGE_UPSTREAM__TIMEOUT", c.env)
			}
			cfg, err := Load(writeConfig(t, c.yaml))
			if err == nil {
				t.Fatalf("accepted; upstream.timeout %v, retry_backoff %v, server.read_timeout %v, swr %+v",
					cfg.Upstream.Timeout, cfg.Upstream.RetryBackoff, cfg.Server.ReadTimeout, cfg.Cache.StaleWhileRevalidate)
			}
			if msg := err.Error(); !strings.Contains(msg, c.key+":") || !strings.Contains(msg, "write "+c.want) {
				t.Fatalf("the error does not name %s and say \"write %s\":\n%v", c.key, c.want, err)
			}
		})
	}
	// 0 is 0 in any unit: accepted where 0 is a valid value.
	cfg, err := Load(writeConfig(t, "upstream: {budget_wait: 0}\ncache: {stale_if_error: 0, stale_while_revalidate: {head: 0, final: 0, volatile: 0, negative: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream.BudgetWait != 0 || cfg.Cache.StaleIfError != 0 || cfg.Cache.StaleWhileRevalidate.Final != 0 {
		t.Fatalf("0 not taken as 0: %v %v %+v", cfg.Upstream.BudgetWait, cfg.Cache.StaleIfError, cfg.Cache.StaleWhileRevalidate)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// A duration with a unit still reads as before.
	if cfg, err := Load(writeConfig(t, "upstream: {timeout: 1m30s}\n")); err != nil || cfg.Upstream.Timeout != 90*time.Second {
		t.Fatalf("1m30s: %v %v", cfg.Upstream.Timeout, err)
	}
}

// TestDecodeErrorsListEveryProblem: a file with several bad values gets one
// line per problem, each naming the file and the key path (never the top
// level as ”), the value and what was expected; a value set from the
// environment names its variable instead of the file.
func TestDecodeErrorsListEveryProblem(t *testing.T) {
	path := writeConfig(t, `upstream:
  api_key: k
  secret_key: s
  passphrase: p
  rate: "abc"
  burst: 2.5x
  timeout: 5
watch_config: maybe
server:
  read_timeout: fast
nope: 1
cache:
  ttl:
    block-list: {hed: 1s}
auth:
  clients:
    - {name: web, api_kye: x, rate: lots}
shared:
  redis_password: [a-list-password, b]
`)
	t.Setenv("EDGE_SERVER__MAX_CONNS", "many")
	_, err := Load(path)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		path + `: upstream.rate: "abc" is not a number`,
		path + `: upstream.burst: "2.5x" is not a whole number`,
		path + `: upstream.timeout: 5 has no unit`,
		path + `: watch_config: "maybe" is not true or false`,
		path + `: server.read_timeout: "fast" is not a duration`,
		path + `: nope: unknown key`,
		path + `: cache.ttl.block-list.hed: unknown key`,
		path + `: auth.clients[0].api_kye: unknown key`,
		path + `: auth.clients[0].rate: "lots" is not a number`,
		path + `: shared.redis_password: a list is not a string`,
		`EDGE_SERVER__MAX_CONNS: server.max_conns: "many" is not a whole number`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(msg, "''") || strings.Contains(msg, "a-list-password") {
		t.Errorf("names the top level '' or shows a secret")
	}
	if n := len(strings.Split(strings.TrimSpace(msg), "\n")); n != 11 {
		t.Errorf("%d lines for 11 problems", n)
	}
	if t.Failed() {
		t.Logf("the error:\n%s", msg)
	}
}

// TestUnknownEnvironmentIsIgnored: variables the kubelet injects for a
// Service named edge (EDGE_PORT, EDGE_SERVICE_HOST, ...) are no config
// keys: they are ignored, the config keys beside them still apply, and an
// unknown key in the file is still an error.
func TestUnknownEnvironmentIsIgnored(t *testing.T) {
	for k, v := range map[string]string{
		"EDGE_PORT":                  "tcp://10.0.0.7:8080",
		"EDGE_PORT_8080_TCP":         "tcp://10.0.0.7:8080",
		"EDGE_PORT_8080_TCP_ADDR":    "10.0.0.7",
		"EDGE_SERVICE_HOST":          "10.0.0.7",
		"EDGE_SERVICE_PORT_HTTP":     "8080",
		"EDGE_UPSTREAM__RATEE":       "5", // misspelled: warned about, not applied
		"EDGE_AUTH__CLIENTS__WEB__X": "1", // no such client field
		"EDGE_UPSTREAM__RATE":        "7",
	} {
		t.Setenv(k, v)
	}
	cfg, err := Load(writeConfig(t, credentials))
	if err != nil {
		t.Fatalf("service-link variables are fatal: %v", err)
	}
	if cfg.Upstream.Rate != 7 {
		t.Fatalf("EDGE_UPSTREAM__RATE not applied: %v", cfg.Upstream.Rate)
	}
	if _, err := Load(writeConfig(t, credentials+"port: 1\n")); err == nil || !strings.Contains(err.Error(), "port: unknown key") {
		t.Fatalf("an unknown key in the file: %v", err)
	}
}

// TestSecretsFromFiles: every secret can come from a file (a mounted
// Kubernetes Secret), trailing newline trimmed; a file changed is read again
// by the next Load (a reload); a value and its file in the same place are
// an error, while the environment's overrides the file's.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	secret := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	text := "upstream:\n" +
		"  api_key_file: " + secret("up-key", "file-up-key\n") + "\n" +
		"  secret_key_file: " + secret("up-secret", "file-up-secret\r\n") + "\n" +
		"  passphrase_file: " + secret("up-pass", "file-up-pass") + "\n" +
		"  accounts:\n" +
		"    - name: mirror\n      base_url: http://127.0.0.1:9\n      rate: 5\n      burst: 5\n" +
		"      api_key_file: " + secret("mirror-key", "file-mirror-key\n") + "\n" +
		"      secret_key_file: " + secret("mirror-secret", "file-mirror-secret\n") + "\n" +
		"      passphrase_file: " + secret("mirror-pass", "file-mirror-pass\n") + "\n" +
		"auth:\n  mode: signed\n  clients:\n" +
		"    - name: web\n" +
		"      api_key_file: " + secret("web-key", "file-web-key\n") + "\n" +
		"      secret_key_file: " + secret("web-secret", "file-web-secret\n") + "\n" +
		"      passphrase_file: " + secret("web-pass", "file-web-pass\n") + "\n" +
		"shared:\n" +
		"  redis_username_file: " + secret("redis-user", "file-redis-user\n") + "\n" +
		"  redis_password_file: " + secret("redis-pass", "file-redis-pass\n") + "\n"
	path := writeConfig(t, text)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	u, cl, sh := cfg.Upstream, cfg.Auth.Clients[0], cfg.Shared
	got := []string{u.APIKey, u.SecretKey, u.Passphrase, cl.APIKey, cl.SecretKey, cl.Passphrase, sh.RedisUsername, sh.RedisPassword}
	want := []string{"file-up-key", "file-up-secret", "file-up-pass", "file-web-key", "file-web-secret", "file-web-pass", "file-redis-user", "file-redis-pass"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("secrets %q, want %q", got, want)
	}
	if a := cfg.Upstream.Accounts[0]; a.APIKey != "file-mirror-key" || a.SecretKey != "file-mirror-secret" || a.Passphrase != "file-mirror-pass" {
		t.Fatalf("an account's secrets from files: %q %q %q", a.APIKey, a.SecretKey, a.Passphrase)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	// Rotated: the next Load (what SIGHUP runs) reads the new one.
	secret("up-secret", "rotated-up-secret\n")
	secret("web-pass", "rotated-web-pass\n")
	if cfg, err = Load(path); err != nil || cfg.Upstream.SecretKey != "rotated-up-secret" || cfg.Auth.Clients[0].Passphrase != "rotated-web-pass" {
		t.Fatalf("after rotation: %q %q %v", cfg.Upstream.SecretKey, cfg.Auth.Clients[0].Passphrase, err)
	}

	// The environment names files too, and overrides the file's value.
	t.Setenv("EDGE_UPSTREAM__SECRET_KEY_FILE", secret("env-secret", "env-up-secret\n"))
	t.Setenv("EDGE_AUTH__CLIENTS__WEB__SECRET_KEY_FILE", secret("env-web", "env-web-secret\n"))
	if cfg, err = Load(writeConfig(t, "upstream: {api_key: k, secret_key: file-value, passphrase: p}\n"+
		"auth: {clients: [{name: web, api_key: w, secret_key: file-web-value, passphrase: wp}]}\n")); err != nil ||
		cfg.Upstream.SecretKey != "env-up-secret" || cfg.Auth.Clients[0].SecretKey != "env-web-secret" {
		t.Fatalf("env file over the file's value: %q %q %v", cfg.Upstream.SecretKey, cfg.Auth.Clients[0].SecretKey, err)
	}
	os.Unsetenv("EDGE_UPSTREAM__SECRET_KEY_FILE")
	os.Unsetenv("EDGE_AUTH__CLIENTS__WEB__SECRET_KEY_FILE")

	// Both in the file: refused, naming both keys. A missing or empty
	// file: refused, naming the key and the path, never a secret.
	for _, c := range []struct{ yaml, want string }{
		{"upstream: {api_key: k, secret_key: inline-secret, secret_key_file: " + secret("s", "x\n") + ", passphrase: p}\n",
			"upstream.secret_key and upstream.secret_key_file are both set"},
		{"upstream: {api_key: k, secret_key: s, passphrase_file: " + filepath.Join(dir, "missing") + "}\n",
			"upstream.passphrase_file: open " + filepath.Join(dir, "missing")},
		{credentials + "shared: {redis_password_file: " + secret("empty", "\n") + "}\n",
			"shared.redis_password_file: " + filepath.Join(dir, "empty") + " is empty"},
	} {
		_, err := Load(writeConfig(t, c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "inline-secret") {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// TestAccountsValidated: every problem of upstream.accounts is named.
func TestAccountsValidated(t *testing.T) {
	cfg := Default()
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = "k", "s", "p"
	cfg.Upstream.Accounts = []Account{
		{Name: "default", BaseURL: "http://a:1", APIKey: "k", SecretKey: "s", Passphrase: "p", Rate: 1, Burst: 1},
		{Name: "m", BaseURL: "ftp://a", APIKey: "k", SecretKey: "s", Passphrase: "p", Rate: 1, Burst: 1},
		{Name: "m", BaseURL: "http://b:1", Rate: 0, Burst: 0},
		{BaseURL: "http://c:1", APIKey: "k", SecretKey: "s", Passphrase: "p", Rate: 1, Burst: 1},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("bad accounts accepted")
	}
	for _, want := range []string{
		`upstream.accounts[0].name: "default" used twice`,
		`upstream.accounts[1].base_url: "ftp://a"`,
		`upstream.accounts[2].name: "m" used twice`,
		`upstream.accounts[2] (m): api_key, secret_key and passphrase are all required`,
		`upstream.accounts[2] (m): rate must be > 0 and burst >= 1`,
		`upstream.accounts[3].name: required`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
}
