package config

import (
	"strings"
	"testing"
)

// TestCDNValidation: each bad cdn key is named in the error, the token is
// never quoted, and a complete setting of each provider passes.
func TestCDNValidation(t *testing.T) {
	base := func() Config {
		c := Default()
		c.Upstream.APIKey, c.Upstream.SecretKey, c.Upstream.Passphrase = "k-0123456789", "s-0123456789", "p-0123456789"
		return c
	}
	for _, tc := range []struct {
		name string
		set  func(*CDN)
		want []string // "" = valid
	}{
		{"off", func(*CDN) {}, nil},
		{"varnish", func(d *CDN) {
			d.TagHeader, d.Provider, d.Endpoints = "xkey", "varnish", []string{"http://v1:6081/", "http://v2:6081/"}
		}, nil},
		{"cloudflare", func(d *CDN) {
			d.TagHeader, d.Provider, d.Service, d.APIToken = "Cache-Tag", "cloudflare", "zone", "cf-secret-token"
		}, nil},
		{"header", func(d *CDN) { d.TagHeader = "Cache Tag" }, []string{"cdn.tag_header"}},
		{"prefix", func(d *CDN) { d.TagPrefix = "EE:" }, []string{"cdn.tag_prefix"}},
		{"provider", func(d *CDN) { d.TagHeader, d.Provider = "xkey", "akamai" }, []string{"cdn.provider", "akamai"}},
		{"no header", func(d *CDN) { d.Provider, d.Endpoints = "varnish", []string{"http://v:6081/"} }, []string{"cdn.provider", "cdn.tag_header"}},
		{"no endpoints", func(d *CDN) { d.TagHeader, d.Provider = "xkey", "varnish" }, []string{"cdn.endpoints"}},
		{"user info", func(d *CDN) {
			d.TagHeader, d.Provider, d.Endpoints = "xkey", "webhook", []string{"http://user:cf-secret-token@hook/"}
		}, []string{"cdn.endpoints[0]"}},
		{"cloudflare without zone or token", func(d *CDN) { d.TagHeader, d.Provider = "Cache-Tag", "cloudflare" }, []string{"cdn.service", "cdn.api_token"}},
		{"rate", func(d *CDN) {
			d.TagHeader, d.Provider, d.Endpoints, d.Rate = "xkey", "varnish", []string{"http://v:6081/"}, 0
		}, []string{"cdn.rate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.set(&c.CDN)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "cf-secret-token") {
				t.Errorf("the token is quoted: %v", err)
			}
		})
	}
}
