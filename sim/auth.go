package sim

import (
	"crypto/subtle"
	"net/http"
	"time"

	"explorer-edge/signer"
)

// authenticate checks the SVC-ACCESS-* headers as the explorer does, in this
// order: presence (key, passphrase, sign, timestamp), known key, passphrase,
// timestamp format, skew against the wall clock, signature. The signature
// covers timestamp + "GET" + the request target exactly as it arrived
// (r.RequestURI), so a client's encoding and parameter order are its own.
func (s *Server) authenticate(r *http.Request) *Error {
	key := r.Header.Get(signer.HeaderKey)
	pass := r.Header.Get(signer.HeaderPassphrase)
	sign := r.Header.Get(signer.HeaderSign)
	ts := r.Header.Get(signer.HeaderTimestamp)
	fail := func(code, msg string) *Error { return &Error{http.StatusUnauthorized, code, msg} }
	switch {
	case key == "":
		return fail(codeNoKey, "Request header "+signer.HeaderKey+" can not be empty")
	case pass == "":
		return fail(codeNoPassphrase, "Request header "+signer.HeaderPassphrase+" can not be empty")
	case sign == "":
		return fail(codeNoSign, "Request header "+signer.HeaderSign+" can not be empty")
	case ts == "":
		return fail(codeNoTimestamp, "Request header "+signer.HeaderTimestamp+" can not be empty")
	}
	creds := s.cfg.Credentials
	if subtle.ConstantTimeCompare([]byte(key), []byte(creds.APIKey)) != 1 {
		return fail(codeUnknownKey, "Invalid "+signer.HeaderKey)
	}
	if subtle.ConstantTimeCompare([]byte(pass), []byte(creds.Passphrase)) != 1 {
		return fail(codePassphrase, "Invalid "+signer.HeaderPassphrase)
	}
	t, err := signer.ParseTimestamp([]byte(ts))
	if err != nil {
		return fail(codeTimestamp, "Invalid "+signer.HeaderTimestamp+": "+err.Error())
	}
	if d := time.Since(t); d > MaxSkew || d < -MaxSkew {
		return fail(codeAuthExpired, "Timestamp request expired: "+signer.HeaderTimestamp+" is more than 30s from server time")
	}
	want := s.sign.AppendSign(nil, []byte(ts), []byte(http.MethodGet), []byte(r.RequestURI))
	if !signer.Equal(want, []byte(sign)) {
		return fail(codeSign, "Invalid "+signer.HeaderSign)
	}
	return nil
}
