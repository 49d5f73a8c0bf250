// Package purge is what the edge removes and why: the selectors of POST
// /purge, the tags entries are selected by, the log of recent purges that
// judges answers stored or read after them, and the fleet's purge log.
package purge

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
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
type kind uint8

const (
	kindURL kind = iota
	kindHash
	kindHeights
	kindRoute
	kindAll
)

var kindNames = [...]string{"url", "hash", "heights", "route", "all"}

func (k kind) String() string { return kindNames[k] }

// Selector is a checked purge request: what it selects, in tag terms.
type Selector struct {
	kind     kind
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
	req Request
}

// match reports whether e is selected. It runs under the cache's lock, on
// every entry for all but url: plain comparisons only.
func (s *Selector) match(e *cache.Entry) bool {
	if s.before != 0 && e.Stored >= s.before || s.classes != 0 && s.classes&(1<<e.Class) == 0 {
		return false
	}
	t := &e.Tags
	switch s.kind {
	case kindURL:
		return slices.Contains(s.keys, e.Key)
	case kindHash:
		return t.Chain == s.chain && t.HasHash(s.hash)
	case kindHeights:
		return t.Chain == s.chain && t.HasHeights(s.from, s.to)
	case kindRoute:
		return s.routes&(1<<t.Route) != 0 && (s.chain == 0 || t.Chain == s.chain)
	}
	return true
}

// Mode is "soft" or "hard".
func (s *Selector) Mode() string {
	if s.soft {
		return "soft"
	}
	return "hard"
}

// Request is the JSON body of POST /purge.
type Request struct {
	URL     string     `json:"url,omitempty"`
	Hash    string     `json:"hash,omitempty"`
	Chain   string     `json:"chain,omitempty"`
	Heights *heightsIn `json:"heights,omitempty"`
	Route   string     `json:"route,omitempty"`
	All     bool       `json:"all,omitempty"`
	Soft    bool       `json:"soft,omitempty"`
}

type heightsIn struct {
	Chain string `json:"chain"`
	From  int64  `json:"from"`
	To    int64  `json:"to"`
}

var requestFields = []string{"url", "hash", "chain", "heights", "route", "all", "soft"}

