package metrics

import "github.com/prometheus/client_golang/prometheus"

// PollResults are the result label values of stream_polls_total: the
// poll found a new head (announced), the head already announced (same),
// or failed (error).
var PollResults = []string{"new", "same", "error"}

// StreamPolls are the event stream's poller families (proxy/events.go);
// the hub's own are proxy/stream's (stream.NewMetrics).
type StreamPolls struct {
	polls  map[string][]prometheus.Counter // [chain][result]
	leader map[string]prometheus.Gauge
	relays map[string]prometheus.Counter
}

// StreamPolls registers the poller's families for chains.
func (m *Metrics) StreamPolls(chains []string) *StreamPolls {
	const ns = "explorer_edge"
	polls := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_polls_total",
		Help: "Polls of a chain's newest block page this node asked of the upstream for the event stream, by result: new (a head announced), same, error. Summed over a fleet: one a poll interval per chain while anyone listens."}, []string{"chain", "result"})
	leader := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "stream_poll_leader",
		Help: "1 while this node polls the chain for the event stream (it holds the fleet's lease, or polls alone without Redis)."}, []string{"chain"})
	relays := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_relayed_total",
		Help: "New heads another node of the fleet polled that this node took from the shared tier and announced."}, []string{"chain"})
	m.Registry.MustRegister(polls, leader, relays)
	s := &StreamPolls{polls: map[string][]prometheus.Counter{}, leader: map[string]prometheus.Gauge{}, relays: map[string]prometheus.Counter{}}
	for _, c := range chains {
		for _, r := range PollResults {
			s.polls[c] = append(s.polls[c], polls.WithLabelValues(c, r))
		}
		s.leader[c] = leader.WithLabelValues(c)
		s.relays[c] = relays.WithLabelValues(c)
	}
	return s
}

// Poll counts one poll of chain with result PollResults[result].
func (s *StreamPolls) Poll(chain string, result int) {
	if c := s.polls[chain]; c != nil {
		c[result].Inc()
	}
}

// Leader says whether this node polls chain.
func (s *StreamPolls) Leader(chain string, polling bool) {
	if g := s.leader[chain]; g != nil {
		v := 0.0
		if polling {
			v = 1
		}
		g.Set(v)
	}
}

// Relayed counts a head of chain taken from another node's poll.
func (s *StreamPolls) Relayed(chain string) {
	if c := s.relays[chain]; c != nil {
		c.Inc()
	}
}
