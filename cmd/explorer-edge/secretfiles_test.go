package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"explorer-edge/sim"
)

// within runs f and fails the test if it has not returned after 10 s: a
// read that blocks for ever must fail the test, not hang it.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
		panic("unreachable")
	}
}

// relink points the symlink link at target, as the kubelet swaps a
// mounted Secret: a new link renamed over the old one.
func relink(t *testing.T, link, target string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestPurgeTokenFileThatIsNoFile: admin.purge_token_file (and the purge
// command's -token-file) pointed at /dev/zero or at a FIFO is refused at
// once, naming the key, by -check-config, -healthcheck and purge; they ran
// out of memory on /dev/zero and waited for ever on a FIFO.
func TestPurgeTokenFileThatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"/dev/zero": zero, "fifo": fifo} {
		t.Run(name, func(t *testing.T) {
			f := demoEdge("http://127.0.0.1:1")
			f.listen, f.admin = freeAddr(t), freeAddr(t)
			f.rest = "admin: {purge_token_file: " + path + "}"
			cfg := filepath.Join(t.TempDir(), "config.yaml")
			os.WriteFile(cfg, []byte(f.yaml()), 0o600)

			var out bytes.Buffer
			rc := within(t, "-check-config", func() int { return cli([]string{"-check-config", "-config", cfg}, &out, &out) })
			if rc != 1 || !strings.Contains(out.String(), "admin.purge_token_file: ") {
				t.Errorf("-check-config: exit %d, want 1 naming admin.purge_token_file:\n%s", rc, out.String())
			}
			out.Reset()
			// Nothing listens: not ready, but the file's problem is named.
			rc = within(t, "-healthcheck", func() int { return cli([]string{"-healthcheck", "-config", cfg}, &out, &out) })
			if rc != 1 || !strings.Contains(out.String(), "admin.purge_token_file: ") {
				t.Errorf("-healthcheck: exit %d, want 1 naming admin.purge_token_file:\n%s", rc, out.String())
			}
			out.Reset()
			rc = within(t, "start", func() int { return cli([]string{"-config", cfg}, &out, &out) })
			if rc != 1 || !strings.Contains(out.String(), "admin.purge_token_file: ") {
				t.Errorf("start: exit %d, want 1 naming admin.purge_token_file:\n%s", rc, out.String())
			}
			type result struct {
				rc     int
				stderr string
			}
			r := within(t, "purge", func() result {
				rc, _, stderr := purgeCLI("-admin", "http://"+f.admin, "-token-file", path, "-all")
				return result{rc, stderr}
			})
			if r.rc != 1 || !strings.Contains(r.stderr, "-token-file: ") {
				t.Errorf("purge -token-file: exit %d, want 1 naming -token-file:\n%s", r.rc, r.stderr)
			}
		})
	}
}

// TestReloadRefusesPurgeTokenFileThatIsNoFile: a serving edge whose
// admin.purge_token_file is a symlink swapped to /dev/zero, then to a
// FIFO, refuses each reload, naming the key, and keeps its configuration:
// the token it started with still purges, and SIGTERM still drains. Before,
// the first reload read /dev/zero until the process ran out of memory, and
// the second waited on the FIFO for ever, signals unanswered.
func TestReloadRefusesPurgeTokenFileThatIsNoFile(t *testing.T) {
	_, url, _ := startSim(t, sim.Faults{})
	const token = "reload-purge-token-0123456789abc"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "mounted")
	relink(t, link, tokenFile)
	f := demoEdge(url)
	f.rest = "admin: {purge_token_file: " + link + "}"
	e := startEdge(t, f)
	purges := func() bool {
		t.Helper()
		rc, stdout, stderr := purgeCLI("-admin", "http://"+e.file.admin, "-token-file", tokenFile, "-all")
		if rc != 0 {
			t.Logf("purge: exit %d: %s%s", rc, stdout, stderr)
		}
		return rc == 0
	}
	if !purges() {
		t.Fatal("the token from the file does not purge")
	}

	for i, target := range []string{"/dev/zero", fifo} {
		relink(t, link, target)
		e.signal(syscall.SIGHUP)
		e.reloads("error", float64(i+1))
		if !purges() {
			t.Fatalf("after the reload with %s refused: the token in force does not purge", target)
		}
	}
	refusals := 0
	for _, l := range e.logs.Lines(t, "config reload refused; the previous configuration keeps serving") {
		refusals++
		if err, _ := l["err"].(string); !strings.Contains(err, "admin.purge_token_file: ") {
			t.Errorf("the refusal does not name admin.purge_token_file: %v", l)
		}
	}
	if refusals != 2 {
		t.Errorf("%d refusals logged, want 2", refusals)
	}
	e.once.Do(func() { close(e.stop) })
	within(t, "drain", func() struct{} { <-e.done; return struct{}{} })
	if e.err != nil {
		t.Fatalf("run: %v", e.err)
	}
}
