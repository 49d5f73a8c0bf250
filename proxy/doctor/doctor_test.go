package doctor

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/signer"
	"explorer-edge/sim"
)

// startSim is an explorer-sim with auth on, in profile, on a free port.
func startSim(t *testing.T, profile string, f sim.Faults) *sim.Server {
	t.Helper()
	p := sim.MustProfile(profile)
	s, err := sim.Start(sim.Config{Auth: true, Credentials: sim.DemoCredentials(), Profile: &p, Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// edgeConfig is the edge's default configuration aimed at base with creds.
func edgeConfig(base string, creds signer.Credentials) *config.Config {
	cfg := config.Default()
	cfg.Upstream.BaseURL = base
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = creds.APIKey, creds.SecretKey, creds.Passphrase
	cfg.Upstream.Rate = 1000 // calls 1 ms apart at least
	cfg.Upstream.Timeout = 10 * time.Second
	return &cfg
}

// examine runs doctor against s with a known token and cross-chain hash.
func examine(t *testing.T, s *sim.Server, cfg *config.Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return Run(ctx, Options{Config: cfg, Chain: "CHAINX",
		Token: s.TokenContracts("CHAINX")[0], CrossHash: s.CrossHashes("TRADE_ZONE", 1)[0]})
}

// readings maps each point to its reading (credentials by account).
func readings(rep Report) map[string]string {
	out := map[string]string{}
	for _, f := range rep.Findings {
		k := f.Point
		if f.Point == PointCreds {
			k += "/" + f.Account
		}
		out[k] = f.Reading
	}
	return out
}

// TestDoctorNamesEachProfile runs doctor against explorer-sim in each of
// its profiles and asks that it names the profile's reading of every
// point, within 10 calls the sim counted, and calls none of them unsafe.
func TestDoctorNamesEachProfile(t *testing.T) {
	today := map[string]string{
		PointUpstream: "reachable", PointCreds + "/default": "accepted", PointClock: "in-sync",
		PointHeight: "height-down", PointState: "state-pending-done", PointNoData: "nodata-empty",
		PointCrossID: "cross-id-asked", PointUpdate: "update-fixed", PointPosition: "position-limit-50",
		PointRetryAfter: "not-observed",
	}
	with := func(more map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range today {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		profile string
		want    map[string]string
	}{
		{"today", today},
		{"height-down", today},
		{"vendor", with(map[string]string{PointHeight: "height-at"})},
		{"height-at", with(map[string]string{PointHeight: "height-at"})},
		{"state-empty", with(map[string]string{PointState: "state-empty"})},
		{"nodata-code", with(map[string]string{PointNoData: "nodata-code"})},
		{"cross-id-other", with(map[string]string{PointCrossID: "cross-id-other"})},
		{"update-moves", with(map[string]string{PointUpdate: "update-moves"})},
		{"position-limit-100", with(map[string]string{PointPosition: "position-limit-100"})},
		{"every", with(map[string]string{PointHeight: "height-at", PointState: "state-empty", PointNoData: "nodata-code",
			PointCrossID: "cross-id-other", PointUpdate: "update-moves", PointPosition: "position-limit-100"})},
	}
	for _, c := range cases {
		t.Run(c.profile, func(t *testing.T) {
			s := startSim(t, c.profile, sim.Faults{})
			rep := examine(t, s, edgeConfig(s.URL(), sim.DemoCredentials()))
			got := readings(rep)
			for point, want := range c.want {
				if got[point] != want {
					t.Errorf("%s: %q, want %q", point, got[point], want)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("points %v, want those of %v", got, c.want)
			}
			if rep.Unsafe {
				t.Errorf("unsafe against the sim in profile %s", c.profile)
			}
			st := s.Stats()
			if st.RequestsTotal > MaxCalls || st.RequestsTotal != int64(rep.Calls) || st.AuthFailures != 0 {
				t.Errorf("the sim received %d calls (%d refused), the report says %d; at most %d", st.RequestsTotal, st.AuthFailures, rep.Calls, MaxCalls)
			}
			if t.Failed() {
				js, _ := json.MarshalIndent(rep, "", "  ")
				t.Logf("%s", js)
			}
		})
	}
}

// TestDoctorCrossIDOtherNamesTheField: under cross-id-other the hash asked
// is in tzTxHash, and the evidence says so.
func TestDoctorCrossIDOtherNamesTheField(t *testing.T) {
	s := startSim(t, "cross-id-other", sim.Faults{})
	rep := examine(t, s, edgeConfig(s.URL(), sim.DemoCredentials()))
	for _, f := range rep.Findings {
		if f.Point == PointCrossID && !strings.Contains(f.Evidence, "in tzTxHash") {
			t.Fatalf("cross-id evidence %q does not name tzTxHash", f.Evidence)
		}
	}
}

// TestDoctorWrongCredentials: credentials the upstream refuses are unsafe,
// and the run stops at the first call; the report never carries the
// credentials.
func TestDoctorWrongCredentials(t *testing.T) {
	s := startSim(t, "today", sim.Faults{})
	wrong := signer.Credentials{APIKey: "wrong-key-4242", SecretKey: "WRONGSECRET0000000000000000000000", Passphrase: "wrong-passphrase-4242"}
	cfg := edgeConfig(s.URL(), sim.DemoCredentials())
	cfg.Upstream.Accounts = []config.Account{{Name: "second", BaseURL: s.URL(), APIKey: wrong.APIKey, SecretKey: wrong.SecretKey, Passphrase: wrong.Passphrase, Rate: 1000, Burst: 10}}
	rep := examine(t, s, cfg)
	if got := readings(rep); !rep.Unsafe || got[PointCreds+"/default"] != "accepted" || got[PointCreds+"/second"] != "refused" {
		t.Fatalf("a refused second account: unsafe %v, readings %v", rep.Unsafe, got)
	}
	if st := s.Stats(); st.AuthFailures != 1 || st.RequestsTotal > MaxCalls {
		t.Fatalf("sim stats %+v, want one refused call and at most %d", st, MaxCalls)
	}

	s2 := startSim(t, "today", sim.Faults{})
	rep = examine(t, s2, edgeConfig(s2.URL(), wrong))
	if got := readings(rep); !rep.Unsafe || got[PointCreds+"/default"] != "refused" || rep.Calls != 1 {
		t.Fatalf("refused credentials: unsafe %v, %d calls, readings %v", rep.Unsafe, rep.Calls, got)
	}
	js, _ := json.Marshal(rep)
	var text strings.Builder
	rep.WriteText(&text)
	for _, secret := range []string{wrong.APIKey, wrong.SecretKey, wrong.Passphrase} {
		if strings.Contains(string(js), secret) || strings.Contains(text.String(), secret) {
			t.Fatalf("the report holds a credential:\n%s\n%s", js, text.String())
		}
	}
}

// TestDoctorUnreachable: an upstream that does not answer is unsafe.
func TestDoctorUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rep := Run(context.Background(), Options{Config: edgeConfig("http://"+addr, sim.DemoCredentials())})
	if got := readings(rep); !rep.Unsafe || got[PointUpstream] != "unreachable" || rep.Calls != 1 {
		t.Fatalf("unreachable upstream: unsafe %v, %d calls, readings %v", rep.Unsafe, rep.Calls, got)
	}
}

// TestDoctorThrottled: a 429 is reported with its Retry-After, asked once
// more after it (bounded by upstream.max_retry_after), and an upstream
// that throttles every call is unsafe: nothing could be learnt.
func TestDoctorThrottled(t *testing.T) {
	s := startSim(t, "today", sim.Faults{HTTP429: 1, RetryAfter: 7})
	cfg := edgeConfig(s.URL(), sim.DemoCredentials())
	cfg.Upstream.MaxRetryAfter = 20 * time.Millisecond
	rep := examine(t, s, cfg)
	got := readings(rep)
	if !rep.Unsafe || got[PointRetryAfter] != "present" || got[PointCreds+"/default"] != "not-checked" || rep.Calls != 2 {
		t.Fatalf("always 429: unsafe %v, %d calls, readings %v", rep.Unsafe, rep.Calls, got)
	}
	for _, f := range rep.Findings {
		if f.Point == PointRetryAfter && !strings.Contains(f.Evidence, `"7"`) {
			t.Fatalf("retry-after evidence %q does not show the value", f.Evidence)
		}
	}
}

// TestDoctorBusyIsUnsafe: an upstream that answers the newest page with
// 50013 "system busy" (HTTP 200, as the vendor sends it) has told nothing:
// unsafe, not taken for an answer.
func TestDoctorBusyIsUnsafe(t *testing.T) {
	s := startSim(t, "today", sim.Faults{Envelope: 1, EnvelopeCode: "50013", EnvelopeVendor: true})
	rep := examine(t, s, edgeConfig(s.URL(), sim.DemoCredentials()))
	if got := readings(rep); !rep.Unsafe || got[PointUpstream] != "failing" || got[PointHeight] == "height-at" || got[PointHeight] == "height-down" {
		t.Fatalf("50013 on every call: unsafe %v, readings %v", rep.Unsafe, got)
	}
}

// serveWrapped serves h on a free port, closed at the end of the test.
func serveWrapped(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// TestDoctorClockSkew: the upstream's Date 10 s off this host's clock is a
// warning, 40 s off is unsafe (the upstream refuses a timestamp 30 s off
// its clock), and either way is named with the direction.
func TestDoctorClockSkew(t *testing.T) {
	s := startSim(t, "today", sim.Faults{})
	for _, c := range []struct {
		off      time.Duration
		severity string
		says     string
	}{
		{0, OK, ""},
		{10 * time.Second, Warn, "ahead of"},
		{-40 * time.Second, Unsafe, "behind"},
	} {
		base := serveWrapped(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", time.Now().Add(c.off).UTC().Format(http.TimeFormat))
			s.ServeHTTP(w, r)
		}))
		rep := examine(t, s, edgeConfig(base, sim.DemoCredentials()))
		if readings(rep)[PointClock] == "" {
			t.Errorf("Date %s off: no clock finding", c.off)
		}
		for _, f := range rep.Findings {
			if f.Point != PointClock {
				continue
			}
			if f.Severity != c.severity || !strings.Contains(f.Evidence, c.says) || rep.Unsafe != (c.severity == Unsafe) {
				t.Errorf("Date %s off: %s %s %q, report unsafe %v", c.off, f.Severity, f.Reading, f.Evidence, rep.Unsafe)
			}
		}
	}
}

// TestDoctorHeightIgnored: an upstream that answers the newest blocks
// whatever height is asked (here explorer-sim behind a proxy that drops
// height) would have the edge cache one height's answer under another:
// unsafe.
func TestDoctorHeightIgnored(t *testing.T) {
	s := sim.New(sim.Config{})
	t.Cleanup(func() { s.Close() })
	base := serveWrapped(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if strings.HasSuffix(r.URL.Path, "/block-list") && q.Has("height") {
			q.Del("height")
			r.URL.RawQuery = q.Encode()
			r.RequestURI = r.URL.RequestURI()
		}
		s.ServeHTTP(w, r)
	}))
	rep := Run(context.Background(), Options{Config: edgeConfig(base, sim.DemoCredentials())})
	if got := readings(rep); !rep.Unsafe || got[PointHeight] != "height-ignored" {
		t.Fatalf("height ignored: unsafe %v, readings %v", rep.Unsafe, got)
	}
}
