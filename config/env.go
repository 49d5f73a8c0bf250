package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
)

// envKey is the key path an EDGE_* variable sets (EDGE_UPSTREAM__SECRET_KEY
// -> upstream.secret_key), and whether it names a key at all. Client
// credentials (EDGE_AUTH__CLIENTS__<NAME>__...) are applyClientEnv's.
func envKey(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "EDGE_")
	if !ok || strings.HasPrefix(name, "EDGE_AUTH__CLIENTS__") {
		return "", false
	}
	key := strings.ReplaceAll(strings.ToLower(rest), "__", ".")
	return key, knownKey(key)
}

// knownKey tells whether key is a path of Config's koanf tags. Below a
// map (cache.ttl's routes) every name is taken: Validate checks them.
func knownKey(key string) bool {
	t := reflect.TypeOf(Config{})
	for part := range strings.SplitSeq(key, ".") {
		switch t.Kind() {
		case reflect.Map:
			return true
		case reflect.Struct:
			f, ok := fieldByTag(t, part)
			if !ok {
				return false
			}
			t = f.Type
		default:
			return false
		}
	}
	return true
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("koanf") == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// clientFields are the fields of a client that the environment can set.
var clientFields = []string{"api_key", "secret_key", "passphrase", "api_key_file", "secret_key_file", "passphrase_file"}

// clientEnv reads EDGE_AUTH__CLIENTS__<NAME>__<FIELD>: the index of the
// client named <name> in cfg (case-insensitive) and the field, or false.
func clientEnv(cfg *Config, name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "EDGE_AUTH__CLIENTS__")
	if !ok {
		return 0, "", false
	}
	client, field, ok := strings.Cut(rest, "__")
	field = strings.ToLower(field)
	if !ok || !slices.Contains(clientFields, field) {
		return 0, "", false
	}
	for i, c := range cfg.Auth.Clients {
		if strings.EqualFold(c.Name, client) {
			return i, field, true
		}
	}
	return 0, "", false
}

// clientField is the field of c that the environment's field sets.
func clientField(c *Client, field string) *string {
	switch field {
	case "api_key":
		return &c.APIKey
	case "secret_key":
		return &c.SecretKey
	case "passphrase":
		return &c.Passphrase
	case "api_key_file":
		return &c.APIKeyFile
	case "secret_key_file":
		return &c.SecretKeyFile
	}
	return &c.PassphraseFile
}

// IgnoredEnv names the EDGE_* variables of the environment that set no key
// of cfg: the kubelet's service links for a Service named edge (EDGE_PORT,
// EDGE_SERVICE_HOST, ...), a misspelled key, a client that cfg does not
// have. Load skips them; the caller warns, once, naming them.
func IgnoredEnv(cfg *Config) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "EDGE_") {
			continue
		}
		if _, ok := envKey(name); ok {
			continue
		}
		if _, _, ok := clientEnv(cfg, name); ok {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
