package proxy

import (
	"context"
	"explorer-edge/proxy/route"
)

// fetchReq is one question on its way to the upstream, made by the handler
// from what it parsed and carried through the flight to the store: the miss
// path parses nothing again.
type fetchReq struct {
	route  *route.Route
	key    string // canonical key, and the target sent upstream
	chain  string
	height int64    // -1 when the route takes none
	hashes []string // of a hash list, lower case, in the order asked
	// haveStale: a copy can stand in if the fetch fails, so it never waits
	// for the budget.
	haveStale bool
	// background: a refresh of a stale key; it yields the budget to client
	// misses and does not take a stale copy from the shared tier.
	background bool
	// tenant pays for the upstream calls and waits its fair turn for the
	// budget (fair.go).
	tenant *tenant
	// trace is the span the fetch's spans are children of; nil when
	// tracing is off.
	trace context.Context
	// headList: the question is the chain's newest block page, whose
	// answer must not be behind the head seen (reorg.go).
	headList bool
	// observe feeds chain truth with a success's body (set by fill, with
	// the time the question left) and says how many blocks a head page is
	// behind the head seen; the pool asks another account then.
	observe func(body []byte) (behind int64)
}

// request is q as a question for the upstream.
func (q *query) request(haveStale, background bool) *fetchReq {
	f := &fetchReq{route: q.Route, key: string(q.Key), chain: string(q.Chain), height: q.Height,
		haveStale: haveStale, background: background, tenant: q.tenant, trace: q.trace,
		headList: isHeadList(q.Route.ID, q.Height, q.Page)}
	if q.NHashes > 0 {
		f.hashes = make([]string, q.NHashes)
		for i := range f.hashes {
			f.hashes[i] = string(q.Hash(i))
		}
	}
	return f
}

// upstreamAnswer is what the upstream said: its status, its envelope's
// code (read once, by the call that checked the answer) and its body.
type upstreamAnswer struct {
	status int
	code   string
	body   []byte
	behind int64 // a head page this many blocks behind the head seen, from the last account asked
}

// query is one request in the request core: its checked parameters and
// what the response needs beside them. Queries are pooled (Proxy.queries).
type query struct {
	route.Params
	scratch []byte          // header values of the response being written
	tenant  *tenant         // who pays for the request's misses (fair.go)
	trace   context.Context // the request's span; nil when tracing is off
}
