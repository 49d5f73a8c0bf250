package stream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Drop reasons (dropped_total) and refusal reasons (refused_total).
const (
	reasonSlow    = iota // its buffer was full when an event came
	reasonTimeout        // a write passed WriteTimeout
	numReasons
)

const (
	refuseFull     = iota // MaxSubscribers
	refusePerIP           // MaxPerIP
	refuseDraining        // Drain or Close
	numRefusals
)

var (
	reasonNames  = [numReasons]string{"slow", "timeout"}
	refusalNames = [numRefusals]string{"max_subscribers", "max_per_ip", "draining"}
)

// Metrics are the explorer_edge_stream_* families, registered on the
// edge's registry (metrics.Metrics.Registry) by NewMetrics. Every series
// exists from the start: label values are the chains served and fixed
// sets. A nil *Metrics records nothing.
type Metrics struct {
	subs     map[string]prometheus.Gauge
	events   [Stale + 1]prometheus.Counter
	drops    [numReasons]prometheus.Counter
	refusals [numRefusals]prometheus.Counter
	delivery prometheus.Histogram
}

// NewMetrics registers the families for chains on reg.
func NewMetrics(reg prometheus.Registerer, chains []string) *Metrics {
	const ns = "explorer_edge"
	subs := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "stream_subscribers",
		Help: "Event streams open, by chain; a stream of several chains counts in each."}, []string{"chain"})
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_events_total",
		Help: "Events published to the event streams, by type (head, reorg, stale)."}, []string{"type"})
	drops := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_dropped_total",
		Help: "Event streams the edge ended because the client did not keep up, by reason: slow (its buffer of events was full), timeout (a write passed the write timeout). The browser reconnects and resumes."}, []string{"reason"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_refused_total",
		Help: "Event streams refused, by reason: max_subscribers (503), max_per_ip (429), draining (503)."}, []string{"reason"})
	// An event is written within a millisecond to a loopback client, and
	// a WriteTimeout (10 s) at worst: 1-2.5-5 steps from 100 us to 10 s.
	delivery := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "stream_delivery_seconds",
		Help:    "Time from an event's Publish to its write to the last subscriber it was handed to (or that subscriber's end).",
		Buckets: []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}})
	reg.MustRegister(subs, events, drops, refusals, delivery)
	m := &Metrics{subs: map[string]prometheus.Gauge{}, delivery: delivery}
	for _, c := range chains {
		m.subs[c] = subs.WithLabelValues(c)
	}
	m.events[Head] = events.WithLabelValues("head")
	m.events[Reorg] = events.WithLabelValues("reorg")
	m.events[Stale] = events.WithLabelValues("stale")
	for i, n := range reasonNames {
		m.drops[i] = drops.WithLabelValues(n)
	}
	for i, n := range refusalNames {
		m.refusals[i] = refusals.WithLabelValues(n)
	}
	return m
}

// gauge is a chain's subscriber count in the gauge, if any.
type gauge struct{ g prometheus.Gauge }

func (g gauge) inc() {
	if g.g != nil {
		g.g.Inc()
	}
}

func (g gauge) dec() {
	if g.g != nil {
		g.g.Dec()
	}
}

func (m *Metrics) subscribers(chain string) gauge {
	if m == nil {
		return gauge{}
	}
	return gauge{m.subs[chain]}
}

func (m *Metrics) event(k Kind) {
	if m != nil {
		m.events[k].Inc()
	}
}

func (m *Metrics) dropped(reason int) {
	if m != nil {
		m.drops[reason].Inc()
	}
}

func (m *Metrics) refused(reason int) {
	if m != nil {
		m.refusals[reason].Inc()
	}
}

func (m *Metrics) delivered(since time.Time) {
	if m != nil {
		m.delivery.Observe(time.Since(since).Seconds())
	}
}
