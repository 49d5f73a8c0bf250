package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
)

// param is one query parameter of a route.
type param struct {
	name     string
	kind     kind
	required bool
	def      string   // value implied when absent; "" = omitted from the canonical query
	max      int      // kindLimit: largest limit; kindHashList: most hashes
	enum     []string // kindEnum: allowed values, canonical spelling
}

// routeID indexes the route table; metrics are pre-resolved per ID.
type routeID uint8

const (
	routePositionList routeID = iota
	routeBlockList
	routeTransactionList
	routeTransactionMulti
	routeTransactionFills
	routeInternalTransactionMulti
	numRoutes
	routeUnknown = numRoutes // label for paths outside the table
)

// route is one operation of the explorer API (spec sections 1-6).
type route struct {
	id     routeID
	name   string // metric label and cache.ttl key
	path   string // identical upstream and at the edge
	params []param
	// window bounds page*limit where the spec says only the newest 10000
	// rows are reachable (holders, blocks). 0 = no window: other routes'
	// pages go to the upstream, which decides.
	window int
	// perHash routes are cached per (chain, hash): transaction-multi and
	// transaction-fills return the same records (docs/design.md, per-hash batches).
	perHash bool
	// classify reads an upstream answer and returns its cache class.
	classify func(e *Proxy, f *fetchReq, body []byte) cache.Class
	// ttl is the default fresh time of each class the route's answers can
	// have (cache.ttl.<name> overrides it); a class it does not name falls
	// back to the shortest (cache.TTLs.For).
	ttl cache.TTLs
}

var protocolTypes = []string{"transaction", "internal", "token_20", "token_721", "token_1155", "token_10"}

// routes is the whole API the edge serves. Parameter order here is the order
// of the canonical query sent upstream, chainShortName first.
var routes = [numRoutes]route{
	{
		id: routePositionList, name: "position-list", path: "/api/v5/chainx/token/position-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "tokenContractAddress", kind: kindAddress, required: true},
			{name: "holderAddress", kind: kindAddress},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", max: 50},
		},
		window:   10000,
		classify: classifyVolatile,
		ttl:      cache.TTLs{Volatile: 30 * time.Second},
	},
	{
		id: routeBlockList, name: "block-list", path: "/api/v5/chainx/block/block-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "height", kind: kindHeight},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		window:   10000,
		classify: classifyBlockList,
		ttl:      cache.TTLs{Head: time.Second},
	},
	{
		id: routeTransactionList, name: "transaction-list", path: "/api/v5/chainx/block/transaction-list",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "height", kind: kindHeight, required: true},
			{name: "protocolType", kind: kindEnum, def: "transaction", enum: protocolTypes},
			{name: "page", kind: kindPage, def: "1"},
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		classify: classifyTransactionList,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour},
	},
	{
		id: routeTransactionMulti, name: "transaction-multi", path: "/api/v5/chainx/tz/cross/transaction-multi",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txId", kind: kindHashList, required: true, max: maxHashes},
		},
		perHash:  true,
		classify: classifyCross,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
	{
		id: routeTransactionFills, name: "transaction-fills", path: "/api/v5/chainx/tz/cross/transaction-fills",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txid", kind: kindHash, required: true},
		},
		perHash:  true,
		classify: classifyCross,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
	{
		id: routeInternalTransactionMulti, name: "internal-transaction-multi", path: "/api/v5/chainx/transaction/internal-transaction-multi",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txId", kind: kindHashList, required: true, max: maxHashes},
			{name: "page", kind: kindPage, def: "1"},
			// Default and maximum are "not shown" in the spec; explorer-sim
			// and the edge use the block routes' 20 and 100.
			{name: "limit", kind: kindLimit, def: "20", max: 100},
		},
		classify: classifyInternal,
		ttl:      cache.TTLs{Head: time.Second, Final: 24 * time.Hour, Negative: 5 * time.Second},
	},
}

// maxHashes is the spec's limit on hashes in one txId list.
const maxHashes = 20

// routeByPath finds the route of a request path without allocating (the
// comparison of string(path) makes no string).
func routeByPath(path []byte) *route {
	for i := range routes {
		if string(path) == routes[i].path {
			return &routes[i]
		}
	}
	return nil
}

// param is the route's parameter named name, or nil.
func (r *route) param(name []byte) *param {
	for i := range r.params {
		if r.params[i].name == string(name) {
			return &r.params[i]
		}
	}
	return nil
}

// RouteNames lists the routes in table order (metric labels, config keys).
func RouteNames() []string {
	names := make([]string, numRoutes)
	for i := range routes {
		names[i] = routes[i].name
	}
	return names
}

func (id routeID) String() string {
	if id < numRoutes {
		return routes[id].name
	}
	return "unknown"
}

// routeByName is the route named name, or nil.
func routeByName(name string) *route {
	for i := range routes {
		if routes[i].name == name {
			return &routes[i]
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
	names := strings.Join(RouteNames(), ", ")
	for name := range cfg.Cache.TTL {
		if routeByName(name) == nil {
			errs = append(errs, fmt.Errorf("cache.ttl.%s: unknown route (known: %s)", name, names))
		}
	}
	for i := range routes {
		if routeTTLs(&routes[i], cfg.Cache.TTL).Shortest() <= 0 {
			errs = append(errs, fmt.Errorf("cache.ttl.%s: needs at least one positive TTL", routes[i].name))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// routeTTLs is r's fresh times: its defaults, each overridden by a
// non-zero cache.ttl.<route>.<class>.
func routeTTLs(r *route, overrides map[string]config.PerClass) cache.TTLs {
	t := r.ttl
	o := overrides[r.name]
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

// classWindow is the duration w gives class c.
func classWindow(w config.PerClass, c cache.Class) time.Duration {
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
