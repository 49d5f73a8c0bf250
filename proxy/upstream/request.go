package upstream

import (
	"context"
	"explorer-edge/proxy/route"
)

// Request is one question on its way to the upstream, made by the handler
// from what it parsed and carried through the flight to the store: the miss
// path parses nothing again.
type Request struct {
	Route  *route.Route
	Key    string // canonical key, and the target sent upstream
	Chain  string
	Height int64    // -1 when the route takes none
	Hashes []string // of a hash list, lower case, in the order asked
	// HaveStale: a copy can stand in if the fetch fails, so it never waits
	// for the budget.
	HaveStale bool
	// Background: a refresh of a stale key; it yields the budget to client
	// misses and does not take a stale copy from the shared tier.
	Background bool
	// Tenant pays for the upstream calls and waits its fair turn for the
	// budget (fair.go).
	Tenant *Tenant
	// Trace is the span the fetch's spans are children of; nil when
	// tracing is off.
	Trace context.Context
	// HeadList: the question is the chain's newest block page, whose
	// answer must not be behind the head seen (reorg.go).
	HeadList bool
	// Poll: the event stream's poll of a newest page (proxy/events.go):
	// it asks the upstream even when the cache holds the key fresh, since
	// it is asked to find what is newer than that.
	Poll bool
	// Observe feeds chain truth with a success's body (set by fill, with
	// the time the question left) and says how many blocks a head page is
	// behind the head seen; the Pool asks another account then.
	Observe func(body []byte) (behind int64)
}

// Answer is what the upstream said: its status, its envelope's
// code (read once, by the call that checked the answer) and its body.
type Answer struct {
	Status int
	Code   string
	Body   []byte
	Behind int64 // a head page this many blocks behind the head seen, from the last account asked
}
