package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"explorer-edge/internal/testkit"
	"explorer-edge/sim"
)

// TestCheckConfigHoldsNoSecrets: -check-config lists what is wrong with a
// configuration without printing a password, whether it sits in a URL's
// user info (a redis:// address, an upstream URL) or in a secret key, and
// whether it came from the file or the environment.
func TestCheckConfigHoldsNoSecrets(t *testing.T) {
	const (
		envURLPass  = "envUrlPw-SECRET-1"
		envPassword = "envRedisPw-SECRET-2"
		fileURLPass = "fileUrlPw-SECRET-3"
		bareURLPass = "bareUrlPw-SECRET-4"
		upURLPass   = "upUrlPw-SECRET-5"
		listPass    = "listPw-SECRET-6"
	)
	f := demoEdge("http://127.0.0.1:1")
	f.listen, f.admin = "127.0.0.1:1", "127.0.0.1:2"
	cases := []struct {
		name string
		env  map[string]string
		rest string // further YAML
		more string // further upstream keys
		want string // the problem named
	}{
		{name: "redis URL from the environment", want: "shared.redis_addr",
			env: map[string]string{"EDGE_SHARED__REDIS_ADDR": "redis://default:" + envURLPass + "@127.0.0.1:6379",
				"EDGE_SHARED__REDIS_PASSWORD": envPassword}},
		{name: "redis URL in the file", want: "shared.redis_addr",
			rest: "shared: {redis_addr: \"redis://default:" + fileURLPass + "@127.0.0.1:6379\", redis_password: " + envPassword + "}"},
		{name: "user info without a scheme", want: "shared.redis_addr",
			rest: "shared: {redis_addr: \"default:" + bareURLPass + "@127.0.0.1:6379\"}"},
		{name: "upstream URL", want: "upstream.base_url",
			env: map[string]string{"EDGE_UPSTREAM__BASE_URL": "ftp://edge:" + upURLPass + "@127.0.0.1:21/"}},
		{name: "a password of the wrong type", want: "redis_password",
			rest: "shared: {redis_password: [" + listPass + ", " + listPass + "]}"},
	}
	secrets := []string{envURLPass, envPassword, fileURLPass, bareURLPass, upURLPass, listPass, sim.DemoSecretKey, sim.DemoPassphrase}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			file := f
			file.rest, file.more = c.rest, c.more
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(file.yaml()), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if rc := checkConfig(path, &stdout, &stderr); rc != 1 {
				t.Fatalf("exit %d, want 1; stdout %q stderr %q", rc, stdout.String(), stderr.String())
			}
			out := stdout.String() + stderr.String()
			if !strings.Contains(out, c.want) {
				t.Errorf("the output does not name %s:\n%s", c.want, out)
			}
			for _, s := range secrets {
				if strings.Contains(out, s) {
					t.Errorf("-check-config printed %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestReloadErrorHoldsNoSecrets: a reload refused because of a redis URL
// with a password (in the file, then from the environment) is logged
// without the password, as are a malformed request's credentials at debug
// level; then every line of the log is searched for every secret.
func TestReloadErrorHoldsNoSecrets(t *testing.T) {
	const (
		filePass   = "reloadFilePw-SECRET-7"
		envPass    = "reloadEnvPw-SECRET-8"
		clientPass = "reload-client-pass-SECRET-9"
		clientSign = "cmVsb2FkLXNpZ24tU0VDUkVULTEw"
	)
	_, url, upstreamSigns := startSim(t, sim.Faults{})
	f := demoEdge(url)
	f.rest = "log: {level: debug}"
	e := startEdge(t, f)
	f.listen, f.admin = e.file.listen, e.file.admin

	// A request fasthttp cannot parse, carrying credentials.
	c, err := net.Dial("tcp", f.listen)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET "+blocks+" HTTP/1.1\r\nHost: e\r\nSVC-ACCESS-KEY: k\r\nSVC-ACCESS-PASSPHRASE: "+clientPass+
		"\r\nSVC-ACCESS-SIGN: "+clientSign+"\x01\r\nSVC-ACCESS-TIMESTAMP: 2026-01-01T00:00:00Z\r\n\r\n")
	io.ReadAll(c)
	c.Close()
	testkit.WaitFor(t, "fasthttp's line", func() bool { return strings.Contains(e.logs.String(), "error when serving connection") })

	broken := f
	broken.rest += "\nshared: {redis_addr: \"redis://default:" + filePass + "@127.0.0.1:6379\"}"
	e.write(broken.yaml())
	e.signal(syscall.SIGHUP)
	e.reloads("error", 1)

	e.write(f.yaml())
	t.Setenv("EDGE_SHARED__REDIS_ADDR", "redis://default:"+envPass+"@127.0.0.1:6379")
	t.Setenv("EDGE_SHARED__REDIS_PASSWORD", envPass)
	e.signal(syscall.SIGHUP)
	e.reloads("error", 2)

	logs := e.logs.String()
	lines := e.logs.Lines(t, "")
	refused := 0
	for _, l := range lines {
		if msg, _ := l["msg"].(string); strings.Contains(msg, "reload refused") {
			refused++
			if err, _ := l["err"].(string); !strings.Contains(err, "shared.redis_addr") {
				t.Errorf("the refusal does not name the key: %v", l)
			}
		}
	}
	if refused != 2 {
		t.Fatalf("%d refusals logged, want 2:\n%s", refused, logs)
	}
	secrets := append(upstreamSigns(), filePass, envPass, clientPass, clientSign, sim.DemoSecretKey, sim.DemoPassphrase)
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("the log holds %q", s)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}
