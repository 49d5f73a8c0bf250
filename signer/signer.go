// Package signer computes and checks the SVC-ACCESS-* request signatures of the
// explorer API:
//
//	SVC-ACCESS-SIGN = Base64(HMAC-SHA256(secret, timestamp + method + requestPath + body))
//
// where requestPath is the path with its query string exactly as sent and the
// body is empty for GET. The timestamp is ISO 8601 UTC with milliseconds.
package signer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"sync"
	"time"
)

// Header names, as the explorer API spells them.
const (
	HeaderKey        = "SVC-ACCESS-KEY"
	HeaderSign       = "SVC-ACCESS-SIGN"
	HeaderPassphrase = "SVC-ACCESS-PASSPHRASE"
	HeaderTimestamp  = "SVC-ACCESS-TIMESTAMP"
)

// TimeLayout is the timestamp format the edge sends: UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Credentials identify one account of the explorer API.
type Credentials struct {
	APIKey     string
	SecretKey  string
	Passphrase string
}

// Signer signs requests with one set of credentials. It is safe for
// concurrent use; HMAC states are pooled so signing does not allocate them.
type Signer struct {
	creds Credentials
	pool  sync.Pool
}

// New returns a Signer for creds.
func New(creds Credentials) *Signer {
	s := &Signer{creds: creds}
	key := []byte(creds.SecretKey)
	s.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return s
}

// macState is a pooled HMAC with the buffer its sum is written to: a sum
// written through the hash.Hash interface escapes, so a buffer on the
// stack would cost an allocation per signature.
type macState struct {
	h   hash.Hash
	sum [sha256.Size]byte
}

// Credentials returns the credentials the signer uses.
func (s *Signer) Credentials() Credentials { return s.creds }

// AppendSign appends the base64 signature of (timestamp, method, requestPath)
// to dst and returns the extended slice.
func (s *Signer) AppendSign(dst []byte, timestamp, method, requestPath []byte) []byte {
	st := s.pool.Get().(*macState)
	m := st.h
	m.Reset()
	m.Write(timestamp)
	m.Write(method)
	m.Write(requestPath)
	dst = base64.StdEncoding.AppendEncode(dst, m.Sum(st.sum[:0]))
	s.pool.Put(st)
	return dst
}

// Sign returns the signature of a request as a string.
func (s *Signer) Sign(timestamp, method, requestPath string) string {
	return string(s.AppendSign(nil, []byte(timestamp), []byte(method), []byte(requestPath)))
}

// Sign computes the signature with a one-off secret.
func Sign(secret, timestamp, method, requestPath string) string {
	return New(Credentials{SecretKey: secret}).Sign(timestamp, method, requestPath)
}

// Equal compares two signatures in constant time.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }

// Timestamp formats t as the API expects.
func Timestamp(t time.Time) string { return t.UTC().Format(TimeLayout) }

// AppendTimestamp appends the API timestamp of t to dst.
func AppendTimestamp(dst []byte, t time.Time) []byte { return t.UTC().AppendFormat(dst, TimeLayout) }

// ErrTimestamp reports a timestamp that is not ISO 8601 UTC with 0 to 3
// fractional digits.
var ErrTimestamp = errors.New("timestamp is not ISO 8601 UTC (2020-12-08T09:08:57.715Z)")

// ParseTimestamp parses "YYYY-MM-DDTHH:MM:SS[.f{1,3}]Z" without allocating.
func ParseTimestamp(b []byte) (time.Time, error) {
	// Fixed part: 2020-12-08T09:08:57 (19 bytes), then optional .fff, then Z.
	if len(b) < 20 || b[len(b)-1] != 'Z' || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, ErrTimestamp
	}
	num := func(s []byte) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	min, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60 {
		return time.Time{}, ErrTimestamp
	}
	nsec := 0
	frac := b[19 : len(b)-1]
	if len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 4 {
			return time.Time{}, ErrTimestamp
		}
		f, ok := num(frac[1:])
		if !ok {
			return time.Time{}, ErrTimestamp
		}
		for i := len(frac) - 1; i < 9; i++ {
			f *= 10
		}
		nsec = f
	}
	t := time.Date(year, time.Month(month), day, hour, min, sec, nsec, time.UTC)
	if t.Day() != day { // e.g. February 30th normalised into March
		return time.Time{}, ErrTimestamp
	}
	return t, nil
}
