package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// demoCredentials are explorer-sim's demo account (sim.DemoAPIKey,
// DemoSecretKey, DemoPassphrase; a test holds them equal). config.yaml
// ships them for `make run`; the real explorer refuses them.
var demoCredentials = []string{"sim-demo-key", "5D1A9C7E3B2F4A6C8E0D1B3F5A7C9E2B", "sim-demo-passphrase"}

// placeholders are the words of a value left to be filled in:
// REPLACE-ME, <replace>, CHANGE-ME, changeme.
var placeholders = []string{"replace", "change-me", "changeme", "change_me"}

// Warnings are what may be a mistake but does not stop a start: a
// credential that is explorer-sim's demo account, or a secret still a
// placeholder (REPLACE-ME, CHANGE-ME). One line each, "key: what", never
// the value. -check-config prints them and still exits 0.
func Warnings(c *Config) []string {
	var out []string
	var walk func(v reflect.Value, key string)
	walk = func(v reflect.Value, key string) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == durationType {
				return
			}
			for i := range v.NumField() {
				tag := v.Type().Field(i).Tag.Get("koanf")
				if tag != "" && tag != "-" {
					walk(v.Field(i), joinPath(key, tag))
				}
			}
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Struct {
				for i := range v.Len() {
					walk(v.Index(i), key+"["+strconv.Itoa(i)+"]")
				}
			}
		case reflect.String:
			if w := credentialWarning(lastKey(key), v.String()); w != "" {
				out = append(out, key+": "+w)
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return out
}

// credentialWarning says what is wrong with the value of a credential
// named name (a secret, or an api_key), or "".
func credentialWarning(name, v string) string {
	if v == "" || !(secretName(name) || name == "api_key" || name == "redis_username") {
		return ""
	}
	if slices.Contains(demoCredentials, v) {
		return "explorer-sim's demo credentials (config.yaml's, for make run); the real explorer refuses them: set the account's own (EDGE_UPSTREAM__API_KEY, or a *_file)"
	}
	low := strings.ToLower(v)
	for _, p := range placeholders {
		if strings.Contains(low, p) {
			return "a placeholder such as REPLACE-ME or CHANGE-ME, not a credential: set the real value"
		}
	}
	return ""
}
