package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
)

// POST /purge on the admin port (docs/purge.md): the operator
// removes answers the edge holds, or marks them stale, by one selector:
//
//	{"url": "/api/v5/chainx/block/block-list?chainShortName=chainx"}
//	{"hash": "0x..", "chain": "CHAINX"}
//	{"heights": {"chain": "CHAINX", "from": 100, "to": 120}}
//	{"route": "block-list", "chain": "CHAINX"}   (chain optional)
//	{"all": true}
//
// with "soft": true to mark stale instead of deleting. The answer counts
// the entries affected.

// Selector kinds, also the selector label of purges_total.
type purgeKind uint8

const (
	purgeURL purgeKind = iota
	purgeHash
	purgeHeights
	purgeRoute
	purgeAll
)

var purgeKindNames = [...]string{"url", "hash", "heights", "route", "all"}

func (k purgeKind) String() string { return purgeKindNames[k] }

// selector is a checked purge request: what it selects, in tag terms.
type selector struct {
	kind     purgeKind
	soft     bool
	keys     []string // url: the key, and for a per-hash route the hashes' entries
	chain    uint8    // chain tag; 0 = any (route without chain, url, all)
	hash     uint64   // hash: digest
	from, to int64    // heights, inclusive
	routes   uint32   // route: bit per route tag
	// before: only entries whose answers are older (unix ns); 0 = any. A
	// purge from another node spares what this node fetched after it.
	before int64
	// classes: bit per cache.Class selected; 0 = every class (a reorg
	// spares final answers, or purges only them).
	classes uint8
	// req is the request as normalized (chain names in upper case, the
	// url's key): what is logged and what the fleet passes on.
	req purgeRequest
}

// match reports whether e is selected. It runs under the cache's lock, on
// every entry for all but url: plain comparisons only.
func (s *selector) match(e *cache.Entry) bool {
	if s.before != 0 && e.Stored >= s.before || s.classes != 0 && s.classes&(1<<e.Class) == 0 {
		return false
	}
	t := &e.Tags
	switch s.kind {
	case purgeURL:
		return slices.Contains(s.keys, e.Key)
	case purgeHash:
		return t.Chain == s.chain && t.HasHash(s.hash)
	case purgeHeights:
		return t.Chain == s.chain && t.HasHeights(s.from, s.to)
	case purgeRoute:
		return s.routes&(1<<t.Route) != 0 && (s.chain == 0 || t.Chain == s.chain)
	}
	return true
}

func (s *selector) mode() string {
	if s.soft {
		return "soft"
	}
	return "hard"
}

// purgeRequest is the JSON body of POST /purge.
type purgeRequest struct {
	URL     string          `json:"url,omitempty"`
	Hash    string          `json:"hash,omitempty"`
	Chain   string          `json:"chain,omitempty"`
	Heights *purgeHeightsIn `json:"heights,omitempty"`
	Route   string          `json:"route,omitempty"`
	All     bool            `json:"all,omitempty"`
	Soft    bool            `json:"soft,omitempty"`
}

type purgeHeightsIn struct {
	Chain string `json:"chain"`
	From  int64  `json:"from"`
	To    int64  `json:"to"`
}

var purgeFields = []string{"url", "hash", "chain", "heights", "route", "all", "soft"}

