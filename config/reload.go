package config

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Reload rules: what a reload (SIGHUP, watch_config) does with each key.
// true: applied by a reload; false: a reload that changes it is refused
// with "restart to change <key>" and the running configuration keeps
// serving. Every key of Config has its rule (TestReloadRulesCoverEveryKey),
// and docs/operations.md (Reload) lists the same (TestReloadDocMatchesCode).
// A list of sections (upstream.accounts) has a rule for the list itself
// (items added or removed) and one per field of its items, written with
// []; a map (cache.ttl) is one key.
var reloadRules = map[string]bool{
	"listen":           false,
	"admin_listen":     false,
	"admin_max_conns":  false,
	"chains":           false,
	"shutdown_timeout": true,
	"watch_config":     false,

	"upstream.base_url":                false,
	"upstream.api_key":                 true,
	"upstream.secret_key":              true,
	"upstream.passphrase":              true,
	"upstream.timeout":                 true,
	"upstream.rate":                    true,
	"upstream.burst":                   true,
	"upstream.budget_wait":             true,
	"upstream.max_conns":               false,
	"upstream.max_response_bytes":      false,
	"upstream.retries":                 true,
	"upstream.retry_backoff":           true,
	"upstream.retry_max_time":          true,
	"upstream.breaker_failures":        false,
	"upstream.breaker_open_for":        false,
	"upstream.max_retry_after":         true,
	"upstream.position_list_max_limit": true,
	"upstream.api_key_file":            true,
	"upstream.secret_key_file":         true,
	"upstream.passphrase_file":         true,

	"upstream.accounts":                   false,
	"upstream.accounts[].name":            false,
	"upstream.accounts[].base_url":        false,
	"upstream.accounts[].api_key":         true,
	"upstream.accounts[].secret_key":      true,
	"upstream.accounts[].passphrase":      true,
	"upstream.accounts[].rate":            true,
	"upstream.accounts[].burst":           true,
	"upstream.accounts[].api_key_file":    true,
	"upstream.accounts[].secret_key_file": true,
	"upstream.accounts[].passphrase_file": true,

	"auth.mode":                             true,
	"auth.max_skew":                         true,
	"auth.clients":                          true,
	"auth.clients[].name":                   true,
	"auth.clients[].api_key":                true,
	"auth.clients[].secret_key":             true,
	"auth.clients[].passphrase":             true,
	"auth.clients[].rate":                   true,
	"auth.clients[].burst":                  true,
	"auth.clients[].share":                  true,
	"auth.clients[].api_key_file":           true,
	"auth.clients[].secret_key_file":        true,
	"auth.clients[].passphrase_file":        true,
	"auth.ip_rate":                          true,
	"auth.ip_burst":                         true,
	"auth.trusted_proxies":                  true,
	"auth.ip_max_tracked":                   true,
	"auth.ip_v6_prefix":                     true,
	"cache.max_bytes":                       false,
	"cache.identity_bytes":                  false,
	"cache.disk_path":                       false,
	"cache.disk_max_bytes":                  false,
	"cache.stale_while_revalidate.head":     true,
	"cache.stale_while_revalidate.final":    true,
	"cache.stale_while_revalidate.volatile": true,
	"cache.stale_while_revalidate.negative": true,
	"cache.stale_if_error":                  true,
	"cache.batch_window":                    true,
	"cache.cross_chain_settle":              true,
	"cache.block_pages":                     true,
	"cache.policy":                          true,
	"cache.ttl":                             true,

	"server.read_timeout":     false,
	"server.write_timeout":    false,
	"server.idle_timeout":     false,
	"server.max_header_bytes": false,
	"server.max_url_bytes":    true,
	"server.gomaxprocs":       false,
	"server.plain_conns":      false,
	"server.max_conns":        false,
	"server.max_conns_per_ip": false,

	"log.level":           true,
	"log.format":          false,
	"log.access_sample":   true,
	"log.repeat_interval": true,
	"log.access_fields":   true,

	"shared.redis_addr":          false,
	"shared.redis_username":      false,
	"shared.redis_password":      false,
	"shared.redis_tls":           false,
	"shared.redis_cluster":       false,
	"shared.timeout":             false,
	"shared.lock_ttl":            false,
	"shared.lock_wait":           false,
	"shared.prefix":              false,
	"shared.local_share":         false,
	"shared.redis_username_file": false,
	"shared.redis_password_file": false,

	"cors.allow_origins": true,
	"cors.allow_headers": true,
	"cors.max_age":       true,

	"admin.purge_token":      true,
	"admin.purge_token_file": true,
	"admin.top_sample":       true,

	// Tracing is set up once, at start (its exporter and sampler).
	"tracing.otlp_endpoint": false,
	"tracing.sample_ratio":  false,
	"tracing.service_name":  false,

	// The hub is built once, at start; the poller reads its interval and
	// variants at each poll.
	"stream.enabled":         false,
	"stream.max_subscribers": false,
	"stream.max_per_ip":      false,
	"stream.heartbeat":       false,
	"stream.history":         false,
	"stream.buffer":          false,
	"stream.write_timeout":   false,
	"stream.retry":           false,
	"stream.poll_interval":   true,
	"stream.variants":        true,
	"stream.lease":           false,

	// Behind a CDN (docs/cdn.md): the headers are read at every answer
	// (an answer's tags are built once, at its first answer under a
	// naming); the purge sender is built once, at start.
	"cdn.tag_header":     true,
	"cdn.tag_prefix":     true,
	"cdn.browser_ttl":    true,
	"cdn.provider":       false,
	"cdn.endpoints":      false,
	"cdn.service":        false,
	"cdn.api_token":      false,
	"cdn.api_token_file": false,
	"cdn.soft":           false,
	"cdn.resend_after":   false,
	"cdn.rate":           false,
	"cdn.burst":          false,
	"cdn.batch_tags":     false,
	"cdn.timeout":        false,
	"cdn.lease":          false,
	"cdn.head_span":      false,

	// Read by chain truth from the next block list on.
	"chain_finality_depth": true,
}

