package metrics

import "github.com/prometheus/client_golang/prometheus"

// AccountState is what an upstream account is at a scrape.
type AccountState struct {
	Tokens, Rate     float64 // its budget: tokens held, rate in force
	Breaker          float64 // 0 closed, 1 half-open, 2 open
	ThrottledSeconds float64 // left of an upstream 429's lock-out
	ErrorRatio       float64 // recent share of attempts that failed
}

var (
	accountTokensDesc = prometheus.NewDesc(ns+"_upstream_account_budget_tokens",
		"Tokens in an account's budget (fleet-wide in fleet mode, as of this node's last take).", []string{"account"}, nil)
	accountRateDesc = prometheus.NewDesc(ns+"_upstream_account_budget_rate",
		"An account's budget in requests per second (lowered after its 429 until it recovers).", []string{"account"}, nil)
	accountBreakerDesc = prometheus.NewDesc(ns+"_upstream_account_breaker_state",
		"An account's circuit breaker: 0 closed, 1 half-open, 2 open.", []string{"account"}, nil)
	accountThrottledDesc = prometheus.NewDesc(ns+"_upstream_account_throttled_seconds",
		"Seconds left of the lock-out an account's 429 (Retry-After) asked for.", []string{"account"}, nil)
	accountErrorsDesc = prometheus.NewDesc(ns+"_upstream_account_error_ratio",
		"Recent share of an account's attempts that failed (moving average): what the choice of account weighs.", []string{"account"}, nil)
)

// accountCollector reads the accounts at scrape time.
type accountCollector struct {
	vec   *prometheus.CounterVec
	names []string
	calls map[string]*[numOutcomes]prometheus.Counter
	state func(i int) AccountState
	lag   *prometheus.GaugeVec // {account,chain}
}

func (c *accountCollector) Describe(ch chan<- *prometheus.Desc) {
	c.vec.Describe(ch)
	for _, d := range []*prometheus.Desc{accountTokensDesc, accountRateDesc, accountBreakerDesc, accountThrottledDesc, accountErrorsDesc} {
		ch <- d
	}
}

func (c *accountCollector) Collect(ch chan<- prometheus.Metric) {
	c.vec.Collect(ch)
	for i, name := range c.names {
		s := c.state(i)
		ch <- prometheus.MustNewConstMetric(accountTokensDesc, prometheus.GaugeValue, s.Tokens, name)
		ch <- prometheus.MustNewConstMetric(accountRateDesc, prometheus.GaugeValue, s.Rate, name)
		ch <- prometheus.MustNewConstMetric(accountBreakerDesc, prometheus.GaugeValue, s.Breaker, name)
		ch <- prometheus.MustNewConstMetric(accountThrottledDesc, prometheus.GaugeValue, s.ThrottledSeconds, name)
		ch <- prometheus.MustNewConstMetric(accountErrorsDesc, prometheus.GaugeValue, s.ErrorRatio, name)
	}
}

// Accounts registers the families labelled by upstream account, for the
// configured names; state reads account i at scrape time. Call it once.
func (m *Metrics) Accounts(names []string, state func(i int) AccountState) {
	c := &accountCollector{names: names, calls: map[string]*[numOutcomes]prometheus.Counter{}, state: state,
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_account_requests_total",
			Help: "Upstream attempts by account (upstream.accounts; default is the upstream block's) and outcome."}, []string{"account", "outcome"})}
	for _, n := range names {
		var byOutcome [numOutcomes]prometheus.Counter
		for o := range numOutcomes {
			byOutcome[o] = c.vec.WithLabelValues(n, o.String())
		}
		c.calls[n] = &byOutcome
	}
	m.accounts = c
	m.Registry.MustRegister(c)
	c.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "upstream_account_head_lag_blocks",
		Help: "Blocks an account's last answer to a chain's newest block page was behind the newest head the edge had seen (0: current). An account behind is asked after the others."}, []string{"account", "chain"})
	m.Registry.MustRegister(c.lag)
	for _, n := range names {
		for chain := range m.chains {
			c.lag.WithLabelValues(n, chain)
		}
	}
}

// AccountHeadLag sets how many blocks account name's last head page of
// chain was behind the head seen.
func (m *Metrics) AccountHeadLag(name, chain string, blocks int64) {
	if m.accounts == nil || !m.chains[chain] {
		return
	}
	m.accounts.lag.WithLabelValues(name, chain).Set(float64(blocks))
}

// AccountCall counts an attempt of the account name with its outcome.
func (m *Metrics) AccountCall(name string, outcome Outcome) {
	if m.accounts == nil {
		return
	}
	if byOutcome, ok := m.accounts.calls[name]; ok {
		byOutcome[outcome].Inc()
	}
}
