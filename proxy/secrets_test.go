package proxy

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"explorer-edge/internal/testkit"
)

// Credentials a client sends in its headers, each unique enough to grep.
const (
	leakKey    = "key-SECRET-0042"
	leakPass   = "pass-SECRET-4711"
	leakTS     = "2026-06-01T12:00:00.123Z"
	leakSign   = "c2lnbmF0dXJlLVNFQ1JFVC0wODE1PQ=="
	leakBearer = "bearer-SECRET-1234"
	leakCookie = "cookie-SECRET-9876"
)

// TestFasthttpLogHoldsNoSecrets: at debug level fasthttp's line about a
// request it could not parse quoted the request's headers, a replayable
// signature among them. Malformed requests carrying credentials in
// SVC-ACCESS-*, Authorization and Cookie headers are logged (the line is
// there) without any of them.
func TestFasthttpLogHoldsNoSecrets(t *testing.T) {
	h := newHarness(t)
	var logs testkit.LogBuffer
	h.log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.start()

	creds := "SVC-ACCESS-KEY: " + leakKey + "\r\nSVC-ACCESS-PASSPHRASE: " + leakPass +
		"\r\nSVC-ACCESS-TIMESTAMP: " + leakTS + "\r\nSVC-ACCESS-SIGN: " + leakSign +
		"\r\nAuthorization: Bearer " + leakBearer + "\r\nCookie: session=" + leakCookie + "\r\n"
	get := "GET /api/v5/chainx/block/block-list?chainShortName=chainx HTTP/1.1\r\nHost: edge\r\n"
	requests := map[string]string{
		"bad byte in another header": get + creds + "X-Junk: a\x01b\r\n\r\n",
		"bad byte in the passphrase": get + "SVC-ACCESS-PASSPHRASE: " + leakPass + "\x01\r\n" + creds + "\r\n",
		"bad byte in the signature":  get + "SVC-ACCESS-SIGN: " + leakSign + "\x7f\r\n" + creds + "\r\n",
		"bad byte in the cookie":     get + "Cookie: s=" + leakCookie + "\x00\r\n" + creds + "\r\n",
		"bad request line":           "GET /x HTTP/1.1 junk\r\n" + creds + "\r\n",
	}
	for name, req := range requests {
		c := dialEdge(t, h.addr)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.ReadAll(c) // the 400, then fasthttp closes the connection
		c.Close()
	}
	testkit.WaitFor(t, "fasthttp's lines", func() bool { return strings.Count(logs.String(), "error when serving connection") >= len(requests) })
	out := logs.String()
	for _, secret := range []string{leakKey, leakPass, leakTS, leakSign, leakBearer, leakCookie} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", out)
	}
}
