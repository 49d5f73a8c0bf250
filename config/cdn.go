package config

import (
	"net/url"
	"strings"
	"time"
)

// CDN is the edge as the origin of a CDN (docs/cdn.md): the tags every
// answer carries in the header the CDN reads, the lifetimes it is given
// apart from browsers', and the purges carried to it. Everything is off
// by default: with tag_header empty the answers are as they were, and with
// provider empty no purge leaves the fleet.
type CDN struct {
	// TagHeader names the header the CDN reads an answer's tags from:
	// Surrogate-Key (Fastly), xkey (Varnish with the xkey module),
	// Cache-Tag (Cloudflare), Edge-Cache-Tag (Akamai), or any header
	// name. Empty: no tags and no CDN-Cache-Control, answers as without a
	// CDN. Tags are space-separated, comma-separated for Cache-Tag and
	// Edge-Cache-Tag (what those CDNs split on).
	TagHeader string `koanf:"tag_header"`
	// TagPrefix begins every tag, so that two deployments purging one
	// CDN account (a Cloudflare zone) do not purge each other's answers.
	TagPrefix string `koanf:"tag_prefix"`
	// BrowserTTL bounds how long a browser keeps an answer fresh
	// (Cache-Control max-age), counted from when the edge sent it: a
	// browser cannot be purged, the CDN can, so with tag_header set the CDN
	// is given the answer's whole lifetime in CDN-Cache-Control and
	// browsers at most this, and no `immutable`. 0: browsers as the CDN.
	BrowserTTL time.Duration `koanf:"browser_ttl"`

	// Provider is where purges go: varnish, fastly, cloudflare, webhook;
	// empty: none. One node of the fleet at a time sends them (a lease in
	// Redis), from the fleet's purge log.
	Provider string `koanf:"provider"`
	// Endpoints: varnish, the URL of each cache (a PURGE goes to every
	// one); webhook, the one URL purges are POSTed to; fastly and
	// cloudflare, the API's base URL (default the provider's own; set for
	// a test double).
	Endpoints []string `koanf:"endpoints"`
	// Service is Fastly's service id or Cloudflare's zone id.
	Service string `koanf:"service"`
	// APIToken is Fastly's API token (Fastly-Key), Cloudflare's API token
	// (Authorization: Bearer), or the webhook's bearer token; never logged
	// or shown. APITokenFile reads it from a file instead.
	APIToken     string `koanf:"api_token"`
	APITokenFile string `koanf:"api_token_file"`
	// Soft sends soft purges as soft (Varnish xkey-softpurge, Fastly
	// Fastly-Soft-Purge): the CDN keeps the answer stale and revalidates.
	// false: every purge reaches the CDN hard. Cloudflare has no soft
	// purge by tag: always hard there.
	Soft bool `koanf:"soft"`
	// ResendAfter sends each purge a second time this long after the
	// first acknowledgement: a tiered CDN's lower tier may refill from a
	// shield that had not purged yet. 0: once.
	ResendAfter time.Duration `koanf:"resend_after"`
	// Rate and Burst are the token bucket of the provider's API, in
	// requests per second (Cloudflare: 5 per minute on its Free plan is
	// rate 0.083, burst 5); Retry-After from the provider is honoured on
	// top.
	Rate  float64 `koanf:"rate"`
	Burst int     `koanf:"burst"`
	// BatchTags bounds the tags of one request (0: the provider's limit:
	// Cloudflare 100, Fastly 256, Varnish and webhook 100).
	BatchTags int `koanf:"batch_tags"`
	// Timeout bounds one request to the provider.
	Timeout time.Duration `koanf:"timeout"`
	// Lease is how long the sender's lease in Redis lasts unrenewed: the
	// longest a purge waits when its sender dies.
	Lease time.Duration `koanf:"lease"`
	// HeadSpan is how far above the newest block seen a reorganization's
	// purge reaches at the CDN: the edge purges "from the fork up", a
	// CDN's tags need an end.
	HeadSpan int64 `koanf:"head_span"`
}

// CDNProviders are the values of cdn.provider.
var CDNProviders = []string{"varnish", "fastly", "cloudflare", "webhook"}

