package sim

import (
	"net/http"
	"testing"
	"time"

	"explorer-edge/signer"
)

// TestAuth signs requests with the signer package (the method of the
// reference vectors, signer/signer_test.go) and checks every rejection
// code, in the documented order of checks (sim/README.md, Authentication).
func TestAuth(t *testing.T) {
	s := start(t, Config{Auth: true})
	demo := DemoCredentials()
	const q = "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1"
	now := signer.Timestamp(time.Now())
	c := client(t, 10*time.Second)

	// Hand-written vector: the signature is Base64(HMAC-SHA256(secret,
	// timestamp + "GET" + requestPath)), as signer/signer_test.go's vector
	// computes.
	if got := signer.Sign("22582BD0CFF14C41EDBF1AB98506286D", "2020-12-08T09:08:57.715Z", "GET", q); got != "2H8iYiiEbTqKdEuWC0WigfWKclsViuI9oemQM2kfnjQ=" {
		t.Fatalf("signer disagrees with the reference vector: %s", got)
	}

	cases := []struct {
		name   string
		mutate func(r *http.Request)
		code   string
	}{
		{"valid", func(r *http.Request) {}, "0"},
		{"no fraction digits", func(r *http.Request) { resign(r, demo, time.Now().UTC().Format("2006-01-02T15:04:05Z")) }, "0"},
		{"one fraction digit", func(r *http.Request) { resign(r, demo, time.Now().UTC().Format("2006-01-02T15:04:05.0Z")) }, "0"},
		{"missing key", func(r *http.Request) { r.Header.Del(signer.HeaderKey) }, "50103"},
		{"missing everything", func(r *http.Request) {
			for _, h := range []string{signer.HeaderKey, signer.HeaderPassphrase, signer.HeaderSign, signer.HeaderTimestamp} {
				r.Header.Del(h)
			}
		}, "50103"},
		{"missing passphrase", func(r *http.Request) { r.Header.Del(signer.HeaderPassphrase) }, "50104"},
		{"missing sign", func(r *http.Request) { r.Header.Del(signer.HeaderSign) }, "50106"},
		{"missing timestamp", func(r *http.Request) { r.Header.Del(signer.HeaderTimestamp) }, "50107"},
		{"wrong passphrase", func(r *http.Request) { r.Header.Set(signer.HeaderPassphrase, "guess") }, "50105"},
		{"unknown key", func(r *http.Request) { r.Header.Set(signer.HeaderKey, "someone-else") }, "50111"},
		{"unknown key before passphrase", func(r *http.Request) {
			r.Header.Set(signer.HeaderKey, "someone-else")
			r.Header.Set(signer.HeaderPassphrase, "guess")
		}, "50111"},
		{"malformed timestamp", func(r *http.Request) { resign(r, demo, "2026-01-01 00:00:00") }, "50112"},
		{"four fraction digits", func(r *http.Request) { resign(r, demo, time.Now().UTC().Format("2006-01-02T15:04:05.0000Z")) }, "50112"},
		{"timestamp 31s old", func(r *http.Request) { resign(r, demo, signer.Timestamp(time.Now().Add(-31*time.Second))) }, "50102"},
		{"timestamp 31s ahead", func(r *http.Request) { resign(r, demo, signer.Timestamp(time.Now().Add(31*time.Second))) }, "50102"},
		{"reference vector timestamp", func(r *http.Request) {
			resign(r, signer.Credentials{APIKey: demo.APIKey, Passphrase: demo.Passphrase, SecretKey: "22582BD0CFF14C41EDBF1AB98506286D"}, "2020-12-08T09:08:57.715Z")
		}, "50102"},
		{"wrong secret", func(r *http.Request) {
			resign(r, signer.Credentials{APIKey: demo.APIKey, Passphrase: demo.Passphrase, SecretKey: "not-the-secret"}, now)
		}, "50113"},
		{"signed over another query", func(r *http.Request) {
			r.Header.Set(signer.HeaderSign, signer.Sign(demo.SecretKey, now, "GET", "/api/v5/chainx/block/block-list?limit=1&chainShortName=chainx"))
		}, "50113"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := signed(t, s, q, demo, now)
			tc.mutate(req)
			a := do(t, c, req)
			code, msg, _ := a.envelope(t)
			wantStatus := 401
			if tc.code == "0" {
				wantStatus = 200
			}
			if code != tc.code || a.status != wantStatus {
				t.Fatalf("got %d %s %q, want %d %s", a.status, code, msg, wantStatus, tc.code)
			}
		})
	}

	// The signature covers the target exactly as sent: an encoded comma
	// signed as sent is accepted.
	hashes := s.CrossHashes("TRADE_ZONE", 2)
	encoded := "/api/v5/chainx/tz/cross/transaction-multi?txId=" + hashes[0] + "%2C" + hashes[1] + "&chainShortName=TRADE_ZONE"
	a := do(t, c, signed(t, s, encoded, demo, now))
	if data := a.ok(t); len(data) < 2 {
		t.Errorf("encoded comma: %d records", len(data))
	}

	if st := s.Stats(); st.AuthFailures != int64(len(cases)-3) {
		t.Errorf("auth_failures = %d, want %d", st.AuthFailures, len(cases)-3)
	}
}

// resign replaces the timestamp and signs again with creds.
func resign(r *http.Request, creds signer.Credentials, ts string) {
	r.Header.Set(signer.HeaderKey, creds.APIKey)
	r.Header.Set(signer.HeaderPassphrase, creds.Passphrase)
	r.Header.Set(signer.HeaderTimestamp, ts)
	r.Header.Set(signer.HeaderSign, signer.Sign(creds.SecretKey, ts, "GET", r.URL.RequestURI()))
}

// TestAuthOff: without Auth, unsigned requests are answered.
func TestAuthOff(t *testing.T) {
	s := start(t, Config{})
	get(t, s, "/api/v5/chainx/block/block-list?chainShortName=CHAINX").ok(t)
	on := start(t, Config{Auth: true})
	if a := get(t, on, "/api/v5/chainx/block/block-list?chainShortName=CHAINX"); a.status != 401 {
		t.Fatalf("unsigned request with auth on: %d", a.status)
	}
}

// TestCustomCredentials: the configured client is the only one accepted.
func TestCustomCredentials(t *testing.T) {
	mine := signer.Credentials{APIKey: "k", SecretKey: "s3cr3t", Passphrase: "p"}
	s := start(t, Config{Auth: true, Credentials: mine})
	const q = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=1"
	c := client(t, 10*time.Second)
	do(t, c, signed(t, s, q, mine, signer.Timestamp(time.Now()))).ok(t)
	if code, _, _ := do(t, c, signed(t, s, q, DemoCredentials(), signer.Timestamp(time.Now()))).envelope(t); code != "50111" {
		t.Errorf("demo key accepted by a server with other credentials: %s", code)
	}
}