// ReloadRules is every key with what a reload does with it: true applied,
// false refused until a restart. A fresh copy.
func ReloadRules() map[string]bool {
	out := make(map[string]bool, len(reloadRules))
	for k, v := range reloadRules {
		out[k] = v
	}
	return out
}

// Keys is every key path of Config as ReloadRules writes it: a list of
// sections and each field of its items ([]), a map as one key.
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("koanf")
			if tag == "" || tag == "-" {
				continue
			}
			key := joinPath(prefix, tag)
			switch {
			case f.Type.Kind() == reflect.Struct && f.Type != durationType:
				walk(f.Type, key)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				out = append(out, key)
				walk(f.Type.Elem(), key+"[]")
			default:
				out = append(out, key)
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	slices.Sort(out)
	return out
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// listIndex is the index of a list item in a key path: accounts[2].
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// ruleKey is the key of ReloadRules that path (with list indices) falls
// under.
func ruleKey(path string) string { return listIndex.ReplaceAllString(path, "[]") }

// Changed is every key whose value differs between old and next, in
// order, list items by index (upstream.accounts[1].rate); a list of
// sections of another length is its own key (auth.clients). It holds key
// paths only, never a value.
func Changed(old, next *Config) []string {
	var out []string
	var walk func(a, b reflect.Value, path string)
	walk = func(a, b reflect.Value, path string) {
		switch {
		case a.Kind() == reflect.Struct && a.Type() != durationType:
			for i := range a.NumField() {
				tag := a.Type().Field(i).Tag.Get("koanf")
				if tag == "" || tag == "-" {
					continue
				}
				walk(a.Field(i), b.Field(i), joinPath(path, tag))
			}
		case a.Kind() == reflect.Slice && a.Type().Elem().Kind() == reflect.Struct:
			if a.Len() != b.Len() {
				out = append(out, path)
				return
			}
			for i := range a.Len() {
				walk(a.Index(i), b.Index(i), path+"["+strconv.Itoa(i)+"]")
			}
		case a.Kind() == reflect.Slice || a.Kind() == reflect.Map:
			if a.Len() == 0 && b.Len() == 0 {
				return // nil and empty are the same
			}
			if !reflect.DeepEqual(a.Interface(), b.Interface()) && !(path == "chains" && sameChains(old.Chains, next.Chains)) {
				out = append(out, path)
			}
		default:
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				out = append(out, path)
			}
		}
	}
	walk(reflect.ValueOf(*old), reflect.ValueOf(*next), "")
	return out
}

// sameChains: chain names are matched case-insensitively, so a change of
// case (or of surrounding space) is no change.
func sameChains(a, b []string) bool {
	return slices.EqualFunc(a, b, func(x, y string) bool {
		return strings.EqualFold(strings.TrimSpace(x), strings.TrimSpace(y))
	})
}

// ReloadChanges compares the running configuration with the one a reload
// read: the keys that changed (Changed), and an error naming, each as
// "restart to change <key>", those a reload cannot apply. On error the
// reload must apply nothing.
func ReloadChanges(old, next *Config) (changed []string, err error) {
	changed = Changed(old, next)
	var refused []string
	for _, k := range changed {
		if applied, ok := reloadRules[ruleKey(k)]; !ok || !applied {
			refused = append(refused, "restart to change "+k)
		}
	}
	if len(refused) > 0 {
		return changed, errors.New(strings.Join(refused, "; "))
	}
	return changed, nil
}
