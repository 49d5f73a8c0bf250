package config

import (
	"strings"
	"testing"
	"time"
)

// TestValidateRefusesMistakes: settings that cannot work are refused, each
// with a message naming its key: a base_url holding the API's path (every
// call would be /api/v5/api/v5/...), a port out of range in any address,
// and settings that contradict each other. Their neighbours that do work
// still pass.
func TestValidateRefusesMistakes(t *testing.T) {
	cases := []struct {
		name string
		set  func(*Config)
		want string // the message's beginning: key, then what
	}{
		{"base_url ends in the API's path", func(c *Config) { c.Upstream.BaseURL = "http://host/api/v5/" },
			`upstream.base_url: "http://host/api/v5/" holds the API's path /api/v5`},
		{"base_url ends in it without slash", func(c *Config) { c.Upstream.BaseURL = "https://host:8443/x/api/v5" },
			`upstream.base_url: "https://host:8443/x/api/v5" holds the API's path`},
		{"base_url below it", func(c *Config) { c.Upstream.BaseURL = "http://host/api/v5/chainx" },
			`upstream.base_url: "http://host/api/v5/chainx" holds the API's path`},
		{"an account's base_url", func(c *Config) {
			c.Upstream.Accounts = []Account{{Name: "m", BaseURL: "http://m/api/v5", APIKey: "k", SecretKey: "s", Passphrase: "p", Rate: 1, Burst: 1}}
		}, `upstream.accounts[0].base_url: "http://m/api/v5" holds the API's path`},
		{"base_url port", func(c *Config) { c.Upstream.BaseURL = "http://host:99999" },
			`upstream.base_url: "http://host:99999": port "99999" is out of range`},
		{"base_url port 0", func(c *Config) { c.Upstream.BaseURL = "http://host:0" },
			`upstream.base_url: "http://host:0": port "0" is out of range`},
		{"listen port", func(c *Config) { c.Listen = ":70000" }, `listen: ":70000": port "70000" is out of range`},
		{"admin_listen port", func(c *Config) { c.AdminListen = "127.0.0.1:65536" }, `admin_listen: "127.0.0.1:65536": port "65536" is out of range`},
		{"redis port", func(c *Config) { c.Shared.RedisAddr = "r1:6379, r2:123456" }, `shared.redis_addr: "r2:123456": port "123456" is out of range`},
		{"redis without port", func(c *Config) { c.Shared.RedisAddr = "r1:" }, `shared.redis_addr: "r1:" has no port`},
		{"retry_max_time under timeout", func(c *Config) { c.Upstream.RetryMaxTime = 2 * time.Second },
			"upstream.retry_max_time: 2s is shorter than upstream.timeout (5s)"},
		{"lock_wait over lock_ttl", func(c *Config) { c.Shared.RedisAddr = "r:6379"; c.Shared.LockWait = 11 * time.Second },
			"shared.lock_wait: 11s is longer than shared.lock_ttl (10s)"},
		{"* among origins", func(c *Config) { c.CORS.AllowOrigins = []string{"https://a.example", "*"} },
			`cors.allow_origins: "*" allows every origin; it cannot be mixed with listed origins`},
		{"swr over stale_if_error", func(c *Config) { c.Cache.StaleIfError = 20 * time.Second },
			"cache.stale_while_revalidate.final: 30s is longer than cache.stale_if_error (20s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.set(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			found := false
			for _, l := range lines {
				found = found || strings.HasPrefix(l, tc.want)
			}
			if !found {
				t.Fatalf("no line starts %q:\n%v", tc.want, err)
			}
		})
	}

	// What works still passes.
	ok := []func(*Config){
		func(c *Config) { c.Upstream.BaseURL = "http://host/explorer/" }, // a prefix of its own
		func(c *Config) { c.Upstream.BaseURL = "https://host" },
		func(c *Config) { c.Listen = "127.0.0.1:0" }, // any free port
		func(c *Config) { c.Upstream.RetryMaxTime = c.Upstream.Timeout },
		func(c *Config) { c.Shared.RedisAddr = "r:6379"; c.Shared.LockWait = c.Shared.LockTTL },
		func(c *Config) { c.CORS.AllowOrigins = []string{"*"} },
		func(c *Config) { c.Cache.StaleIfError = 30 * time.Second },
		func(c *Config) { c.Cache.StaleIfError = 0; c.Cache.StaleWhileRevalidate = PerClass{} },
	}
	for i, set := range ok {
		c := valid()
		set(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("case %d refused: %v", i, err)
		}
	}
}
