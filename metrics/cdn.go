package metrics

import "github.com/prometheus/client_golang/prometheus"

// CDN are the families of the purges carried to a CDN (package cdn,
// docs/cdn.md). They exist from the start, at zero without cdn.provider.
type CDN struct {
	// Requests counts the requests to the provider's purge API by outcome:
	// ok, throttled (429 or 503 with Retry-After), server_error (5xx),
	// refused (another 4xx: credentials, a malformed purge), unreachable.
	Requests *prometheus.CounterVec
	// Lag is the time from a purge (the edge running it, or the
	// reorganization found) to the CDN's acknowledgement of its last
	// request, seconds: the fleet's application and the rate's queue
	// included.
	Lag prometheus.Histogram
	// Queue is the purges this node holds that the CDN has not
	// acknowledged (on the node that sends; the others hold the fleet's
	// until the sender's cursor passes them).
	Queue prometheus.Gauge
}

// CDNOutcomes are the outcome label values of cdn_purge_requests_total.
var CDNOutcomes = []string{"ok", "throttled", "server_error", "refused", "unreachable"}

func (m *Metrics) cdnFamilies() {
	m.CDN.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "cdn_purge_requests_total",
		Help: "Requests to the CDN's purge API, by outcome (ok, throttled, server_error, refused, unreachable)."}, []string{"outcome"})
	for _, o := range CDNOutcomes {
		m.CDN.Requests.WithLabelValues(o)
	}
	m.CDN.Lag = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "cdn_purge_lag_seconds",
		Help:    "Time from a purge or reorganization to the CDN's acknowledgement of it.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}})
	m.CDN.Queue = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "cdn_purge_queue",
		Help: "Purges queued for the CDN, not acknowledged yet."})
	m.Registry.MustRegister(m.CDN.Requests, m.CDN.Lag, m.CDN.Queue)
}