// parsePurge checks a purge request's body. Its errors are envelopes
// naming the field at fault.
func (p *Proxy) parsePurge(body []byte, s *settings) (*selector, *envelope.Error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, errPurgeMissing("selector")
		}
		return nil, envelope.Invalid("body", "not a JSON object")
	}
	for k := range fields {
		if !slices.Contains(purgeFields, k) {
			return nil, envelope.Invalid(k, "unknown field (selectors: url, hash with chain, heights, route with an optional chain, all; and soft)")
		}
	}
	var req purgeRequest
	var given []string
	for _, f := range []struct {
		name string
		dst  any
	}{{"url", &req.URL}, {"hash", &req.Hash}, {"chain", &req.Chain}, {"route", &req.Route}, {"all", &req.All}, {"soft", &req.Soft}} {
		raw, ok := fields[f.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			what := "a string"
			if f.name == "all" || f.name == "soft" {
				what = "true or false"
			}
			return nil, envelope.Invalid(f.name, "must be "+what)
		}
	}
	for _, name := range []string{"url", "hash", "heights", "route", "all"} {
		if _, ok := fields[name]; ok && (name != "all" || req.All) {
			given = append(given, name)
		}
	}
	switch {
	case len(given) == 0:
		return nil, errPurgeMissing("selector")
	case len(given) > 1:
		return nil, envelope.Invalid(given[0], "give one selector, not "+strings.Join(given, " and "))
	}
	sel := &selector{soft: req.Soft}
	var err *envelope.Error
	switch given[0] {
	case "url":
		err = p.selectURL(sel, &req, s)
	case "hash":
		err = p.selectHash(sel, &req, s)
	case "heights":
		err = p.selectHeights(sel, &req, fields["heights"], s)
	case "route":
		err = p.selectRoute(sel, &req, s)
	case "all":
		sel.kind = purgeAll
		if req.Chain != "" {
			err = envelope.Invalid("chain", "goes with hash or route only")
		}
	}
	if err != nil {
		return nil, err
	}
	sel.req = req
	return sel, nil
}

func errPurgeMissing(name string) *envelope.Error {
	if name == "selector" {
		return &envelope.Error{Status: 400, Code: "50014", Msg: "Parameter selector cannot be empty: give one of url, hash (with chain), heights, route, all"}
	}
	return envelope.Missing(name)
}

// selectURL normalizes a request URI as the public handler does, to its
// one key. A per-hash route's answer is assembled from its hashes'
// entries, which go with it: else the next request would assemble it again.
func (p *Proxy) selectURL(sel *selector, req *purgeRequest, s *settings) *envelope.Error {
	sel.kind = purgeURL
	if req.Chain != "" {
		return envelope.Invalid("chain", "goes with hash or route only; the url names its chain")
	}
	if strings.TrimSpace(req.URL) == "" {
		return envelope.Missing("url")
	}
	var u fasthttp.URI
	if err := u.Parse(nil, []byte(strings.TrimSpace(req.URL))); err != nil {
		return envelope.Invalid("url", "not a request URI")
	}
	r := route.ByPath(u.Path())
	if r == nil {
		return envelope.Invalid("url", "path is none of the six routes")
	}
	var q query
	if e := q.Parse(r, u.QueryArgs(), s.chains); e != nil {
		return envelope.Invalid("url", e.Msg)
	}
	sel.keys = []string{string(q.Key)}
	if r.PerHash {
		for i := range q.NHashes {
			sel.keys = append(sel.keys, hashKey(string(q.Chain), string(q.Hash(i))))
		}
	}
	req.URL = sel.keys[0]
	return nil
}

// chainOf checks a chain name of the request and returns its canonical
// name and tag.
func (p *Proxy) chainOf(name, field string, s *settings) (string, uint8, *envelope.Error) {
	if strings.TrimSpace(name) == "" {
		return "", 0, envelope.Missing(field)
	}
	c, err := route.AppendChain(nil, bytes.TrimSpace([]byte(name)), s.chains, field)
	if err != nil {
		return "", 0, err
	}
	return string(c), p.chainTag(string(c)), nil
}

func (p *Proxy) selectHash(sel *selector, req *purgeRequest, s *settings) *envelope.Error {
	sel.kind = purgeHash
	h, err := route.AppendHex(nil, bytes.TrimSpace([]byte(req.Hash)), 64, "hash")
	if err != nil {
		return err
	}
	if req.Chain, sel.chain, err = p.chainOf(req.Chain, "chain", s); err != nil {
		return err
	}
	req.Hash = string(h)
	sel.hash = hashDigest(req.Hash)
	return nil
}

