package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notFiles are paths a *_file key may be pointed at by mistake that hold
// no secret: a symlink to /dev/zero (endless), a FIFO (blocks a reader
// until a writer comes), a directory and a file larger than any secret.
func notFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("s", maxSecretFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"symlink to /dev/zero": zero, "fifo": fifo, "directory": sub, "over 64 KiB": big}
}

// within runs f and fails the test if it has not returned after 10 s (a
// read that blocks for ever would hang the test instead of failing it).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
		return nil
	}
}

// TestSecretFilesThatAreNotFiles: every *_file key (a secret of the
// upstream block, of Redis, the purge token) pointed at something that is
// not a regular file of at most 64 KiB is refused at once, naming the key,
// instead of reading /dev/zero until memory runs out or waiting on a FIFO
// for ever.
func TestSecretFilesThatAreNotFiles(t *testing.T) {
	bad := notFiles(t)
	keys := []struct{ key, yaml string }{
		{"upstream.secret_key_file", "upstream: {api_key: k, passphrase: p, secret_key_file: %q}\n"},
		{"shared.redis_password_file", credentials + "shared: {redis_password_file: %q}\n"},
		{"admin.purge_token_file", credentials + "admin: {purge_token_file: %q}\n"},
	}
	for _, k := range keys {
		for name, path := range bad {
			t.Run(k.key+"/"+name, func(t *testing.T) {
				cfgPath := writeConfig(t, strings.Replace(k.yaml, "%q", `"`+path+`"`, 1))
				err := within(t, "Check", func() error { _, err := Check(cfgPath); return err })
				if err == nil {
					t.Fatalf("%s pointing at a %s accepted", k.key, name)
				}
				if !strings.Contains(err.Error(), k.key+": ") {
					t.Fatalf("the error does not name %s:\n%v", k.key, err)
				}
			})
		}
	}
	// The command line's purge (cmd/explorer-edge) reads its -token-file
	// with the same reader.
	for name, path := range bad {
		if err := within(t, "ReadSecretFile", func() error { _, err := ReadSecretFile(path); return err }); err == nil {
			t.Errorf("ReadSecretFile(%s) accepted", name)
		}
	}
	// A regular file, and a symlink to one (a mounted Kubernetes Secret),
	// still read.
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("a-purge-token-of-32-characters!!\n"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(token, link)
	cfg, err := Check(writeConfig(t, credentials+"admin: {purge_token_file: "+link+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := cfg.Admin.Token(); err != nil || tok != "a-purge-token-of-32-characters!!" {
		t.Fatalf("token through a symlink: %q, %v", tok, err)
	}
}

// TestSecretFilesOfTheKernel: /proc/self/environ is a regular file, and
// holds every secret the environment gave the process; no *_file key
// reads it, or any file of /proc, /sys or /dev, directly or through a
// symlink. The error names the key.
func TestSecretFilesOfTheKernel(t *testing.T) {
	dir := t.TempDir()
	bad := map[string]string{"/proc/self/environ": "/proc/self/environ", "/proc/self/cmdline": "/proc/self/cmdline"}
	link := filepath.Join(dir, "environ")
	if err := os.Symlink("/proc/self/environ", link); err != nil {
		t.Fatal(err)
	}
	bad["a symlink to /proc/self/environ"] = link
	for _, p := range []string{"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/power/state", "/sys/kernel/profiling"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			bad[p] = p
			break
		}
	}
	if f, err := os.CreateTemp("/dev/shm", "secret"); err == nil {
		f.WriteString("a-secret-in-dev-shm")
		f.Close()
		t.Cleanup(func() { os.Remove(f.Name()) })
		bad["a file of /dev/shm"] = f.Name()
	}
	keys := []struct{ key, yaml string }{
		{"upstream.secret_key_file", "upstream: {api_key: k, passphrase: p, secret_key_file: %q}\n"},
		{"auth.clients[0].api_key_file", credentials + "auth: {mode: signed, clients: [{name: web, secret_key: s0000000000000000000000000000000, passphrase: p, api_key_file: %q}]}\n"},
		{"admin.purge_token_file", credentials + "admin: {purge_token_file: %q}\n"},
	}
	for _, k := range keys {
		for name, path := range bad {
			t.Run(k.key+"/"+name, func(t *testing.T) {
				_, err := Check(writeConfig(t, strings.Replace(k.yaml, "%q", `"`+path+`"`, 1)))
				if err == nil {
					t.Fatalf("%s = %s accepted", k.key, name)
				}
				if !strings.Contains(err.Error(), k.key+": ") || !strings.Contains(err.Error(), "not a secret's file") {
					t.Fatalf("the error does not name %s and why:\n%v", k.key, err)
				}
			})
		}
	}
	for name, path := range bad {
		if _, err := ReadSecretFile(path); err == nil || !strings.Contains(err.Error(), "not a secret's file") {
			t.Errorf("ReadSecretFile(%s): %v", name, err)
		}
	}
}
