// Package route is the table of the six explorer routes the edge serves
// and everything that follows from it: each route's parameters, their
// checks and canonical form (the cache key and upstream target), default
// TTLs per class, and the classifiers that read an answer's class.
package route

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"explorer-edge/cache"
	"explorer-edge/config"
)

// kind says how a parameter is checked and normalized.
type kind uint8

const (
	kindChain    kind = iota // configured chainShortName, upper-cased
	kindAddress              // 0x + 40 hex, lower-cased
	kindHash                 // 0x + 64 hex, lower-cased
	kindHashList             // comma-separated hashes, de-duplicated in order
	kindHeight               // decimal block height, leading zeros dropped
	kindPage                 // decimal >= 1
	kindLimit                // decimal 1..max
	kindEnum                 // one of enum, case-insensitive
	// kindPin: the edge's own head=<height> of a pinned block list
	// (docs/frontends.md): decimal, leading zeros dropped; part of the
	// key, never sent upstream (such a key is answered from block items,
	// proxy/blocklist.go).
	kindPin
)

// param is one query parameter of a route.
type param struct {
	name     string
	kind     kind
	required bool
	def      string   // value implied when absent; "" = omitted from the canonical query
	max      int      // kindLimit: largest limit; kindHashList: most hashes
	enum     []string // kindEnum: allowed values, canonical spelling
	// maxOf, when set, is the largest limit instead of max: one the
	// configuration sets (SetPositionListMaxLimit).
	maxOf *atomic.Int64
}

// positionListMaxLimit is position-list's largest limit,
// upstream.position_list_max_limit: the vendor's pages say 100 (Chinese)
// and 50 (English), so it is the operator's to say which their upstream
// takes (docs/explorer-readings.md).
var positionListMaxLimit = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(100)
	return &n
}()

// SetPositionListMaxLimit sets position-list's largest limit
// (upstream.position_list_max_limit); n < 1 leaves it. It is the
// process's: the last configuration applied sets it, as a process serves
// one configuration.
func SetPositionListMaxLimit(n int) {
	if n >= 1 {
		positionListMaxLimit.Store(int64(n))
	}
}

// PositionListMaxLimit is position-list's largest limit in force.
func PositionListMaxLimit() int { return int(positionListMaxLimit.Load()) }

// ID indexes the route table; metrics are pre-resolved per ID.
type ID uint8

const (
	PositionList ID = iota
	BlockList
	TransactionList
	TransactionMulti
	TransactionFills
	InternalTransactionMulti
	Count
	Unknown = Count // label for paths outside the table
)

// Route is one operation of the explorer API (spec sections 1-6).
type Route struct {
	ID     ID
	Name   string // metric label and cache.ttl key
	Path   string // identical upstream and at the edge
	params []param
	// Window bounds page*limit where the spec says only the newest 10000
	// rows are reachable (holders, blocks). 0 = no window: other routes'
	// pages go to the upstream, which decides.
	Window int
	// PerHash routes are cached per (chain, hash): transaction-multi and
	// transaction-fills return the same records (docs/design.md, per-hash batches).
	PerHash bool
	// Classify reads an upstream answer and returns its cache class.
	Classify func(q Question, body []byte) cache.Class
	// ttl is the default fresh time of each class the route's answers can
	// have (cache.ttl.<name> overrides it); a class it does not name falls
	// back to the shortest (cache.TTLs.For).
	ttl cache.TTLs
}

var protocolTypes = []string{"transaction", "internal", "token_20", "token_721", "token_1155", "token_10"}