func (p *Proxy) selectHeights(sel *selector, req *purgeRequest, raw json.RawMessage, s *settings) *envelope.Error {
	sel.kind = purgeHeights
	if req.Chain != "" {
		return envelope.Invalid("chain", "goes inside heights: {\"heights\":{\"chain\":..,\"from\":..,\"to\":..}}")
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil || in == nil {
		return envelope.Invalid("heights", "must be an object {\"chain\":..,\"from\":..,\"to\":..}")
	}
	for k := range in {
		if k != "chain" && k != "from" && k != "to" {
			return envelope.Invalid("heights."+k, "unknown field (chain, from, to)")
		}
	}
	var h purgeHeightsIn
	var err *envelope.Error
	var name string
	if c, ok := in["chain"]; ok && json.Unmarshal(c, &name) != nil {
		return envelope.Invalid("chain", "must be a string")
	}
	if h.Chain, sel.chain, err = p.chainOf(name, "chain", s); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"from", &h.From}, {"to", &h.To}} {
		v, ok := in[f.name]
		if !ok {
			return envelope.Missing(f.name)
		}
		n, ok := heightValue(v)
		if !ok {
			return envelope.Invalid(f.name, "not a block height (a non-negative integer)")
		}
		*f.dst = n
	}
	if h.From > h.To {
		return envelope.Invalid("from", "above to")
	}
	sel.from, sel.to = h.From, h.To
	req.Heights = &h
	return nil
}

// heightValue reads a height given as a JSON number or, as the explorer
// API writes heights, a decimal string.
func heightValue(raw json.RawMessage) (int64, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil && n >= 0
}

func (p *Proxy) selectRoute(sel *selector, req *purgeRequest, s *settings) *envelope.Error {
	sel.kind = purgeRoute
	name := strings.TrimSpace(req.Route)
	if name == "" {
		return envelope.Missing("route")
	}
	i := slices.Index(route.Names(), name)
	if i < 0 {
		return envelope.Invalid("route", "not one of "+strings.Join(route.Names(), ", "))
	}
	r := &route.Table[i]
	sel.routes = 1 << routeTag(r)
	if r.PerHash {
		sel.routes |= 1 << tagPerHash
	}
	if req.Chain != "" {
		var err *envelope.Error
		if req.Chain, sel.chain, err = p.chainOf(req.Chain, "chain", s); err != nil {
			return err
		}
	}
	req.Route = name
	return nil
}

// purgeMemory applies sel to this node's cache and returns the entries
// affected.
func (p *Proxy) purgeMemory(sel *selector, now time.Time) int {
	if sel.kind == purgeURL {
		return p.cache.PurgeKeys(sel.keys, sel.match, sel.soft, now)
	}
	return p.cache.Purge(sel.match, sel.soft, now)
}

// inflight bounds how long an answer can be on its way from the upstream
// to the cache: all attempts of a call (upstream.retry_max_time), the wait
// for a token (budget_wait) and one more attempt's timeout, plus a second.
func (p *Proxy) inflight() time.Duration {
	u := p.settings.Load().cfg.Upstream
	return u.RetryMaxTime + u.BudgetWait + u.Timeout + time.Second
}

// gate is the cache's Gate: an answer that was on its way when a purge
// selecting it ran is judged by that purge as it is stored.
func (p *Proxy) gate(e *cache.Entry) (drop bool, staleFrom int64) {
	return p.purges.verdict(e, p.clock().Add(-p.inflight()).UnixNano())
}

// purgeTokenOf is the digest of the purge token in force; nil: purge is
// off. Digests of equal length are compared, so the time of a comparison
// tells nothing about the token's length.
func purgeTokenOf(cfg config.Admin) (*[32]byte, error) {
	tok, err := cfg.Token()
	if err != nil || tok == "" {
		return nil, err
	}
	sum := sha256.Sum256([]byte(tok))
	return &sum, nil
}

var (
	errPurgeOff      = &envelope.Error{Status: 404, Code: "404", Msg: "Not found: purge is off (admin.purge_token is not set)"}
	errPurgeNoToken  = &envelope.Error{Status: 401, Code: "50103", Msg: "Authorization header with a Bearer token is required"}
	errPurgeBadToken = &envelope.Error{Status: 401, Code: "50111", Msg: "Invalid purge token"}
	errPurgeMethod   = &envelope.Error{Status: 405, Code: "50115", Msg: "Method not allowed: use POST"}
)

