package proxy

import (
	"context"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
)

// request is q as a question for the upstream.
func (q *query) request(haveStale, background bool) *upstream.Request {
	f := &upstream.Request{Route: q.Route, Key: string(q.Key), Chain: string(q.Chain), Height: q.Height,
		HaveStale: haveStale, Background: background, Tenant: q.tenant, Trace: q.trace,
		HeadList: route.IsHeadList(q.Route.ID, q.PinHeight(), q.Page)}
	if q.NHashes > 0 {
		f.Hashes = make([]string, q.NHashes)
		for i := range f.Hashes {
			f.Hashes[i] = string(q.Hash(i))
		}
	}
	return f
}

// query is one request in the request core: its checked parameters and
// what the response needs beside them. Queries are pooled (Proxy.queries).
type query struct {
	route.Params
	scratch []byte           // header values of the response being written
	tenant  *upstream.Tenant // who pays for the request's misses (upstream/fair.go)
	trace   context.Context  // the request's span; nil when tracing is off
}