// CDNDefaults are the cdn section's defaults.
func CDNDefaults() CDN {
	return CDN{TagPrefix: "ee-", BrowserTTL: time.Minute, ResendAfter: 10 * time.Second, Rate: 10, Burst: 10,
		Timeout: 10 * time.Second, Lease: 10 * time.Second, HeadSpan: 64}
}

// MaxTagPrefix bounds cdn.tag_prefix: the longest tag (a hash's) stays
// within 128 characters, the strictest CDN's limit.
const MaxTagPrefix = 16

// CDNTagSeparator is what the CDN reading header splits tags on.
func CDNTagSeparator(header string) byte {
	switch strings.ToLower(header) {
	case "cache-tag", "edge-cache-tag":
		return ','
	}
	return ' '
}

func (c *Config) checkCDN(v *validator) {
	d := &c.CDN
	if d.TagHeader != "" && !headerToken(d.TagHeader) {
		v.bad("cdn.tag_header: %q is not a header name", d.TagHeader)
	}
	if len(d.TagPrefix) > MaxTagPrefix || !tagChars(d.TagPrefix) {
		v.bad("cdn.tag_prefix: at most %d of a-z, 0-9, '-', '_', got %q", MaxTagPrefix, d.TagPrefix)
	}
	v.nonNegative("cdn.browser_ttl", d.BrowserTTL)
	if d.Provider == "" {
		return
	}
	known := false
	for _, p := range CDNProviders {
		known = known || d.Provider == p
	}
	if !known {
		v.bad("cdn.provider: %q is not one of %s", d.Provider, strings.Join(CDNProviders, ", "))
		return
	}
	if d.TagHeader == "" {
		v.bad("cdn.provider: %s purges by tag: set cdn.tag_header (%s)", d.Provider, map[string]string{
			"varnish": "xkey", "fastly": "Surrogate-Key", "cloudflare": "Cache-Tag", "webhook": "the header your CDN reads"}[d.Provider])
	}
	switch d.Provider {
	case "varnish", "webhook":
		if len(d.Endpoints) == 0 {
			v.bad("cdn.endpoints: %s needs at least one URL", d.Provider)
		}
		if d.Provider == "webhook" && len(d.Endpoints) > 1 {
			v.bad("cdn.endpoints: webhook takes one URL, got %d", len(d.Endpoints))
		}
	case "fastly", "cloudflare":
		if len(d.Endpoints) > 1 {
			v.bad("cdn.endpoints: %s takes at most one API base URL, got %d", d.Provider, len(d.Endpoints))
		}
		if d.Service == "" {
			v.bad("cdn.service: %s needs its %s", d.Provider, map[string]string{"fastly": "service id", "cloudflare": "zone id"}[d.Provider])
		}
		if d.APIToken == "" {
			v.bad("cdn.api_token: %s needs an API token (or cdn.api_token_file)", d.Provider)
		}
	}
	for i, e := range d.Endpoints {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			v.bad("cdn.endpoints[%d]: %q is not an http(s) URL without user info", i, redactUserInfo(e))
		}
	}
	if d.Rate <= 0 || d.Burst < 1 {
		v.bad("cdn.rate, cdn.burst: must be > 0 and >= 1, got %v, %d", d.Rate, d.Burst)
	}
	if d.BatchTags < 0 || d.BatchTags > 1000 {
		v.bad("cdn.batch_tags: must be within 0..1000, got %d", d.BatchTags)
	}
	v.nonNegative("cdn.resend_after", d.ResendAfter)
	v.positive("cdn.timeout", d.Timeout)
	v.positive("cdn.lease", d.Lease)
	if d.HeadSpan < 0 {
		v.bad("cdn.head_span: must not be negative, got %d", d.HeadSpan)
	}
}

// headerToken reports whether s is an HTTP field name (RFC 9110 token).
func headerToken(s string) bool {
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// tagChars reports whether s is made of the characters every CDN takes in
// a tag.
func tagChars(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// redactUserInfo drops what is before an '@' of a URL that does not parse.
func redactUserInfo(s string) string {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		if j := strings.Index(s, "//"); j >= 0 && j < i {
			return s[:j+2] + "xxxxx@" + s[i+1:]
		}
		return "xxxxx@" + s[i+1:]
	}
	return s
}
