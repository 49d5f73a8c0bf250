package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"time"
)

// Redacted is the configuration as the file writes it (key names,
// durations as "1m30s"), for GET /config on the admin port, with every
// secret taken out: a key that names a secret (secret_key, passphrase,
// redis_password, purge_token, any such key added later) shows "xxxxx"
// when set and "" when not, the user info of every URL is replaced
// (redis://xxxxx@host), and the value of any secret, of the configuration
// or of the environment (EDGE_*), is replaced wherever else it occurs.
func (c *Config) Redacted() map[string]any {
	secrets := c.secrets()
	var show func(v reflect.Value, secret bool) any
	show = func(v reflect.Value, secret bool) any {
		if v.Type() == reflect.TypeFor[time.Duration]() {
			return time.Duration(v.Int()).String()
		}
		switch v.Kind() {
		case reflect.String:
			switch {
			case secret && v.String() != "":
				return "xxxxx"
			case secret:
				return ""
			}
			return redact(v.String(), secrets)
		case reflect.Struct:
			out := map[string]any{}
			for i := range v.NumField() {
				tag := v.Type().Field(i).Tag.Get("koanf")
				if tag == "" || tag == "-" {
					continue
				}
				out[tag] = show(v.Field(i), secretName(tag))
			}
			return out
		case reflect.Slice, reflect.Array:
			out := make([]any, v.Len())
			for i := range v.Len() {
				out[i] = show(v.Index(i), secret)
			}
			return out
		case reflect.Map:
			out := map[string]any{}
			for it := v.MapRange(); it.Next(); {
				out[redact(it.Key().String(), secrets)] = show(it.Value(), secret)
			}
			return out
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				return nil
			}
			return show(v.Elem(), secret)
		}
		return v.Interface()
	}
	return show(reflect.ValueOf(c).Elem(), false).(map[string]any)
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
