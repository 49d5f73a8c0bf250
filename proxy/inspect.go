package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/route"
)

// Looking inside a running edge, on the admin port and behind the purge
// token (docs/operations.md, The admin port):
//
//	GET /cache?url=<a public request URI>   what the edge holds for that question
//	GET /cache/top?n=20                       the most-asked keys of the last minutes (top.go)
//	GET /config                               the configuration in force, secrets redacted
//
// None of them asks the upstream or the shared tier, or changes what the
// cache holds.

var (
	errInspectOff = &envelope.Error{Status: 404, Code: "404", Msg: "Not found: /cache and /config are off (admin.purge_token is not set)"}
	errGetOnly    = &envelope.Error{Status: 405, Code: "50115", Msg: "Method not allowed: use GET"}
)

// adminAuthorized checks the request's Authorization: Bearer against
// admin.purge_token, as every operation of the admin port beyond /metrics
// and the probes does; when it fails, it answers the refusal (off when no
// token is set: 404; no token given or a wrong one: 401) and returns false.
// what names the operation in the sampled log line of a wrong token.
func (p *Proxy) adminAuthorized(ctx *fasthttp.RequestCtx, s *settings, off *envelope.Error, what string) bool {
	if s.purgeToken == nil {
		adminError(ctx, off)
		return false
	}
	auth := ctx.Request.Header.Peek("Authorization")
	if len(auth) < 7 || !strings.EqualFold(string(auth[:7]), "bearer ") {
		adminError(ctx, errPurgeNoToken)
		return false
	}
	sum := sha256.Sum256(bytes.TrimSpace(auth[7:]))
	if subtle.ConstantTimeCompare(sum[:], s.purgeToken[:]) != 1 {
		// Sampled: whoever reaches the admin port can repeat it at will.
		msg := what + " refused: wrong token"
		if ok, suppressed := p.sampleWarn(logsample.Key{Msg: msg}); ok {
			p.log.Warn(msg, "caller", ctx.RemoteAddr().String(), "suppressed", suppressed)
		}
		adminError(ctx, errPurgeBadToken)
		return false
	}
	return true
}

// inspectAllowed is adminAuthorized for the GET operations, and their
// method.
func (p *Proxy) inspectAllowed(ctx *fasthttp.RequestCtx, s *settings) bool {
	if !p.adminAuthorized(ctx, s, errInspectOff, "inspect") {
		return false
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		adminError(ctx, errGetOnly)
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return false
	}
	return true
}

// adminJSON answers v as the one item of an envelope of code "0", URLs
// as written (no \u0026 for &).
func adminJSON(ctx *fasthttp.RequestCtx, v any) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
		Data []any  `json:"data"`
	}{"0", "", []any{v}})
	ctx.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	ctx.SetBody(out.Bytes())
}

// inspected is the answer of GET /cache.
type inspected struct {
	URL   string `json:"url"` // as given
	Key   string `json:"key"` // normalized: the cache key and upstream target
	Route string `json:"route"`
	Chain string `json:"chain"`
	At    string `json:"at"` // the time the entry was judged at
	inspectedKey
	// Parts are a per-hash route's hashes, each its own entry, in the
	// order asked: the answer is assembled from them.
	Parts []inspectedPart `json:"parts,omitempty"`
}

// inspectedKey is what the edge holds under one key.
type inspectedKey struct {
	State      string          `json:"state"`      // miss, fresh, stale, expired (cache.State)
	Refreshing bool            `json:"refreshing"` // a background refresh of the key is under way
	Entry      *inspectedEntry `json:"entry"`      // null: nothing held
}

type inspectedPart struct {
	Hash string `json:"hash"`
	Key  string `json:"key"`
	inspectedKey
	Fetching bool `json:"fetching"` // in a batch call under way
}

