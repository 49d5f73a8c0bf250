package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"explorer-edge/sim"
)

// doctorSim is an explorer-sim with auth on, in profile, on a free port,
// and a configuration file that points the edge at it with key, secret
// and passphrase.
func doctorSim(t *testing.T, profile, key, secret, pass string) (*sim.Server, string) {
	t.Helper()
	p := sim.MustProfile(profile)
	s, err := sim.Start(sim.Config{Auth: true, Credentials: sim.DemoCredentials(), Profile: &p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := fmt.Sprintf("upstream:\n  base_url: %q\n  api_key: %q\n  secret_key: %q\n  passphrase: %q\n  rate: 200\n  burst: 10\n",
		s.URL(), key, secret, pass)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// doctorCLI runs "explorer-edge doctor args..." as main does.
func doctorCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cli(append([]string{"doctor"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// doctorJSON is the -json output.
type doctorJSON struct {
	Calls    int `json:"calls"`
	Findings []struct {
		Point, Account, Reading, Evidence, Advice, Severity string
	} `json:"findings"`
	Unsafe bool `json:"unsafe"`
}

func (d doctorJSON) reading(point string) string {
	for _, f := range d.Findings {
		if f.Point == point {
			return f.Reading
		}
	}
	return ""
}

// TestDoctorCommand runs explorer-edge doctor -json against explorer-sim
// in each profile: it names the profile's reading of its point, exits 0,
// and the sim received at most 10 calls, all signed right.
func TestDoctorCommand(t *testing.T) {
	for _, c := range []struct{ profile, point, reading string }{
		{"height-down", "height", "height-down"},
		{"vendor", "height", "height-at"},
		{"state-empty", "state", "state-empty"},
		{"nodata-code", "nodata", "nodata-code"},
		{"cross-id-other", "cross-id", "cross-id-other"},
		{"update-moves", "update", "update-moves"},
		{"position-limit-100", "position-limit", "position-limit-100"},
	} {
		t.Run(c.profile, func(t *testing.T) {
			s, path := doctorSim(t, c.profile, sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase)
			code, out, errOut := doctorCLI("-config", path, "-json", "-chain", "chainx",
				"-cross-hash", s.CrossHashes("TRADE_ZONE", 1)[0])
			var rep doctorJSON
			if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			if got := rep.reading(c.point); got != c.reading {
				t.Errorf("%s: %q, want %q\n%s", c.point, got, c.reading, out)
			}
			if st := s.Stats(); st.RequestsTotal > 10 || st.RequestsTotal != int64(rep.Calls) || st.AuthFailures != 0 {
				t.Errorf("the sim received %d calls (%d refused), the report says %d; at most 10", st.RequestsTotal, st.AuthFailures, rep.Calls)
			}
		})
	}
}

// TestDoctorCommandText: the text output names each point's reading and
// says the upstream is safe.
func TestDoctorCommandText(t *testing.T) {
	_, path := doctorSim(t, "vendor", sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase)
	code, out, errOut := doctorCLI("-config", path)
	if code != 0 || !strings.Contains(out, "height: height-at") || !strings.Contains(out, "\nsafe: ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestDoctorCommandWrongCredentials: credentials the upstream refuses exit
// 1, say so, and appear nowhere in the output.
func TestDoctorCommandWrongCredentials(t *testing.T) {
	const key, secret, pass = "doctor-wrong-key", "D0C70RWR0NG5ECRE70000000000000000", "doctor-wrong-passphrase"
	s, path := doctorSim(t, "today", key, secret, pass)
	for _, asJSON := range []bool{false, true} {
		args := []string{"-config", path}
		if asJSON {
			args = append(args, "-json")
		}
		code, out, errOut := doctorCLI(args...)
		if code != 1 || !strings.Contains(out, "refused") {
			t.Fatalf("-json %v: exit %d, want 1\n%s\n%s", asJSON, code, out, errOut)
		}
		for _, c := range []string{key, secret, pass} {
			if strings.Contains(out+errOut, c) {
				t.Fatalf("the output holds a credential:\n%s\n%s", out, errOut)
			}
		}
	}
	if st := s.Stats(); st.RequestsTotal != 2 || st.AuthFailures != 2 {
		t.Fatalf("sim stats %+v: want one refused call per run", st)
	}
}

// TestDoctorCommandUsage: a chain that is not served, an argument, or a
// configuration that does not load exit 2 before any call.
func TestDoctorCommandUsage(t *testing.T) {
	s, path := doctorSim(t, "today", sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("upstream:\n  rate: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-config", path, "-chain", "NOPE"}, "-chain"},
		{[]string{"-config", path, "-cross-chain", "NOPE"}, "-cross-chain"},
		{[]string{"-config", path, "extra"}, "unexpected argument"},
		{[]string{"-config", bad}, "upstream.rate"},
	} {
		code, out, errOut := doctorCLI(c.args...)
		if code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("%q: exit %d, want 2 naming %s\n%s\n%s", c.args, code, c.says, out, errOut)
		}
	}
	if n := s.Stats().RequestsTotal; n != 0 {
		t.Fatalf("usage errors made %d calls", n)
	}
}
