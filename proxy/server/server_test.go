package server

import "testing"

// TestRedactHeaders: the redaction holds on its own, for lines as fasthttp
// writes them without SecureErrorLogMessage (the request quoted whole).
func TestRedactHeaders(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := redactHeaders(in); got != want {
			t.Errorf("redactHeaders(%s)\n got %s\nwant %s", in, got, want)
		}
	}
	f(`error when reading request headers: invalid header value "a\x01b": buffer size=346, contents: "GET /x HTTP/1.1\r\nHost: edge\r\nSvc-Access-Key: k1\r\nSvc-Access-Sign: c2ln+/=\r\nAuthorization: Bearer t0k\r\nCookie: a=b; c=d\r\nX-Junk: a\x01b\r\n\r\n"`,
		`error when reading request headers: invalid header value (withheld): buffer size=346, contents: "GET /x HTTP/1.1\r\nHost: edge\r\nSvc-Access-Key: (withheld)\r\nSvc-Access-Sign: (withheld)\r\nAuthorization: (withheld)\r\nCookie: (withheld)\r\nX-Junk: a\x01b\r\n\r\n"`)
	f(`invalid header value "pa\"ss\x01": buffer size=1`, `invalid header value (withheld): buffer size=1`)
	// A quoted request cut at 200 bytes: the value runs to the end of the quote.
	f(`contents: "GET / HTTP/1.1\r\nSVC-ACCESS-PASSPHRASE: secr"..."et\r\n\r\n"`,
		`contents: "GET / HTTP/1.1\r\nSVC-ACCESS-PASSPHRASE: (withheld)"..."et\r\n\r\n"`)
	f(`The number of connections from 10.0.0.1 exceeds MaxConnsPerIP=5`, `The number of connections from 10.0.0.1 exceeds MaxConnsPerIP=5`)
}