type inspectedEntry struct {
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
	SizeStored   int          `json:"size_stored"`
	SizeIdentity int          `json:"size_identity"`
	Gzip         bool         `json:"gzip"`
	Cost         int64        `json:"cost_bytes"`
	ETag         string       `json:"etag"`
	Tags         inspectedTag `json:"tags"`
}

type inspectedTag struct {
	Route   string            `json:"route"` // "per-hash" for a hash's entry; "" untagged
	Chain   string            `json:"chain"`
	Heights *inspectedHeights `json:"heights"` // null: no block height in the answer
	Hashes  int               `json:"hashes"`  // hashes the key asks for
}

type inspectedHeights struct {
	From int64 `json:"from"`
	To   int64 `json:"to"` // inclusive
}

func rfc3339(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// serveInspectCache is GET /cache?url=...
func (p *Proxy) serveInspectCache(ctx *fasthttp.RequestCtx) {
	s := p.settings.Load()
	if !p.inspectAllowed(ctx, s) {
		return
	}
	raw := bytes.TrimSpace(ctx.QueryArgs().Peek("url"))
	if len(raw) == 0 {
		adminError(ctx, envelope.Missing("url"))
		return
	}
	var u fasthttp.URI
	if err := u.Parse(nil, raw); err != nil {
		adminError(ctx, envelope.Invalid("url", "not a request URI"))
		return
	}
	if len(u.RequestURI()) > s.cfg.Server.MaxURLBytes {
		adminError(ctx, envelope.ErrURL)
		return
	}
	r := route.ByPath(u.Path())
	if r == nil {
		adminError(ctx, envelope.Invalid("url", "path is none of the six routes ("+strings.Join(route.Names(), ", ")+")"))
		return
	}
	// The public path's parsing: a question it refuses is refused here
	// with the same envelope, naming the parameter.
	var q query
	if e := q.Parse(r, u.QueryArgs(), s.chains); e != nil {
		adminError(ctx, e)
		return
	}
	now := p.clock()
	out := inspected{URL: string(raw), Key: string(q.Key), Route: r.Name, Chain: string(q.Chain),
		At: now.UTC().Format(time.RFC3339Nano)}
	out.inspectedKey = p.inspectKey(out.Key, now)
	if r.PerHash {
		out.Parts = make([]inspectedPart, q.NHashes)
		for i := range q.NHashes {
			h := string(q.Hash(i))
			k := route.HashKey(out.Chain, h)
			out.Parts[i] = inspectedPart{Hash: h, Key: k, inspectedKey: p.inspectKey(k, now)}
			p.batch.mu.Lock()
			_, out.Parts[i].Fetching = p.batch.flying[k]
			p.batch.mu.Unlock()
		}
	}
	adminJSON(ctx, out)
}

// inspectKey is what this node's cache holds under key at now.
func (p *Proxy) inspectKey(key string, now time.Time) inspectedKey {
	e := p.cache.GetString(key)
	k := inspectedKey{State: e.StateAt(now.UnixNano()).String()}
	p.bgMu.Lock()
	_, k.Refreshing = p.refreshing[key]
	p.bgMu.Unlock()
	if e == nil {
		return k
	}
	n := now.UnixNano()
	stored := e.Body
	if e.Gzip != nil {
		stored = e.Gzip
	}
	k.Entry = &inspectedEntry{
		Class: e.Class.String(), Status: e.Status, Source: e.Source.String(),
		Stored: rfc3339(e.Stored), Fresh: rfc3339(e.Fresh),
		StaleWhileRevalidate: rfc3339(e.Fresh + e.StaleWhileRevalidate),
		StaleIfError:         rfc3339(e.Fresh + max(e.StaleIfError, e.StaleWhileRevalidate)),
		Age:                  max(float64(n-e.Stored), 0) / 1e9,
		TTL:                  float64(e.Fresh-n) / 1e9,
		SizeStored:           len(stored), SizeIdentity: e.Size, Gzip: e.Gzip != nil, Cost: e.Cost(),
		ETag: string(e.ETag),
		Tags: p.describeTags(&e.Tags),
	}
	return k
}

// describeTags names an entry's tags (purge/tags.go).
func (p *Proxy) describeTags(t *cache.Tags) inspectedTag {
	var out inspectedTag
	out.Route, out.Chain = purge.TagNames(t, p.settings.Load().chains)
	if t.Lo < t.Hi {
		out.Heights = &inspectedHeights{From: t.Lo, To: t.Hi - 1}
	}
	out.Hashes = len(t.Hashes)
	return out
}

// serveInspectTop is GET /cache/top?n=20.
func (p *Proxy) serveInspectTop(ctx *fasthttp.RequestCtx) {
	s := p.settings.Load()
	if !p.inspectAllowed(ctx, s) {
		return
	}
	n := 20
	if raw := bytes.TrimSpace(ctx.QueryArgs().Peek("n")); len(raw) > 0 {
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 || v > topSlots {
			adminError(ctx, envelope.Invalid("n", "not a number from 1 to "+strconv.Itoa(topSlots)))
			return
		}
		n = v
	}
	adminJSON(ctx, p.top.top(n, p.clock().UnixNano()))
}

// configInfo is what GET /config tells beside the configuration: its hash,
// when it was applied, and the last reload's outcome.
type configInfo struct {
	mu      sync.Mutex
	hash    string
	started time.Time
	applied time.Time // at start, or by the last reload applied
	last    *reloadOutcome
}

type reloadOutcome struct {
	At     string `json:"at"`
	Result string `json:"result"`          // ok, error (config_reloads_total's)
	Error  string `json:"error,omitempty"` // why it was refused, secrets redacted
}

// configApplied records cfg as the configuration in force from now: its
// hash (config_hash_info) and the time
// (config_last_reload_success_timestamp_seconds).
func (p *Proxy) configApplied(cfg *config.Config, start bool) {
	hash := cfg.RedactedHash()
	now := p.clock()
	p.conf.mu.Lock()
	p.conf.hash, p.conf.applied = hash, now
	if start {
		p.conf.started = now
	}
	p.conf.mu.Unlock()
	p.metrics.SetConfigHash(hash)
	p.metrics.ConfigReloadSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// NoteReload records the outcome of a reload (SIGHUP, watch_config) for
// GET /config: nil when it was applied (by Reload), else why it was
// refused, whatever refused it (the file, validation, a key that needs a
// restart). The command calls it after each reload.
func (p *Proxy) NoteReload(err error) {
	o := &reloadOutcome{At: p.clock().UTC().Format(time.RFC3339Nano), Result: "ok"}
	if err != nil {
		o.Result, o.Error = "error", config.Redact(err.Error())
	}
	p.conf.mu.Lock()
	p.conf.last = o
	p.conf.mu.Unlock()
}

// serveInspectConfig is GET /config.
func (p *Proxy) serveInspectConfig(ctx *fasthttp.RequestCtx) {
	s := p.settings.Load()
	if !p.inspectAllowed(ctx, s) {
		return
	}
	cfg := s.cfg
	p.conf.mu.Lock()
	out := struct {
		Hash       string         `json:"hash"`
		HashOf     string         `json:"hash_of"`
		Started    string         `json:"started"`
		Applied    string         `json:"applied"`
		LastReload *reloadOutcome `json:"last_reload"` // null: none since the start
		Config     map[string]any `json:"config"`
	}{
		Hash: p.conf.hash, HashOf: "sha256 of config as canonical JSON (keys sorted, secrets redacted)",
		Started: p.conf.started.UTC().Format(time.RFC3339Nano), Applied: p.conf.applied.UTC().Format(time.RFC3339Nano),
		LastReload: p.conf.last, Config: cfg.Redacted(),
	}
	p.conf.mu.Unlock()
	adminJSON(ctx, out)
}
