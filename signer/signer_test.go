package signer

import (
	"testing"
	"time"
)

// The reference vectors of the signing scheme (docs/design.md, section The
// explorer API): a request of another API and one of this one.
func TestSignVectors(t *testing.T) {
	const secret = "22582BD0CFF14C41EDBF1AB98506286D"
	const ts = "2020-12-08T09:08:57.715Z"
	cases := []struct{ path, want string }{
		{"/api/v5/account/balance?ccy=BTC", "HiZhvSfMtWJA3uUIVXV3a/bSXNPCWvYFXoGCVS8V4zY="},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1", "2H8iYiiEbTqKdEuWC0WigfWKclsViuI9oemQM2kfnjQ="},
	}
	s := New(Credentials{SecretKey: secret})
	for _, c := range cases {
		if got := s.Sign(ts, "GET", c.path); got != c.want {
			t.Errorf("Sign(%q) = %q, want %q", c.path, got, c.want)
		}
		if got := Sign(secret, ts, "GET", c.path); got != c.want {
			t.Errorf("package Sign(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}

func TestParseTimestamp(t *testing.T) {
	f := func(in string, want time.Time, ok bool) {
		t.Helper()
		got, err := ParseTimestamp([]byte(in))
		if (err == nil) != ok {
			t.Fatalf("ParseTimestamp(%q) err = %v, want ok=%v", in, err, ok)
		}
		if ok && !got.Equal(want) {
			t.Fatalf("ParseTimestamp(%q) = %v, want %v", in, got, want)
		}
	}
	base := time.Date(2020, 12, 8, 9, 8, 57, 0, time.UTC)
	f("2020-12-08T09:08:57.715Z", base.Add(715*time.Millisecond), true)
	f("2020-12-08T09:08:57.71Z", base.Add(710*time.Millisecond), true)
	f("2020-12-08T09:08:57.7Z", base.Add(700*time.Millisecond), true)
	f("2020-12-08T09:08:57Z", base, true)
	f("2020-12-08T09:08:57.7151Z", time.Time{}, false)
	f("2020-12-08T09:08:57.Z", time.Time{}, false)
	f("2020-12-08 09:08:57Z", time.Time{}, false)
	f("2020-12-08T09:08:57.715", time.Time{}, false)
	f("2020-02-30T09:08:57Z", time.Time{}, false)
	f("2020-13-08T09:08:57Z", time.Time{}, false)
	f("", time.Time{}, false)
	f("abcd-ef-ghTij:kl:mnZ", time.Time{}, false)
}

func TestTimestampRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 21, 1, 2, 3, 456_000_000, time.UTC)
	s := Timestamp(now)
	if s != "2026-11-21T01:02:03.456Z" {
		t.Fatalf("Timestamp = %q", s)
	}
	got, err := ParseTimestamp([]byte(s))
	if err != nil || !got.Equal(now) {
		t.Fatalf("round trip: %v %v", got, err)
	}
}

func FuzzParseTimestamp(f *testing.F) {
	f.Add("2020-12-08T09:08:57.715Z")
	f.Add("2020-12-08T09:08:57Z")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTimestamp([]byte(s))
		if err != nil {
			return
		}
		// Anything accepted must round-trip through the millisecond layout.
		back, err := ParseTimestamp([]byte(Timestamp(got)))
		if err != nil || !back.Equal(got) {
			t.Fatalf("%q parsed to %v but does not round-trip", s, got)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	s := New(Credentials{SecretKey: "22582BD0CFF14C41EDBF1AB98506286D"})
	ts := []byte("2020-12-08T09:08:57.715Z")
	m := []byte("GET")
	p := []byte("/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1")
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = s.AppendSign(buf[:0], ts, m, p)
	}
}
