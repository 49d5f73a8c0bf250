package metrics

import "github.com/prometheus/client_golang/prometheus"

// Refused is why a client's request was refused: the label value of
// client_refused_total.
type Refused uint8

const (
	RefusedRateLimit Refused = iota // the client's own request rate (auth.clients[].rate)
	RefusedBudget                   // the upstream budget had no token within budget_wait
	RefusedUpstream                 // the upstream throttled the edge (429, 50011)
	numRefused
)

func (r Refused) String() string {
	switch r {
	case RefusedRateLimit:
		return "rate_limit"
	case RefusedBudget:
		return "budget"
	}
	return "upstream_throttled"
}

// clientFamilies are the families labelled by client: the configured
// client names and "anonymous", never a value from a request.
type clientFamilies struct {
	requests *prometheus.CounterVec
	calls    *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

func newClientFamilies(reg *prometheus.Registry) clientFamilies {
	f := clientFamilies{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_requests_total",
			Help: "Requests by client (configured name or anonymous) and result (hit, miss, stale, stale_error, collapsed: answered by another request's fetch, partial, error)."}, []string{"client", "result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_upstream_calls_total",
			Help: "Upstream calls sent for a client's misses: the client whose request led the flight pays; requests that joined it pay nothing."}, []string{"client"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_response_bytes_total",
			Help: "Response body bytes sent to a client."}, []string{"client"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_refused_total",
			Help: "A client's requests refused, by reason (rate_limit: its own request rate; budget: no upstream token within budget_wait; upstream_throttled: the upstream's 429)."}, []string{"client", "reason"}),
	}
	reg.MustRegister(f.requests, f.calls, f.bytes, f.refused)
	return f
}

// ClientAccount is one client's series (nil: none, and counting on it
// does nothing), resolved once (at start and on a
// reload) so that counting a request is an index and an atomic add.
type ClientAccount struct {
	requests [numResults + 1]prometheus.Counter
	calls    prometheus.Counter
	bytes    prometheus.Counter
	refused  [numRefused]prometheus.Counter
}

// Client returns the series of the client called name, making them at
// zero. Call it with configured names only.
func (m *Metrics) Client(name string) *ClientAccount {
	a := &ClientAccount{calls: m.clients.calls.WithLabelValues(name), bytes: m.clients.bytes.WithLabelValues(name)}
	for r := range ResultError + 1 {
		a.requests[r] = m.clients.requests.WithLabelValues(name, r.String())
	}
	for r := range numRefused {
		a.refused[r] = m.clients.refused.WithLabelValues(name, r.String())
	}
	return a
}

// Answered counts a request of the client with its result (ResultError
// for an error envelope) and the body bytes sent.
func (a *ClientAccount) Answered(result Result, bytes int) {
	if a == nil {
		return
	}
	a.requests[result].Inc()
	a.bytes.Add(float64(bytes))
}

// Called counts an upstream call sent for the client.
func (a *ClientAccount) Called() {
	if a != nil {
		a.calls.Inc()
	}
}

// Refused counts a refusal of the client's request, by reason.
func (a *ClientAccount) Refused(reason Refused) {
	if a != nil {
		a.refused[reason].Inc()
	}
}
