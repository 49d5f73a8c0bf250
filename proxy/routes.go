package proxy

import (
	"explorer-edge/cache"
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
	// transaction-fills return the same records (DESIGN.md section 4).
	perHash bool
	// classify reads an upstream answer and returns its cache class.
	classify func(e *Proxy, q *query, body []byte) cache.Class
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
	},
	{
		id: routeTransactionMulti, name: "transaction-multi", path: "/api/v5/chainx/tz/cross/transaction-multi",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txId", kind: kindHashList, required: true, max: maxHashes},
		},
		perHash:  true,
		classify: classifyCross,
	},
	{
		id: routeTransactionFills, name: "transaction-fills", path: "/api/v5/chainx/tz/cross/transaction-fills",
		params: []param{
			{name: "chainShortName", kind: kindChain, required: true},
			{name: "txid", kind: kindHash, required: true},
		},
		perHash:  true,
		classify: classifyCross,
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
	},
}

// maxHashes is the spec's limit on hashes in one txId list.
const maxHashes = 20

// routeByPath finds the route of a request path without allocating.
func routeByPath(path []byte) *route {
	// The compiler turns this switch on string(path) into comparisons
	// without a conversion.
	switch string(path) {
	case "/api/v5/chainx/token/position-list":
		return &routes[routePositionList]
	case "/api/v5/chainx/block/block-list":
		return &routes[routeBlockList]
	case "/api/v5/chainx/block/transaction-list":
		return &routes[routeTransactionList]
	case "/api/v5/chainx/tz/cross/transaction-multi":
		return &routes[routeTransactionMulti]
	case "/api/v5/chainx/tz/cross/transaction-fills":
		return &routes[routeTransactionFills]
	case "/api/v5/chainx/transaction/internal-transaction-multi":
		return &routes[routeInternalTransactionMulti]
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