// servePurge is POST /purge.
func (p *Proxy) servePurge(ctx *fasthttp.RequestCtx) {
	s := p.settings.Load()
	if !p.adminAuthorized(ctx, s, errPurgeOff, "purge") {
		return
	}
	if !ctx.IsPost() {
		adminError(ctx, errPurgeMethod)
		return
	}
	sel, perr := p.parsePurge(ctx.PostBody(), s)
	if perr != nil {
		adminError(ctx, perr)
		return
	}
	res, err := p.purge(sel)
	p.log.Info("purge", "selector", sel.kind.String(), "value", sel.describe(), "mode", sel.mode(),
		"memory", res.Memory, "redis", res.Redis, "fleet", res.Fleet, "seq", res.Seq, "caller", ctx.RemoteAddr().String())
	if err != nil {
		p.log.Warn("purge not passed on to the fleet: the shared tier did not answer", "err", err)
		adminError(ctx, &envelope.Error{Status: 503, Code: "50001", Msg: "Purged this node only (" + strconv.Itoa(res.Memory) +
			" entries in memory): the shared tier did not answer, so the other nodes were not told; retry"})
		return
	}
	out, _ := json.Marshal(struct {
		Code string        `json:"code"`
		Msg  string        `json:"msg"`
		Data []purgeResult `json:"data"`
	}{"0", "", []purgeResult{res}})
	ctx.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	ctx.SetBody(out)
}

// purgeResult is the answer to a purge: the entries affected per tier.
type purgeResult struct {
	Selector string `json:"selector"`
	Mode     string `json:"mode"`
	Memory   int    `json:"memory"` // entries of this node's cache
	// Redis counts the shared tier's entries found by key (those of a url,
	// a hash's own entry): deleted (hard) or there to be read as stale
	// (soft). Entries found by tags are judged as each node reads them.
	Redis int   `json:"redis"`
	Fleet bool  `json:"fleet"`         // passed on to every node (fleet mode)
	Seq   int64 `json:"seq,omitempty"` // the record's number in the fleet's purge log
}

// purge applies sel to this node, passes it on to the fleet, and counts
// it. The purge is logged first: an answer stored while the cache is
// scanned is judged by it. The error says the fleet was not told.
func (p *Proxy) purge(sel *selector) (purgeResult, error) {
	return p.purgeAt(sel, p.clock().UnixNano())
}

// purgeAt is purge of the answers older than at (unix ns): a reorganization
// spares the answer that showed it and those stored after it.
func (p *Proxy) purgeAt(sel *selector, at int64) (purgeResult, error) {
	now := p.clock()
	p.purges.add(purgeRecord{at: at, sel: sel}, now.Add(-p.keepPurges()).UnixNano())
	res := purgeResult{Selector: sel.kind.String(), Mode: sel.mode()}
	res.Memory = p.purgeMemory(sel, now)
	p.metrics.Purges.WithLabelValues(sel.kind.String(), sel.mode()).Inc()
	if p.fleet == nil {
		return res, nil
	}
	req, _ := json.Marshal(sel.req)
	seq, found, err := p.fleet.PublishPurge(at, req, sel.sharedKeys(), sel.soft, p.retain())
	res.Redis, res.Seq, res.Fleet = found, seq, err == nil
	return res, err
}

// describe is the selector's value as logged.
func (s *selector) describe() string {
	r := s.req
	switch s.kind {
	case purgeURL:
		return r.URL
	case purgeHash:
		return r.Chain + " " + r.Hash
	case purgeHeights:
		return r.Heights.Chain + " " + strconv.FormatInt(r.Heights.From, 10) + ".." + strconv.FormatInt(r.Heights.To, 10)
	case purgeRoute:
		if r.Chain != "" {
			return r.Route + " " + r.Chain
		}
		return r.Route
	}
	return "all"
}

// adminError writes an envelope on the admin port.
func adminError(ctx *fasthttp.RequestCtx, e *envelope.Error) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hdrCacheControl, ccNoStore)
	switch e.Status {
	case fasthttp.StatusUnauthorized: // RFC 6750 section 3
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="explorer-edge purge"`)
	case fasthttp.StatusMethodNotAllowed:
		ctx.Response.Header.Set("Allow", "POST")
	}
	ctx.SetBody(envelope.Append(nil, e.Code, e.Msg))
}