// Parse checks a purge request's body. Its errors are envelopes
// naming the field at fault.
func Parse(body []byte, chains []string) (*Selector, *envelope.Error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, errPurgeMissing("selector")
		}
		return nil, envelope.Invalid("body", "not a JSON object")
	}
	for k := range fields {
		if !slices.Contains(requestFields, k) {
			return nil, envelope.Invalid(k, "unknown field (selectors: url, hash with chain, heights, route with an optional chain, all; and soft)")
		}
	}
	var req Request
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
	sel := &Selector{soft: req.Soft}
	var err *envelope.Error
	switch given[0] {
	case "url":
		err = selectURL(sel, &req, chains)
	case "hash":
		err = selectHash(sel, &req, chains)
	case "heights":
		err = selectHeights(sel, &req, fields["heights"], chains)
	case "route":
		err = selectRoute(sel, &req, chains)
	case "all":
		sel.kind = kindAll
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
func selectURL(sel *Selector, req *Request, chains []string) *envelope.Error {
	sel.kind = kindURL
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
	var q route.Params
	if e := q.Parse(r, u.QueryArgs(), chains); e != nil {
		return envelope.Invalid("url", e.Msg)
	}
	sel.keys = []string{string(q.Key)}
	if r.PerHash {
		for i := range q.NHashes {
			sel.keys = append(sel.keys, route.HashKey(string(q.Chain), string(q.Hash(i))))
		}
	}
	req.URL = sel.keys[0]
	return nil
}

// chainOf checks a chain name of the request and returns its canonical
// name and tag.
func chainOf(name, field string, chains []string) (string, uint8, *envelope.Error) {
	if strings.TrimSpace(name) == "" {
		return "", 0, envelope.Missing(field)
	}
	c, err := route.AppendChain(nil, bytes.TrimSpace([]byte(name)), chains, field)
	if err != nil {
		return "", 0, err
	}
	return string(c), ChainTag(chains, string(c)), nil
}

func selectHash(sel *Selector, req *Request, chains []string) *envelope.Error {
	sel.kind = kindHash
	h, err := route.AppendHex(nil, bytes.TrimSpace([]byte(req.Hash)), 64, "hash")
	if err != nil {
		return err
	}
	if req.Chain, sel.chain, err = chainOf(req.Chain, "chain", chains); err != nil {
		return err
	}
	req.Hash = string(h)
	sel.hash = hashDigest(req.Hash)
	return nil
}

func selectHeights(sel *Selector, req *Request, raw json.RawMessage, chains []string) *envelope.Error {
	sel.kind = kindHeights
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
	var h heightsIn
	var err *envelope.Error
	var name string
	if c, ok := in["chain"]; ok && json.Unmarshal(c, &name) != nil {
		return envelope.Invalid("chain", "must be a string")
	}
	if h.Chain, sel.chain, err = chainOf(name, "chain", chains); err != nil {
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

func selectRoute(sel *Selector, req *Request, chains []string) *envelope.Error {
	sel.kind = kindRoute
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
		if req.Chain, sel.chain, err = chainOf(req.Chain, "chain", chains); err != nil {
			return err
		}
	}
	req.Route = name
	return nil
}

// Result is the answer to a purge: the entries affected per tier.
type Result struct {
	Selector string `json:"selector"`
	Mode     string `json:"mode"`
	Memory   int    `json:"memory"` // entries of this node's cache
	Disk     int    `json:"disk"`   // entries of this node's disk tier (cache.disk_path), removed before the answer
	// DiskError says the purge could not be written to the disk tier's
	// file (Purger.Disk): Disk is then what it selects there, hidden by
	// this process and retried; the text says whether the next start
	// begins with an empty file.
	DiskError string `json:"disk_error,omitempty"`
	// Redis counts the shared tier's entries found by key (those of a url,
	// a hash's own entry): deleted (hard) or there to be read as stale
	// (soft). Entries found by tags are judged as each node reads them.
	Redis int   `json:"redis"`
	Fleet bool  `json:"fleet"`         // passed on to every node (fleet mode)
	Seq   int64 `json:"seq,omitempty"` // the record's number in the fleet's purge log
}

// Describe is the selector's value as logged.
func (s *Selector) Describe() string {
	r := s.req
	switch s.kind {
	case kindURL:
		return r.URL
	case kindHash:
		return r.Chain + " " + r.Hash
	case kindHeights:
		return r.Heights.Chain + " " + strconv.FormatInt(r.Heights.From, 10) + ".." + strconv.FormatInt(r.Heights.To, 10)
	case kindRoute:
		if r.Chain != "" {
			return r.Route + " " + r.Chain
		}
		return r.Route
	}
	return "all"
}

// sharedKeys are the Redis entries a selector names by key: a url's, and
// a hash's own entry. Others are found by tags as nodes read them.
func (s *Selector) sharedKeys() []string {
	switch s.kind {
	case kindURL:
		return s.keys
	case kindHash:
		return []string{route.HashKey(s.req.Chain, s.req.Hash)}
	}
	return nil
}

// Kind is the selector's kind: url, hash, heights, route or all (the
// selector label of purges_total).
func (s *Selector) Kind() string { return s.kind.String() }

// Replaced selects, hard, every answer of chain holding a height from fork
// up that is older than at (unix ns): what a reorganization found at at
// replaced. chains are the configured ones, in order.
func Replaced(chains []string, chain string, fork, at int64) *Selector {
	return &Selector{kind: kindHeights, chain: ChainTag(chains, chain), from: fork, to: math.MaxInt64, before: at,
		req: Request{Heights: &heightsIn{Chain: chain, From: fork, To: math.MaxInt64}}}
}

// Request is the selector's request as normalized (chain names in upper
// case, the url's key): what is logged and what the fleet passes on.
func (s *Selector) Request() Request { return s.req }
