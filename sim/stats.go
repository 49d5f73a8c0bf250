package sim

import (
	"maps"
	"net/http"
	"net/textproto"
	"strings"
	"sync"

	"explorer-edge/signer"
)

// maxAPIKeys bounds Stats.APIKeys; further keys are counted under "other".
const maxAPIKeys = 100

// Stats counts the requests received on the six API routes, including
// rejected and faulted ones. /sim/* and unknown paths are not counted.
type Stats struct {
	RequestsTotal int64            `json:"requests_total"`
	Routes        map[string]int64 `json:"routes"`        // every route name, always present
	Hashes        map[string]int64 `json:"hashes"`        // hashes asked: transaction-multi, transaction-fills, internal-transaction-multi
	AuthFailures  int64            `json:"auth_failures"` // 401 answers
	APIKeys       map[string]int64 `json:"api_keys"`      // requests by SVC-ACCESS-KEY value (absent key not counted)
	// ClientSVCHeaders counts requests carrying SVC-* headers other than
	// the four SVC-ACCESS-* ones, or one of those more than once: what a
	// proxy that leaks its clients' headers upstream would send.
	ClientSVCHeaders int64 `json:"client_svc_headers"`
}

type counters struct {
	mu sync.Mutex
	s  Stats
}

func (c *counters) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s = Stats{Routes: map[string]int64{}, Hashes: map[string]int64{}, APIKeys: map[string]int64{}}
	for _, rt := range routeTable {
		c.s.Routes[rt.name] = 0
		if rt.hashParam != "" {
			c.s.Hashes[rt.name] = 0
		}
	}
}

var accessHeaders = map[string]bool{
	textproto.CanonicalMIMEHeaderKey(signer.HeaderKey):        true,
	textproto.CanonicalMIMEHeaderKey(signer.HeaderSign):       true,
	textproto.CanonicalMIMEHeaderKey(signer.HeaderPassphrase): true,
	textproto.CanonicalMIMEHeaderKey(signer.HeaderTimestamp):  true,
}

func (c *counters) record(rt *route, r *http.Request) {
	var hashes int64
	if rt.hashParam != "" {
		hashes = countHashes(r.URL.Query().Get(rt.hashParam))
	}
	leaked := false
	for name, values := range r.Header {
		if strings.HasPrefix(name, "Svc-") && (!accessHeaders[name] || len(values) > 1) {
			leaked = true
		}
	}
	key := r.Header.Get(signer.HeaderKey)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.RequestsTotal++
	c.s.Routes[rt.name]++
	if rt.hashParam != "" {
		c.s.Hashes[rt.name] += hashes
	}
	if key != "" {
		if _, ok := c.s.APIKeys[key]; !ok && len(c.s.APIKeys) >= maxAPIKeys {
			key = "other"
		}
		c.s.APIKeys[key]++
	}
	if leaked {
		c.s.ClientSVCHeaders++
	}
}

func (c *counters) authFailure() {
	c.mu.Lock()
	c.s.AuthFailures++
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.s
	out.Routes = maps.Clone(c.s.Routes)
	out.Hashes = maps.Clone(c.s.Hashes)
	out.APIKeys = maps.Clone(c.s.APIKeys)
	return out
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ResetStats zeroes every counter.
func (s *Server) ResetStats() { s.stats.reset() }
