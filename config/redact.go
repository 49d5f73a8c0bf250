package config

import (
	"cmp"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

var (
	// The user info of a URL: scheme://user:password@ or scheme://token@.
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s"'/?#@]+@`)
	// user:password@host written without a scheme.
	bareUserinfo = regexp.MustCompile(`(^|[\s"'(=,])[^\s"'/?#@:]*:[^\s"'/?#@]+@`)
)

// Redact takes secrets out of a message before it is printed or logged:
// the user info of any URL (redis://default:...@host becomes
// redis://xxxxx@host) and the value of every secret set through the
// environment (EDGE_..._SECRET_KEY, _PASSPHRASE, _PASSWORD, _TOKEN).
// Errors of Load and Validate are redacted already; this is for messages
// built elsewhere.
func Redact(s string) string {
	return redact(s, envSecrets())
}

// minSecretLen is the length below which a secret value is not searched
// for: replacing every "ab" would garble the message and hide nothing.
const minSecretLen = 4

// redact is Redact with further secret values.
func redact(s string, secrets []string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}xxxxx@")
	s = bareUserinfo.ReplaceAllString(s, "${1}xxxxx@")
	// Longest first, so that no part of a secret survives a shorter one
	// that it contains.
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, v := range secrets {
		if len(v) >= minSecretLen {
			s = strings.ReplaceAll(s, v, "xxxxx")
		}
	}
	return s
}

// secretName tells whether a key (a koanf tag or an environment variable)
// holds a secret. A *_file key holds the path of one, which is not.
func secretName(name string) bool {
	name = strings.ToLower(name)
	if strings.HasSuffix(name, "_file") {
		return false
	}
	for _, s := range []string{"secret", "passphrase", "password", "token"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// envSecrets are the values of EDGE_* variables that hold a secret.
func envSecrets() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "EDGE_") && secretName(name) {
			out = append(out, value)
		}
	}
	return out
}

// secrets are the values of every field of c whose key names a secret
// (upstream.secret_key, auth.clients[].passphrase, shared.redis_password
// and any such key added later), and those of the environment.
func (c *Config) secrets() []string {
	out := envSecrets()
	var walk func(v reflect.Value, secret bool)
	walk = func(v reflect.Value, secret bool) {
		switch v.Kind() {
		case reflect.String:
			if secret {
				out = append(out, v.String())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), secretName(v.Type().Field(i).Tag.Get("koanf")))
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i), secret)
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value(), secret)
			}
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem(), secret)
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), false)
	return out
}
