package proxy

import (
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// behindCDN puts the edge behind a CDN reading tags from header.
func behindCDN(header string) harnessOpt {
	return func(c *config.Config, _ *sim.Config) {
		c.CDN.TagHeader = header
		c.CDN.BrowserTTL = time.Minute
	}
}

// TestCDNHeaders: behind a CDN every answer carries its tags in the
// header the CDN reads and its lifetimes apart: the CDN the whole
// lifetime (CDN-Cache-Control, and Cloudflare's own beside Cache-Tag), a
// browser at most cdn.browser_ttl and never immutable (a purge must reach
// it at its next reload); on the miss and on the hit alike. Without
// cdn.tag_header the answers are as before.
func TestCDNHeaders(t *testing.T) {
	h := newHarness(t, behindCDN("Cache-Tag"))
	final := warmFinal(h)
	for i, r := range []resp{h.get(final), h.get(final)} {
		tags := strings.Split(r.header["Cache-Tag"], ",")
		want := []string{"ee-all", "ee-c-chainx", "ee-r-transaction-list", "ee-r-transaction-list-chainx", "ee-k-", "ee-b1-chainx-"}
		for _, w := range want {
			found := false
			for _, tag := range tags {
				found = found || strings.HasPrefix(tag, w)
			}
			if !found {
				t.Errorf("answer %d: Cache-Tag %q has no %s", i, r.header["Cache-Tag"], w)
			}
		}
		cdn, _ := cacheControl(r.header["Cdn-Cache-Control"])
		cf, _ := cacheControl(r.header["Cloudflare-Cdn-Cache-Control"])
		browser, _ := cacheControl(r.header["Cache-Control"])
		if cdn != 86400 || cf != cdn || browser < 1 || browser > 60+int64(i) ||
			strings.Contains(r.header["Cache-Control"], "immutable") {
			t.Errorf("final answer %d: CDN-Cache-Control %q, Cloudflare's %q, Cache-Control %q: want the CDN 86400, a browser at most 60 s, not immutable",
				i, r.header["Cdn-Cache-Control"], r.header["Cloudflare-Cdn-Cache-Control"], r.header["Cache-Control"])
		}
	}
	// A head answer: its stale window goes to the CDN too.
	head := h.get("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=3")
	if cc := head.header["Cdn-Cache-Control"]; !strings.HasPrefix(cc, "max-age=1, stale-while-revalidate=") ||
		!strings.Contains(head.header["Cache-Tag"], "ee-r-block-list-chainx") {
		t.Errorf("head answer: CDN-Cache-Control %q, Cache-Tag %q", cc, head.header["Cache-Tag"])
	}

	off := newHarness(t)
	r := off.get(warmFinal(off))
	if _, ok := r.header["Cdn-Cache-Control"]; ok || r.header["Cache-Tag"] != "" || !strings.HasSuffix(r.header["Cache-Control"], ", immutable") {
		t.Errorf("without cdn.tag_header: %v", r.header)
	}
}

// TestCDNTagsSpaceSeparated: Surrogate-Key (Fastly) and xkey (Varnish)
// split on spaces; Fastly reads its lifetime from Surrogate-Control.
func TestCDNTagsSpaceSeparated(t *testing.T) {
	h := newHarness(t, behindCDN("Surrogate-Key"))
	r := h.get(warmFinal(h))
	if !strings.HasPrefix(r.header["Surrogate-Key"], "ee-all ee-c-chainx ") || r.header["Surrogate-Control"] != r.header["Cdn-Cache-Control"] ||
		r.header["Surrogate-Control"] == "" {
		t.Fatalf("Surrogate-Key %q, Surrogate-Control %q", r.header["Surrogate-Key"], r.header["Surrogate-Control"])
	}
}

// BenchmarkHitGzipCDN is BenchmarkHitGzip behind a CDN (cdn.tag_header
// Cache-Tag: the tags, CDN-Cache-Control and Cloudflare's): what the
// headers cost a hit, beside BenchmarkHitGzip.
func BenchmarkHitGzipCDN(b *testing.B) {
	h := newHarness(b, behindCDN("Cache-Tag"))
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	if r := h.get(target); r.status != 200 || r.header["Cache-Tag"] == "" {
		b.Fatalf("warm: %d %v", r.status, r.header)
	}
	parallelHits(b, h.p, "/api/v5/chainx/block/block-list?limit=20&chainShortName=ChainX&page=1", "Accept-Encoding", "gzip")
}
