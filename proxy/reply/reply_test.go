package reply

import "testing"

// TestAcceptsGzip: Accept-Encoding read as RFC 9110 section 12.5.3 does.
func TestAcceptsGzip(t *testing.T) {
	f := func(v string, want bool) {
		t.Helper()
		if got := AcceptsGzip([]byte(v)); got != want {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", v, got, want)
		}
	}
	f("gzip", true)
	f("GZIP", true)
	f("x-gzip", true)
	f("gzip;q=1.0", true)
	f("br;q=1.0, gzip;q=0.8, *;q=0.1", true)
	f("deflate, gzip", true)
	f("*", true)
	f("gzip ; q=0.001", true)
	f("gzip;q=0", false)
	f("gzip;q=0.000", false)
	f("gzip; Q=0.0, br", false)
	f("*;q=0", false)
	f("br, *;q=0.5, gzip;q=0", false)
	f("identity", false)
	f("br, deflate", false)
	f("", false)
	f("gzipx", false)
	f(",,;", false)
}