// Table is the whole API the edge serves. Parameter order here is the order
// of the canonical query sent upstream, chainShortName first.
var Table = [Count]Route{
	{
		ID: PositionList, Name: "position-list", Path: "/api/v5/chainx/token/position-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "tokenContractAddress", kind: kindAddress, required: true},
			{name: "holderAddress", kind: kindAddress},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", maxOf: positionListMaxLimit},
		},
		Window:   10000,
		Classify: classifyVolatile,
		ttl:      cache.TTLs{Volatile: 30 * time.Second},
	},
	{
		ID: BlockList, Name: "block-list", Path: "/api/v5/chainx/block/block-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "height", kind: kindHeight},
			{name: "head", kind: kindPin},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		Window:   10000,
		Classify: classifyBlockList,
		// Final: the block at a height alone, done, in the newest half
		// of the window, which it does not leave within the hour
		// (classifyBlockList).
		ttl: cache.TTLs{Head: time.Second, Final: time.Hour},
	},
	{
		ID: TransactionList, Name: "transaction-list", Path: "/api/v5/chainx/block/transaction-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "height", kind: kindHeight, required: true},
			{name: "protocolType", kind: kindEnum, def: "transaction", enum: protocolTypes},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		Classify: classifyTransactionList,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour},
	},
	{
		ID: TransactionMulti, Name: "transaction-multi", Path: "/api/v5/chainx/tz/cross/transaction-multi",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txId", kind: kindHashList, required: true, max: MaxHashes},
		},
		PerHash:  true,
		Classify: classifyCross,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
	{
		ID: TransactionFills, Name: "transaction-fills", Path: "/api/v5/chainx/tz/cross/transaction-fills",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txid", kind: kindHash, required: true},
		},
		PerHash:  true,
		Classify: classifyCross,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
	{
		ID: InternalTransactionMulti, Name: "internal-transaction-multi", Path: "/api/v5/chainx/transaction/internal-transaction-multi",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txId", kind: kindHashList, required: true, max: MaxHashes},
			{name: "page", kind: kindPage, def: "1"},
			// Default and maximum are "not shown" in the spec; explorer-sim
			// and the edge use the block routes' 20 and 100.
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		Classify: classifyInternal,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
}

// MaxHashes is the spec's limit on hashes in one txId list.
const MaxHashes = 20

// ByPath finds the route of a request path without allocating (the
// comparison of string(path) makes no string).
func ByPath(path []byte) *Route {
	for i := range Table {
		if string(path) == Table[i].Path {
			return &Table[i]
		}
	}
	return nil
}

// param is the route's parameter named name, or nil.
func (r *Route) param(name []byte) *param {
	for i := range r.params {
		if r.params[i].name == string(name) {
			return &r.params[i]
		}
	}
	return nil
}

// Names lists the routes in table order (metric labels, config keys).
func Names() []string {
	names := make([]string, Count)
	for i := range Table {
		names[i] = Table[i].Name
	}
	return names
}

func (id ID) String() string {
	if id < Count {
		return Table[id].Name
	}
	return "unknown"
}

// ByName is the route named name, or nil.
func ByName(name string) *Route {
	for i := range Table {
		if Table[i].Name == name {
			return &Table[i]
		}
	}
	return nil
}

// CheckConfig checks what of the configuration the route table declares:
// cache.ttl names only routes of the table, and each route keeps a
// positive fresh time once the overrides apply. config.Check lists its
// problems with the others; New refuses a configuration it refuses.
func CheckConfig(cfg *config.Config) error {
	var errs []error
	names := strings.Join(Names(), ", ")
	for name := range cfg.Cache.TTL {
		if ByName(name) == nil {
			errs = append(errs, fmt.Errorf("cache.ttl.%s: unknown route (known: %s)", name, names))
		}
	}
	for i := range Table {
		if TTLs(&Table[i], cfg.Cache.TTL).Shortest() <= 0 {
			errs = append(errs, fmt.Errorf("cache.ttl.%s: needs at least one positive TTL", Table[i].Name))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// TTLs is r's fresh times: its defaults, each overridden by a
// non-zero cache.ttl.<route>.<class>.
func TTLs(r *Route, overrides map[string]config.PerClass) cache.TTLs {
	t := r.ttl
	o := overrides[r.Name]
	for _, f := range []struct {
		dst *time.Duration
		src time.Duration
	}{{&t.Head, o.Head}, {&t.Final, o.Final}, {&t.Volatile, o.Volatile}, {&t.Negative, o.Negative}} {
		if f.src != 0 {
			*f.dst = f.src
		}
	}
	return t
}

// ClassWindow is the duration w gives class c.
func ClassWindow(w config.PerClass, c cache.Class) time.Duration {
	switch c {
	case cache.Head:
		return w.Head
	case cache.Final:
		return w.Final
	case cache.Volatile:
		return w.Volatile
	}
	return w.Negative
}

// HashKey is the cache key of one hash's records (the per-hash routes'
// items).
func HashKey(chain, hash string) string { return "hash|" + chain + "|" + hash }

// IsHeadList reports whether q asks the chain's newest block page: a block
// list without a height, its first page.
// A pinned list (head=H) is never one: callers pass its height as the
// pin (PinHeight).
func IsHeadList(r ID, height, page int64) bool {
	return r == BlockList && height < 0 && page <= 1
}
