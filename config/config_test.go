package config

import (
	yaml "go.yaml.in/yaml/v3"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func valid() Config {
	c := Default()
	c.Upstream.APIKey, c.Upstream.SecretKey, c.Upstream.Passphrase = "k", "s", "p"
	return c
}

func TestDefaultsNeedOnlyCredentials(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with credentials: %v", err)
	}
	d := Default()
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "upstream: api_key") {
		t.Fatalf("defaults without credentials: %v", err)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	c := valid()
	c.Listen = "nope"
	c.Upstream.Rate = 0
	c.Upstream.Timeout = -time.Second
	c.Auth.Mode = "maybe"
	c.Cache.StaleIfError = -time.Second
	bl := c.Cache.TTL["block-list"]
	bl.Head = -time.Second
	c.Cache.TTL["block-list"] = bl
	c.Cache.TTL["no-such-route"] = c.Cache.TTL["block-list"]
	c.Server.MaxURLBytes = 10
	c.Server.MaxConnsPerIP = -1
	c.AdminMaxConns = 0
	c.Log.Level = "loud"
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"listen:", "upstream.rate", "upstream.timeout", "auth.mode", "cache.stale_if_error",
		"cache.ttl.block-list.head", "server.max_url_bytes", "server.max_conns_per_ip",
		"admin_max_conns", "log.level"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestLoadFileEnvAndTTLMerge(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte(`
listen: "127.0.0.1:9000"
upstream:
  api_key: file-key
  secret_key: file-secret
  passphrase: file-pass
cache:
  ttl:
    block-list: {head: 3s}
auth:
  mode: signed
  clients:
    - {name: web, api_key: wk, secret_key: "", passphrase: wp, rate: 5, burst: 10}
`), 0o600)
	t.Setenv("EDGE_UPSTREAM__SECRET_KEY", "env-secret")
	t.Setenv("EDGE_UPSTREAM__RATE", "7.5")
	t.Setenv("EDGE_CHAINS", "chainx,other")
	t.Setenv("EDGE_AUTH__CLIENTS__WEB__SECRET_KEY", "client-secret")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9000" || c.Upstream.APIKey != "file-key" || c.Upstream.SecretKey != "env-secret" || c.Upstream.Rate != 7.5 {
		t.Fatalf("file and env not applied: %+v", c.Upstream)
	}
	if len(c.Chains) != 2 || c.Chains[1] != "other" {
		t.Fatalf("chains from env: %v", c.Chains)
	}
	// cache.ttl holds the overrides; the route table's defaults fill the
	// rest (route.CheckConfig, TestRouteTableTTLs).
	if bl := c.Cache.TTL["block-list"]; bl.Head != 3*time.Second || bl.Final != 0 {
		t.Fatalf("ttl override: %+v", bl)
	}
	if cl := c.Auth.Clients; len(cl) != 1 || cl[0].SecretKey != "client-secret" || cl[0].Burst != 10 {
		t.Fatalf("clients: %+v", cl)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownKeysAreErrors(t *testing.T) {
	for _, y := range []string{
		"listne: ':1'\n",
		"upstream: {base_ur: 'http://x'}\n",
		"cache: {ttl: {block-list: {hed: 1s}}}\n",
		"auth: {clients: [{name: a, api_kye: x}]}\n",
	} {
		if _, err := Parse([]byte(y)); err == nil {
			t.Errorf("%q: no error", y)
		}
	}
}

func TestShippedConfigIsValid(t *testing.T) {
	c, err := Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The Kubernetes ConfigMap carries a config.yaml of its own; it must load
// and validate once the Secret's credentials are in the environment.
func TestDeployConfigMapIsValid(t *testing.T) {
	raw, err := os.ReadFile("../deploy/k8s/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_UPSTREAM__API_KEY", "k")
	t.Setenv("EDGE_UPSTREAM__SECRET_KEY", "s")
	t.Setenv("EDGE_UPSTREAM__PASSPHRASE", "p")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Shared.RedisAddr == "" {
		t.Fatal("the fleet ConfigMap does not turn on fleet mode")
	}
}

func TestRedact(t *testing.T) {
	t.Setenv("EDGE_SHARED__REDIS_PASSWORD", "env-redis-pw")
	t.Setenv("EDGE_AUTH__CLIENTS__WEB__PASSPHRASE", "web-pass")
	t.Setenv("EDGE_UPSTREAM__API_KEY", "not-a-secret") // identifies, is not secret
	f := func(in, want string) {
		t.Helper()
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	f(`dial redis://default:pw@10.0.0.1:6379: refused`, `dial redis://xxxxx@10.0.0.1:6379: refused`)
	f(`"rediss://:pw@h:1" and https://token@h/x`, `"rediss://xxxxx@h:1" and https://xxxxx@h/x`)
	f(`addr "default:pw@h:6379"`, `addr "xxxxx@h:6379"`)
	f(`auth failed for env-redis-pw and web-pass`, `auth failed for xxxxx and xxxxx`)
	f(`key not-a-secret`, `key not-a-secret`)
	f(`http://127.0.0.1:8900/api and [::1]:80 and a@b`, `http://127.0.0.1:8900/api and [::1]:80 and a@b`)
}

// TestValidateHoldsNoSecrets: Validate's messages never quote a secret
// value of the configuration, even one that ends up in another key.
func TestValidateHoldsNoSecrets(t *testing.T) {
	c := Default()
	c.Upstream.SecretKey, c.Upstream.Passphrase = "upstream-secret-value", "upstream-passphrase-value"
	c.Upstream.BaseURL = "ftp://edge:url-password@host/"
	c.Shared.RedisPassword = "redis-password-value"
	c.Shared.RedisAddr = "redis-password-value" // pasted into the wrong key
	c.Listen = "upstream-passphrase-value"      // ditto
	c.Auth.TrustedProxies = []string{"upstream-secret-value"}
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"upstream-secret-value", "upstream-passphrase-value", "url-password", "redis-password-value"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("Validate's message holds %q:\n%v", s, err)
		}
	}
	for _, key := range []string{"upstream.base_url", "shared.redis_addr", "listen", "auth.trusted_proxies"} {
		if !strings.Contains(err.Error(), key+":") {
			t.Errorf("Validate's message does not name %s:\n%v", key, err)
		}
	}
}

// TestDiskPath: cache.disk_path must be a directory the edge can create
// its file in (-check-config says so before a start would fail), and
// disk_max_bytes must bound it; empty, the disk tier is off and neither
// is checked.
func TestDiskPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	readOnly := t.TempDir()
	if os.Geteuid() == 0 { // root writes through permissions: a read-only mount
		readOnly = t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0700,size=1m,ro", "tmpfs", readOnly).CombinedOutput(); err != nil {
			readOnly = ""
			t.Logf("no read-only case: mount tmpfs not permitted: %v %s", err, out)
		} else {
			t.Cleanup(func() { exec.Command("umount", readOnly).Run() })
		}
	} else {
		os.Chmod(readOnly, 0o500)
		t.Cleanup(func() { os.Chmod(readOnly, 0o700) })
	}
	f := func(path string, maxBytes int64, want string) {
		t.Helper()
		c := valid()
		c.Cache.DiskPath, c.Cache.DiskMaxBytes = path, maxBytes
		err := c.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("disk_path %q, disk_max_bytes %d: %v", path, maxBytes, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("disk_path %q, disk_max_bytes %d: %v, want %q", path, maxBytes, err, want)
		}
	}
	dir := t.TempDir()
	f("", 0, "")
	f(dir, 1<<30, "")
	f(filepath.Join(dir, "missing"), 1<<30, "cache.disk_path: ")
	f(file, 1<<30, "not a directory")
	f(dir, 1000, "cache.disk_max_bytes")
	if readOnly != "" {
		f(readOnly, 1<<30, "is not a writable directory")
	}
	// A directory others can write to: they could plant disk.db there as
	// a symlink (docs/disk.md, The directory).
	for _, mode := range []os.FileMode{0o770, 0o757, 0o777 | os.ModeSticky} {
		shared := t.TempDir()
		os.Chmod(shared, mode)
		f(shared, 1<<30, "is writable by group or others")
	}
	if os.Geteuid() == 0 {
		theirs := t.TempDir()
		os.Chown(theirs, 65534, 65534)
		f(theirs, 1<<30, "is owned by uid 65534")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the check left %v in %s", entries, dir)
	}
}
