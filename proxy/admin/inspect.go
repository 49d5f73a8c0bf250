package admin

import (
	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/purge"
	"sync"
	"time"
)

// Inspected is the answer of GET /cache.
type Inspected struct {
	URL   string `json:"url"` // as given
	Key   string `json:"key"` // normalized: the cache key and upstream target
	Route string `json:"route"`
	Chain string `json:"chain"`
	At    string `json:"at"` // the time the entry was judged at
	KeyState
	Tiers
	// Parts are a per-hash route's hashes, each its own entry, in the
	// order asked: the answer is assembled from them.
	Parts []Part `json:"parts,omitempty"`
}

// Tiers is what the tiers under memory hold under a key: the disk tier
// (absent without cache.disk_path) and the fleet's shared tier (absent on
// a single node).
type Tiers struct {
	Disk   *TierState `json:"disk,omitempty"`
	Shared *TierState `json:"shared,omitempty"`
}

// TierState is what one tier under memory holds under a key, read as a
// miss would read it.
type TierState struct {
	// State is miss (nothing usable held), fresh, stale or expired, once
	// the checks held its times to this node's configuration.
	State string     `json:"state"`
	Entry *EntryInfo `json:"entry"` // null: nothing held
	// Passes: a miss would take it. Else Refused says why not: it fails
	// the checks every entry read back passes (the key inside it, the
	// route's envelope with code "0", the sizes), a purge selected it, or
	// it shows blocks this node has not confirmed from the upstream
	// (docs/design.md, "Chain truth").
	Passes  bool   `json:"passes"`
	Refused string `json:"refused,omitempty"`
}

// KeyState is what the edge holds under one key.
type KeyState struct {
	State      string     `json:"state"`      // miss, fresh, stale, expired (cache.State)
	Refreshing bool       `json:"refreshing"` // a background refresh of the key is under way
	Entry      *EntryInfo `json:"entry"`      // null: nothing held
}

type Part struct {
	Hash string `json:"hash"`
	Key  string `json:"key"`
	KeyState
	Tiers
	Fetching bool `json:"fetching"` // in a batch call under way
}

type EntryInfo struct {
	Class  string `json:"class"`            // head, final, volatile, negative
	Status int    `json:"status,omitempty"` // a cached refusal's HTTP status
	Source string `json:"source"`           // upstream, shared, assembled (cache.Source)
	Stored string `json:"stored"`           // when the upstream answered (RFC 3339)
	Fresh  string `json:"fresh_until"`
	// The ends of the stale windows: served while one refresh runs,
	// served only when the upstream fails.
	StaleWhileRevalidate string  `json:"stale_while_revalidate_until"`
	StaleIfError         string  `json:"stale_if_error_until"`
	Age                  float64 `json:"age_seconds"`
	TTL                  float64 `json:"ttl_seconds"` // left fresh; negative once stale
	// SizeStored is the answer's bytes as held (gzip when smaller),
	// SizeIdentity its bytes as JSON, Cost what the cache counts for it.
	SizeStored   int     `json:"size_stored"`
	SizeIdentity int     `json:"size_identity"`
	Gzip         bool    `json:"gzip"`
	Cost         int64   `json:"cost_bytes"`
	ETag         string  `json:"etag"`
	Tags         TagInfo `json:"tags"`
}

type TagInfo struct {
	Route   string   `json:"route"` // "per-hash" for a hash's entry; "" untagged
	Chain   string   `json:"chain"`
	Heights *Heights `json:"heights"` // null: no block height in the answer
	Hashes  int      `json:"hashes"`  // hashes the key asks for
}

type Heights struct {
	From int64 `json:"from"`
	To   int64 `json:"to"` // inclusive
}

// ConfigInfo is what GET /config tells beside the configuration: its hash,
// when it was applied, and the last reload's outcome.
type ConfigInfo struct {
	mu      sync.Mutex
	hash    string
	started time.Time
	applied time.Time // at start, or by the last reload applied
	last    *ReloadOutcome
}

type ReloadOutcome struct {
	At     string `json:"at"`
	Result string `json:"result"`          // ok, error (config_reloads_total's)
	Error  string `json:"error,omitempty"` // why it was refused, secrets redacted
}

// Applied records a configuration of hash in force from now (at start
// when start).
func (c *ConfigInfo) Applied(hash string, now time.Time, start bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hash, c.applied = hash, now
	if start {
		c.started = now
	}
}

// Noted records the outcome of a reload at now: nil when it was applied,
// else why it was refused (redacted by the caller).
func (c *ConfigInfo) Noted(err error, now time.Time) {
	o := &ReloadOutcome{At: now.UTC().Format(time.RFC3339Nano), Result: "ok"}
	if err != nil {
		o.Result, o.Error = "error", config.Redact(err.Error())
	}
	c.mu.Lock()
	c.last = o
	c.mu.Unlock()
}

// report is GET /config's answer for cfg, the configuration in force.
func (c *ConfigInfo) report(cfg map[string]any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return struct {
		Hash       string         `json:"hash"`
		HashOf     string         `json:"hash_of"`
		Started    string         `json:"started"`
		Applied    string         `json:"applied"`
		LastReload *ReloadOutcome `json:"last_reload"` // null: none since the start
		Config     map[string]any `json:"config"`
	}{
		Hash: c.hash, HashOf: "sha256 of config as canonical JSON (keys sorted, secrets redacted)",
		Started: c.started.UTC().Format(time.RFC3339Nano), Applied: c.applied.UTC().Format(time.RFC3339Nano),
		LastReload: c.last, Config: cfg,
	}
}

// KeyStateOf is what a cache holds under a key at now: its entry e (nil:
// none), whether a refresh of it is under way; chains name the chain tags.
func KeyStateOf(e *cache.Entry, now time.Time, refreshing bool, chains []string) KeyState {
	k := KeyState{State: e.StateAt(now.UnixNano()).String(), Refreshing: refreshing}
	if e == nil {
		return k
	}
	n := now.UnixNano()
	stored := e.Body
	if e.Gzip != nil {
		stored = e.Gzip
	}
	k.Entry = &EntryInfo{
		Class: e.Class.String(), Status: e.Status, Source: e.Source.String(),
		Stored: rfc3339(e.Stored), Fresh: rfc3339(e.Fresh),
		StaleWhileRevalidate: rfc3339(e.Fresh + e.StaleWhileRevalidate),
		StaleIfError:         rfc3339(e.Fresh + max(e.StaleIfError, e.StaleWhileRevalidate)),
		Age:                  max(float64(n-e.Stored), 0) / 1e9,
		TTL:                  float64(e.Fresh-n) / 1e9,
		SizeStored:           len(stored), SizeIdentity: e.Size, Gzip: e.Gzip != nil, Cost: e.Cost(),
		ETag: string(e.ETag),
		Tags: tagInfo(&e.Tags, chains),
	}
	return k
}

// tagInfo names an entry's tags (purge/tags.go).
func tagInfo(t *cache.Tags, chains []string) TagInfo {
	var out TagInfo
	out.Route, out.Chain = purge.TagNames(t, chains)
	if t.Lo < t.Hi {
		out.Heights = &Heights{From: t.Lo, To: t.Hi - 1}
	}
	out.Hashes = len(t.Hashes)
	return out
}

func rfc3339(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
