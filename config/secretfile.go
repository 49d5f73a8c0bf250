package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSecretFile bounds what is read of a secret's file: a secret is short,
// and a path pasted wrong (/dev/zero) must not hang the edge.
const maxSecretFile = 64 << 10

// secretField is a secret and the key naming a file that holds it.
type secretField struct {
	key         string // upstream.secret_key; the file's key is key + "_file"
	value, file *string
}

func (c *Config) secretFields() []secretField {
	u, sh := &c.Upstream, &c.Shared
	out := []secretField{
		{"upstream.api_key", &u.APIKey, &u.APIKeyFile},
		{"upstream.secret_key", &u.SecretKey, &u.SecretKeyFile},
		{"upstream.passphrase", &u.Passphrase, &u.PassphraseFile},
		{"shared.redis_username", &sh.RedisUsername, &sh.RedisUsernameFile},
		{"shared.redis_password", &sh.RedisPassword, &sh.RedisPasswordFile},
		{"cdn.api_token", &c.CDN.APIToken, &c.CDN.APITokenFile},
	}
	for i := range c.Upstream.Accounts {
		a := &c.Upstream.Accounts[i]
		key := fmt.Sprintf("upstream.accounts[%d].", i)
		out = append(out,
			secretField{key + "api_key", &a.APIKey, &a.APIKeyFile},
			secretField{key + "secret_key", &a.SecretKey, &a.SecretKeyFile},
			secretField{key + "passphrase", &a.Passphrase, &a.PassphraseFile})
	}
	for i := range c.Auth.Clients {
		cl := &c.Auth.Clients[i]
		key := fmt.Sprintf("auth.clients[%d].", i)
		out = append(out,
			secretField{key + "api_key", &cl.APIKey, &cl.APIKeyFile},
			secretField{key + "secret_key", &cl.SecretKey, &cl.SecretKeyFile},
			secretField{key + "passphrase", &cl.Passphrase, &cl.PassphraseFile})
	}
	return out
}

// readSecretFiles sets each secret whose _file key is set from that file.
// A value and a file set in the same place (both in the file, or both in
// the environment) are a problem; across places the environment wins, as
// it does for every key.
func readSecretFiles(c *Config, src sources) problems {
	var probs problems
	for _, s := range c.secretFields() {
		if *s.file == "" {
			continue
		}
		fileKey := s.key + "_file"
		if *s.value != "" {
			_, valueFromEnv := src.env[s.key]
			_, fileFromEnv := src.env[fileKey]
			switch {
			case valueFromEnv && !fileFromEnv:
				*s.file = "" // the environment's value stands
				continue
			case fileFromEnv && !valueFromEnv:
			default:
				probs = append(probs, problem{source: src.of(fileKey), key: s.key,
					msg: fmt.Sprintf("%s and %s are both set; set one", s.key, fileKey)})
				continue
			}
		}
		v, err := readSecret(*s.file)
		if err != nil {
			probs = append(probs, problem{source: src.of(fileKey), key: fileKey, msg: err.Error()})
			continue
		}
		*s.value = v
	}
	return probs
}

// readSecret is the content of a secret's file without trailing newlines.
func readSecret(path string) (string, error) {
	b, err := readBounded(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// ReadSecretFile is the content of a secret's file, surrounding white space
// dropped, read as every *_file key is (readBounded); the purge command's
// -token-file is read with it.
func ReadSecretFile(path string) (string, error) {
	b, err := readBounded(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// readBounded reads a secret's file that is a regular file of at most
// maxSecretFile bytes, and refuses anything else at once, files of the
// kernel's pseudo-filesystems included: /proc/self/environ is a regular
// file, and holds every secret the environment gave the process. A path pointed
// at /dev/zero (a symlink swapped under a running edge) was read until
// memory ran out, and a FIFO blocked the reload loop for ever (SIGTERM
// then unanswered): it is opened without blocking, which only a FIFO or a
// device notices, and its kind is read from the descriptor opened, so a
// link swapped between a stat and the open does not get past.
func readBounded(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, kind(fi.Mode()))
	}
	if fs := pseudoFS(f); fs != "" {
		return nil, fmt.Errorf("%s is a file of %s, the kernel's view of a process or device, not a secret's file", path, fs)
	}
	if dir := kernelPath(path); dir != "" {
		return nil, fmt.Errorf("%s is under %s, the kernel's files, not a secret's file", path, dir)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it the secret?", path, maxSecretFile)
	}
	return b, nil
}

// kind names what a path that is no regular file is.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

// kernelDirs are the directories of the kernel's own files: /proc and
// /sys, and /dev, whose regular files (/dev/shm) are no place for a
// secret either.
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// kernelPath is the directory of kernelDirs path is under, as written or
// once its symlinks are resolved, or "".
func kernelPath(path string) string {
	paths := []string{path}
	if abs, err := filepath.Abs(path); err == nil {
		paths = append(paths, abs)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		paths = append(paths, real)
	}
	for _, p := range paths {
		p = filepath.Clean(p)
		for _, d := range kernelDirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return d
			}
		}
	}
	return ""
}
