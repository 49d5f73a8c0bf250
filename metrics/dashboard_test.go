package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"explorer-edge/metrics"
)

// dashboardPanel is one panel of the Grafana dashboard, rows flattened.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

func dashboardPanels(t *testing.T) map[string]dashboardPanel {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "explorer-edge.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	out := map[string]dashboardPanel{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			out[p.Title] = p
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return out
}

// panelExpr is the PromQL of a panel's target (by legend; "" = the first),
// with the dashboard's variables set as Grafana would for "All".
func panelExpr(t *testing.T, panels map[string]dashboardPanel, title, legend string) string {
	t.Helper()
	p, ok := panels[title]
	if !ok {
		t.Errorf("the dashboard has no panel %q", title)
		return ""
	}
	for _, tg := range p.Targets {
		if legend == "" || tg.LegendFormat == legend {
			return strings.NewReplacer(`"$job"`, `".*"`, `"$instance"`, `".*"`, "$__rate_interval", "1m").Replace(tg.Expr)
		}
	}
	t.Errorf("panel %q has no target with legend %q", title, legend)
	return ""
}

// TestDashboardSeparatesFreshFromStale evaluates the dashboard's cache and
// upstream panels with promtool on synthetic traffic. Keys whose entries
// are always past their fresh time (a 1s head TTL asked every 2.5s) are
// served stale, and each such answer costs one refresh: the dashboard must
// show no fresh hits, every answer stale, and one upstream call per
// request, not a hit ratio of 1.
func TestDashboardSeparatesFreshFromStale(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	panels := dashboardPanels(t)
	// 2 requests/s for 10 minutes, in steps of 15s (30 per step).
	scenarios := []struct {
		name   string
		series map[string]string // series -> values
		want   map[[2]string]float64
		// every sample a panel's query gives (labels -> value), for
		// panels by client
		samples map[[2]string]map[string]float64
	}{
		{
			name: "every answer stale, each one refreshed",
			series: map[string]string{
				`explorer_edge_requests_total{job="explorer-edge",instance="a:8081",route="block-list",code="0"}`:              "0+30x40",
				`explorer_edge_cache_results_total{job="explorer-edge",instance="a:8081",route="block-list",result="stale"}`:   "0+30x40",
				`explorer_edge_upstream_requests_total{job="explorer-edge",instance="a:8081",route="block-list",outcome="ok"}`: "0+30x40",
			},
			want: map[[2]string]float64{
				{"Fresh hit ratio", ""}:                                                  0,
				{"Stale served", ""}:                                                     1,
				{"Upstream calls per request", ""}:                                       1,
				{"Fresh hits, stale served, misses", "fresh hit"}:                        0,
				{"Fresh hits, stale served, misses", "stale served"}:                     1,
				{"Fresh hits, stale served, misses", "miss"}:                             0,
				{"Fresh hit ratio by route", "{{route}}"}:                                0,
				{"Upstream calls and refusals per request", "calls sent"}:                1,
				{"Upstream calls and refusals per request", "refused (budget, breaker)"}: 0,
			},
		},
		{
			name: "3 of 4 fresh hits, 1 of 4 missed and fetched",
			series: map[string]string{
				`explorer_edge_requests_total{job="explorer-edge",instance="a:8081",route="block-list",code="0"}`:                            "0+40x40",
				`explorer_edge_cache_results_total{job="explorer-edge",instance="a:8081",route="block-list",result="hit"}`:                   "0+30x40",
				`explorer_edge_cache_results_total{job="explorer-edge",instance="a:8081",route="block-list",result="miss"}`:                  "0+10x40",
				`explorer_edge_upstream_requests_total{job="explorer-edge",instance="a:8081",route="block-list",outcome="ok"}`:               "0+10x40",
				`explorer_edge_upstream_requests_total{job="explorer-edge",instance="a:8081",route="block-list",outcome="budget_exhausted"}`: "0+5x40",
			},
			want: map[[2]string]float64{
				{"Fresh hit ratio", ""}:                                                  0.75,
				{"Stale served", ""}:                                                     0,
				{"Upstream calls per request", ""}:                                       0.25,
				{"Fresh hits, stale served, misses", "fresh hit"}:                        0.75,
				{"Fresh hits, stale served, misses", "miss"}:                             0.25,
				{"Upstream calls and refusals per request", "refused (budget, breaker)"}: 0.125,
			},
		},
		{
			// Two clients: greedy causes 3 upstream calls of 4 and is
			// refused for budget; quiet hits its cache 3 times of 4.
			name: "who spends the quota, who is throttled",
			series: map[string]string{
				`explorer_edge_client_upstream_calls_total{job="explorer-edge",instance="a:8081",client="greedy"}`:          "0+30x40",
				`explorer_edge_client_upstream_calls_total{job="explorer-edge",instance="a:8081",client="quiet"}`:           "0+10x40",
				`explorer_edge_client_refused_total{job="explorer-edge",instance="a:8081",client="greedy",reason="budget"}`: "0+15x40",
				`explorer_edge_client_refused_total{job="explorer-edge",instance="a:8081",client="quiet",reason="budget"}`:  "0x40",
				`explorer_edge_client_requests_total{job="explorer-edge",instance="a:8081",client="quiet",result="hit"}`:    "0+30x40",
				`explorer_edge_client_requests_total{job="explorer-edge",instance="a:8081",client="quiet",result="miss"}`:   "0+10x40",
			},
			samples: map[[2]string]map[string]float64{
				{"Upstream calls by client", "{{client}}"}:     {`{client="greedy"}`: 2, `{client="quiet"}`: 10.0 / 15}, // per 15 s
				{"Share of upstream calls", "{{client}}"}:      {`{client="greedy"}`: 0.75, `{client="quiet"}`: 0.25},
				{"Refused by client", "{{client}} {{reason}}"}: {`{client="greedy",reason="budget"}`: 1, `{client="quiet",reason="budget"}`: 0},
				{"Fresh hit ratio by client", "{{client}}"}:    {`{client="quiet"}`: 0.75},
			},
		},
		{
			// Two accounts: default answers, the mirror fails by timeout
			// and its breaker is open; refusals before sending are no calls.
			name: "where misses go by account",
			series: map[string]string{
				`explorer_edge_upstream_account_requests_total{job="explorer-edge",instance="a:8081",account="default",outcome="ok"}`:              "0+30x40",
				`explorer_edge_upstream_account_requests_total{job="explorer-edge",instance="a:8081",account="mirror",outcome="timeout"}`:          "0+15x40",
				`explorer_edge_upstream_account_requests_total{job="explorer-edge",instance="a:8081",account="mirror",outcome="budget_exhausted"}`: "0+15x40",
				`explorer_edge_upstream_account_breaker_state{job="explorer-edge",instance="a:8081",account="mirror"}`:                             "2x40",
				`explorer_edge_upstream_account_throttled_seconds{job="explorer-edge",instance="a:8081",account="mirror"}`:                         "0x40",
				`explorer_edge_upstream_account_error_ratio{job="explorer-edge",instance="a:8081",account="mirror"}`:                               "1x40",
			},
			samples: map[[2]string]map[string]float64{
				{"Upstream calls by account", "{{account}} {{outcome}}"}: {`{account="default",outcome="ok"}`: 2, `{account="mirror",outcome="timeout"}`: 1},
				{"Account health", "{{account}} breaker"}:                {`{account="mirror"}`: 2},
				{"Account health", "{{account}} failure ratio"}:          {`{account="mirror"}`: 1},
			},
		},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var b strings.Builder
			// Every result and outcome series exists from start, as on
			// the edge: those the scenario does not move stay at 0.
			series := map[string]string{}
			for i := range 6 {
				series[fmt.Sprintf(`explorer_edge_cache_results_total{job="explorer-edge",instance="a:8081",route="block-list",result=%q}`, metrics.Result(i).String())] = "0x40"
			}
			for i := range 10 {
				series[fmt.Sprintf(`explorer_edge_upstream_requests_total{job="explorer-edge",instance="a:8081",route="block-list",outcome=%q}`, metrics.Outcome(i).String())] = "0x40"
			}
			for s, v := range sc.series {
				series[s] = v
			}
			b.WriteString("rule_files: []\nevaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n")
			for s, v := range series {
				fmt.Fprintf(&b, "      - series: %q\n        values: %q\n", s, v)
			}
			b.WriteString("    promql_expr_test:\n")
			for k, want := range sc.want {
				expr := panelExpr(t, panels, k[0], k[1])
				if expr == "" {
					continue
				}
				labels := "{}"
				if strings.Contains(expr, "by (route)") {
					labels = `{route="block-list"}`
				}
				fmt.Fprintf(&b, "      - expr: %q\n        eval_time: 8m\n        exp_samples:\n          - labels: %q\n            value: %v\n", expr, labels, want)
			}
			for k, samples := range sc.samples {
				expr := panelExpr(t, panels, k[0], k[1])
				if expr == "" {
					continue
				}
				fmt.Fprintf(&b, "      - expr: %q\n        eval_time: 8m\n        exp_samples:\n", expr)
				for labels, want := range samples {
					fmt.Fprintf(&b, "          - labels: %q\n            value: %v\n", labels, want)
				}
			}
			if t.Failed() {
				return
			}
			file := filepath.Join(t.TempDir(), "dashboard_test.yaml")
			if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
				t.Errorf("promtool test rules: %v\n%s", err, out)
			}
		})
	}
}
