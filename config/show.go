package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"time"
	"unicode/utf8"
)

// Redacted is the configuration as the file writes it (key names,
// durations as "1m30s"), for GET /config on the admin port, with every
// secret taken out: a key that names a secret (secret_key, passphrase,
// redis_password, purge_token, any such key added later) shows "xxxxx"
// when set and "" when not, an api_key (the upstream's, an account's, a
// client's) shows its first characters only (ShownKey), the user info of
// every URL is replaced (redis://xxxxx@host), and the value of any secret
// or api key, of the configuration or of the environment (EDGE_*), is
// replaced wherever else it occurs.
func (c *Config) Redacted() map[string]any {
	secrets := append(c.secrets(), c.apiKeys()...)
	var show func(v reflect.Value, kind shownAs) any
	show = func(v reflect.Value, kind shownAs) any {
		if v.Type() == reflect.TypeFor[time.Duration]() {
			return time.Duration(v.Int()).String()
		}
		switch v.Kind() {
		case reflect.String:
			switch {
			case kind == shownSecret && v.String() != "":
				return "xxxxx"
			case kind == shownSecret:
				return ""
			case kind == shownKey:
				return ShownKey(v.String())
			}
			return redact(v.String(), secrets)
		case reflect.Struct:
			out := map[string]any{}
			for i := range v.NumField() {
				tag := v.Type().Field(i).Tag.Get("koanf")
				if tag == "" || tag == "-" {
					continue
				}
				out[tag] = show(v.Field(i), shownOf(tag))
			}
			return out
		case reflect.Slice, reflect.Array:
			out := make([]any, v.Len())
			for i := range v.Len() {
				out[i] = show(v.Index(i), kind)
			}
			return out
		case reflect.Map:
			out := map[string]any{}
			for it := v.MapRange(); it.Next(); {
				out[redact(it.Key().String(), secrets)] = show(it.Value(), kind)
			}
			return out
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				return nil
			}
			return show(v.Elem(), kind)
		}
		return v.Interface()
	}
	return show(reflect.ValueOf(c).Elem(), shownPlain).(map[string]any)
}

// shownAs is how Redacted shows a value.
type shownAs uint8

const (
	shownPlain  shownAs = iota
	shownSecret         // "xxxxx"
	shownKey            // ShownKey
)

func shownOf(tag string) shownAs {
	switch {
	case secretName(tag):
		return shownSecret
	case apiKeyName(tag):
		return shownKey
	}
	return shownPlain
}

// apiKeyName tells whether a key holds an api key (upstream.api_key, an
// account's, a client's): not a secret alone (it travels in every signed
// request's headers), but whoever holds one is half way to a client's
// credentials, and docs/operations.md promises clients' keys are never
// shown.
func apiKeyName(tag string) bool { return tag == "api_key" }

// ShownKey is an api key as the admin port shows it: its first
// characters, enough to tell which key is configured, and "…" for the
// rest; at most 4 characters, and never more than a quarter of the key
// (a short key shows "xxxxx"). Empty stays empty.
func ShownKey(k string) string {
	if k == "" {
		return ""
	}
	n := min(4, len(k)/4)
	if n == 0 {
		return "xxxxx"
	}
	// Whole characters: a key is ASCII, but a wrong one should not be
	// cut inside a rune.
	for n > 0 && !utf8.RuneStart(k[n]) {
		n--
	}
	return k[:n] + "…"
}

// apiKeys are the api keys of c (upstream, accounts, clients), for
// Redacted to replace wherever else they occur.
func (c *Config) apiKeys() []string {
	out := []string{c.Upstream.APIKey}
	for _, a := range c.Upstream.Accounts {
		out = append(out, a.APIKey)
	}
	for _, cl := range c.Auth.Clients {
		out = append(out, cl.APIKey)
	}
	return out
}

// RedactedHash is the SHA-256, in hex, of Redacted as canonical JSON (keys
// sorted, no white space): equal on two nodes that run the same
// configuration. Secrets count only as set or not: a rotated credential
// does not change it, and it says nothing about their values.
func (c *Config) RedactedHash() string {
	b, _ := json.Marshal(c.Redacted()) // maps: keys sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
