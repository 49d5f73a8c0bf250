package metrics_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// panelSamples is what one target of a panel must give at 8m: labels ->
// value, every sample.
type panelSamples struct {
	title, legend string
	samples       map[string]float64
}

// evalPanels evaluates panel targets with promtool on series sampled every
// 15s for 10 minutes.
func evalPanels(t *testing.T, series map[string]string, checks []panelSamples) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	panels := dashboardPanels(t)
	var b strings.Builder
	b.WriteString("rule_files: []\nevaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n")
	for s, v := range series {
		fmt.Fprintf(&b, "      - series: %q\n        values: %q\n", s, v)
	}
	b.WriteString("    promql_expr_test:\n")
	for _, c := range checks {
		expr := panelExpr(t, panels, c.title, c.legend)
		if expr == "" {
			continue
		}
		fmt.Fprintf(&b, "      - expr: %q\n        eval_time: 8m\n        exp_samples:\n", expr)
		if len(c.samples) == 0 {
			b.WriteString("          []\n")
		}
		for labels, want := range c.samples {
			fmt.Fprintf(&b, "          - labels: %q\n            value: %v\n", labels, want)
		}
	}
	if t.Failed() {
		return
	}
	file := filepath.Join(t.TempDir(), "panels_test.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// TestDashboardShowsWhatTheOperatorAsks: the panels an operator needs in
// the second week exist and show the series they name: connections (open
// against the cap, refused, accept errors), which builds run, reorgs and
// purges, what Redis held that the edge refused, the memory bound on the
// memory panel, and the scheduler's wait that the latency histogram cannot
// see.
func TestDashboardShowsWhatTheOperatorAsks(t *testing.T) {
	const a, b = `job="explorer-edge",instance="a:8081"`, `job="explorer-edge",instance="b:8081"`
	series := map[string]string{
		`explorer_edge_connections_open{` + a + `,listener="public"}`:                                    "9800x40",
		`explorer_edge_connections_max{` + a + `,listener="public"}`:                                     "10000x40",
		`explorer_edge_connections_refused_total{` + a + `,listener="public",reason="max_conns"}`:        "0+30x40",
		`explorer_edge_connections_refused_total{` + a + `,listener="public",reason="max_conns_per_ip"}`: "0x40",
		`explorer_edge_accept_errors_total{` + a + `,listener="public"}`:                                 "0+15x40",
		`explorer_edge_build_info{` + a + `,version="v1.2.0",revision="abc",goversion="go1.26"}`:         "1x40",
		`explorer_edge_build_info{` + b + `,version="v1.3.0",revision="def",goversion="go1.26"}`:         "1x40",
		`explorer_edge_reorgs_total{` + a + `,chain="CHAINX"}`:                                           "0 0 0 0 1x36",
		`explorer_edge_reorgs_total{` + a + `,chain="TRADE_ZONE"}`:                                       "0x40",
		`explorer_edge_purges_total{` + a + `,selector="heights",mode="hard"}`:                           "0+1x40",
		`explorer_edge_shared_rejected_total{` + a + `,reason="purge_record"}`:                           "0+2x40",
		`explorer_edge_shared_rejected_total{` + a + `,reason="entry"}`:                                  "0x40",
		`process_resident_memory_bytes{` + a + `}`:                                                       "400000000x40",
		`go_memstats_heap_inuse_bytes{` + a + `}`:                                                        "300000000x40",
		`explorer_edge_memory_bound_bytes{` + a + `}`:                                                    "469762048x40",
		`go_gc_gomemlimit_bytes{` + a + `}`:                                                              "436207616x40",
		// Every goroutine wake waited between 10 ms and 117 ms.
		`go_sched_latencies_seconds_bucket{` + a + `,le="0.0009175039999999999"}`: "0x40",
		`go_sched_latencies_seconds_bucket{` + a + `,le="0.010485759999999998"}`:  "0x40",
		`go_sched_latencies_seconds_bucket{` + a + `,le="0.11744051199999998"}`:   "0+100x40",
		`go_sched_latencies_seconds_bucket{` + a + `,le="+Inf"}`:                  "0+100x40",
	}
	const perStep = 15.0 // $__rate_interval is 1m; increase() of one per step is 4
	evalPanels(t, series, []panelSamples{
		{"Connections", "open {{listener}}", map[string]float64{`{listener="public"}`: 9800}},
		{"Connections", "max {{listener}}", map[string]float64{`{listener="public"}`: 10000}},
		{"Connections", "refused/s {{listener}} {{reason}}", map[string]float64{
			`{listener="public",reason="max_conns"}`: 30 / perStep, `{listener="public",reason="max_conns_per_ip"}`: 0}},
		{"Connections", "accept errors/s {{listener}}", map[string]float64{`{listener="public"}`: 1}},
		{"Running version", "", map[string]float64{
			`{version="v1.2.0",revision="abc",goversion="go1.26"}`: 1, `{version="v1.3.0",revision="def",goversion="go1.26"}`: 1}},
		{"Reorgs and purges", "reorgs {{chain}}", map[string]float64{`{chain="CHAINX"}`: 0, `{chain="TRADE_ZONE"}`: 0}},
		{"Reorgs and purges", "purges {{selector}} {{mode}}", map[string]float64{`{selector="heights",mode="hard"}`: 4}},
		{"Shared tier rejections", "{{reason}}", map[string]float64{`{reason="purge_record"}`: 8, `{reason="entry"}`: 0}},
		{"Memory", "bound {{instance}}", map[string]float64{`{instance="a:8081"}`: 469762048}},
		{"Memory", "Go limit {{instance}}", map[string]float64{`{instance="a:8081"}`: 436207616}},
		{"Scheduler wait", "p99", map[string]float64{`{}`: 0.010485759999999998 + 0.99*(0.11744051199999998-0.010485759999999998)}},
	})
}

// TestFinalHeightAbsentUntilKnown: a configured chain no block list was
// asked of has no chain_final_height series (the panel shows no value, not
// a finalized height of 0); its first height makes one; a height of 0 or an
// unconfigured chain never does.
func TestFinalHeightAbsentUntilKnown(t *testing.T) {
	m := metrics.New(route.Names(), []string{"CHAINX", "TRADE_ZONE"}, cacheStats{})
	heights := func() map[string]float64 {
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "explorer_edge_chain_final_height" {
				continue
			}
			for _, s := range mf.GetMetric() {
				out[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
		return out
	}
	if got := heights(); len(got) != 0 {
		t.Fatalf("before any block list: %v, want no series", got)
	}
	m.FinalHeight("CHAINX", 0)
	m.FinalHeight("OTHER", 5)
	if got := heights(); len(got) != 0 {
		t.Fatalf("after a height of 0 and an unconfigured chain: %v, want no series", got)
	}
	m.FinalHeight("CHAINX", 1234)
	if got := heights(); len(got) != 1 || got["CHAINX"] != 1234 {
		t.Fatalf("after CHAINX's first height: %v, want only CHAINX=1234", got)
	}
}

// TestDashboardShowsTheDiskTier: the disk tier's row shows its lookups
// and hit ratio, what was written and not, its size against its bound and
// its read latency.
func TestDashboardShowsTheDiskTier(t *testing.T) {
	const a = `job="explorer-edge",instance="a:8081"`
	series := map[string]string{
		`explorer_edge_disk_hits_total{` + a + `}`:         "0+45x40",
		`explorer_edge_disk_misses_total{` + a + `}`:       "0+15x40",
		`explorer_edge_disk_writes_total{` + a + `}`:       "0+15x40",
		`explorer_edge_disk_drops_total{` + a + `}`:        "0x40",
		`explorer_edge_disk_write_errors_total{` + a + `}`: "0x40",
		`explorer_edge_disk_evictions_total{` + a + `}`:    "0+30x40",
		`explorer_edge_disk_deleted_total{` + a + `}`:      "0x40",
		`explorer_edge_disk_corrupt_total{` + a + `}`:      "0x40",
		`explorer_edge_disk_bytes{` + a + `}`:              "268000000x40",
		`explorer_edge_disk_max_bytes{` + a + `}`:          "268435456x40",
		`explorer_edge_disk_entries{` + a + `}`:            "40000x40",
		`explorer_edge_disk_resident_bytes{` + a + `}`:     "100000000x40",
		// Every read between two bounds (powers of two, so that the
		// interpolation is exact).
		`explorer_edge_disk_read_seconds_bucket{` + a + `,le="0.25"}`: "0x40",
		`explorer_edge_disk_read_seconds_bucket{` + a + `,le="0.5"}`:  "0+60x40",
		`explorer_edge_disk_read_seconds_bucket{` + a + `,le="+Inf"}`: "0+60x40",
	}
	evalPanels(t, series, []panelSamples{
		{"Disk tier lookups", "hits/s {{instance}}", map[string]float64{`{instance="a:8081"}`: 3}},
		{"Disk tier lookups", "hit ratio", map[string]float64{`{}`: 0.75}},
		{"Disk tier writes", "writes/s {{instance}}", map[string]float64{`{instance="a:8081"}`: 1}},
		{"Disk tier writes", "evictions/s {{instance}}", map[string]float64{`{instance="a:8081"}`: 2}},
		{"Disk tier size", "bytes {{instance}}", map[string]float64{`{instance="a:8081"}`: 268000000}},
		{"Disk tier size", "max {{instance}}", map[string]float64{`{instance="a:8081"}`: 268435456}},
		{"Disk tier size", "entries {{instance}}", map[string]float64{`{instance="a:8081"}`: 40000}},
		{"Memory", "disk file pages {{instance}}", map[string]float64{`{instance="a:8081"}`: 100000000}},
		{"Disk tier read latency", "p50", map[string]float64{`{}`: 0.375}},
	})
}
