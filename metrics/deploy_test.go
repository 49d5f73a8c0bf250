package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/stream"
)

// The Grafana dashboard and the alert rules in deploy/ are written by hand
// against the names in metrics.go. These tests fail when they name a
// family, label or label value the edge does not export, so a rename in
// one place cannot silently blank a panel or an alert.

type cacheStats struct{}

func (cacheStats) Bytes() int64     { return 0 }
func (cacheStats) Entries() int64   { return 0 }
func (cacheStats) Evictions() int64 { return 0 }
func (cacheStats) MaxBytes() int64  { return 1 << 20 }

func (cacheStats) IdentityBytes() int64 { return 0 }

// exported maps each family the edge can export (fleet mode included) to
// its label names and, for each, the values it takes.
type exported map[string]*family

type family struct {
	typ    dto.MetricType
	labels map[string][]string
}

func exportedFamilies(t *testing.T) exported {
	t.Helper()
	m := metrics.New(route.Names(), []string{"CHAINX", "TRADE_ZONE"}, cacheStats{})
	m.RegisterShared()
	m.BudgetTokens(func() float64 { return 0 })                                                       // registered by the proxy's upstream
	m.Client("anonymous")                                                                             // made by the proxy's admission, for each client
	m.Accounts([]string{"default"}, func(int) metrics.AccountState { return metrics.AccountState{} }) // by the proxy's pool
	m.BuildInfo("v1.0.0", "0123abcd", "go1")                                                          // by main
	m.MemoryBound(448 << 20)                                                                          // by main, from the memory limit
	m.FinalHeight("CHAINX", 100)                                                                      // once a block list says it
	m.HeadAges([]string{"CHAINX", "TRADE_ZONE"}, func(string) (float64, bool) { return 1, true })     // by the proxy, once a head is seen
	stream.NewMetrics(m.Registry, []string{"CHAINX", "TRADE_ZONE"})                                   // by the proxy, with stream.enabled
	m.StreamPolls([]string{"CHAINX", "TRADE_ZONE"})                                                   // the same
	m.Disk(1<<30, func() metrics.DiskStats { return metrics.DiskStats{} })                            // by the composition root, with cache.disk_path
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := exported{}
	for _, mf := range mfs {
		f := &family{typ: mf.GetType(), labels: map[string][]string{}}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(f.labels[l.GetName()], l.GetValue()) {
					f.labels[l.GetName()] = append(f.labels[l.GetName()], l.GetValue())
				}
			}
		}
		if f.typ == dto.MetricType_HISTOGRAM {
			f.labels["le"] = nil // any bucket bound
		}
		out[mf.GetName()] = f
	}
	return out
}

var (
	// selector is a metric name with its optional label matchers. Only the
	// edge's own families and the Go and process collectors' are checked.
	selector = regexp.MustCompile(`\b((?:explorer_edge|go|process)_[a-z0-9_]+)(\{[^}]*\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	literals = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)
)

// check reports every selector in text that names something not exported.
func (ex exported) check(t *testing.T, where, text string) (names int) {
	t.Helper()
	names, problems := ex.problems(text)
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
	return names
}

// problems lists what text names that the edge does not export.
func (ex exported) problems(text string) (names int, problems []string) {
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for _, m := range selector.FindAllStringSubmatch(text, -1) {
		name, matchers := m[1], m[2]
		names++
		f, ok := ex[name]
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base, cut := strings.CutSuffix(name, suffix)
				if g, isHist := ex[base]; cut && isHist && g.typ == dto.MetricType_HISTOGRAM {
					f, ok = g, true
					if suffix != "_bucket" {
						f = &family{labels: maps(g.labels, "le")}
					}
				}
			}
		}
		if !ok {
			bad("%s is not exported by the edge", name)
			continue
		}
		for _, mm := range matcher.FindAllStringSubmatch(matchers, -1) {
			label, op, value := mm[1], mm[2], mm[3]
			if label == "job" || label == "instance" {
				continue // added by Prometheus at scrape time
			}
			values, has := f.labels[label]
			if !has {
				bad("%s has no label %q", name, label)
				continue
			}
			if values == nil || strings.Contains(value, "$") {
				continue
			}
			var want []string
			switch {
			case op == "=" || op == "!=":
				want = []string{value}
			case literals.MatchString(value):
				want = strings.Split(value, "|")
			}
			for _, v := range want {
				if !slices.Contains(values, v) {
					bad("%s{%s%s%q}: the edge never exports %s=%q (it has %v)", name, label, op, value, label, v, values)
				}
			}
		}
	}
	return names, problems
}

func maps(labels map[string][]string, drop string) map[string][]string {
	out := map[string][]string{}
	for k, v := range labels {
		if k != drop {
			out[k] = v
		}
	}
	return out
}

func TestDashboardNamesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "explorer-edge.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	ex := exportedFamilies(t)
	// Every string of the dashboard: panel targets, variable queries, links.
	n := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		case string:
			n += ex.check(t, "dashboard "+path, v)
		}
	}
	walk("", dash)
	if n < 10 {
		t.Fatalf("found only %d metric names in the dashboard; is the pattern still right?", n)
	}
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	ex := exportedFamilies(t)
	for _, file := range []string{"alerts.yaml", "alerts_test.yaml"} {
		raw, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", file))
		if err != nil {
			t.Fatal(err)
		}
		if n := ex.check(t, file, string(raw)); n < 5 {
			t.Fatalf("found only %d metric names in %s; is the pattern still right?", n, file)
		}
	}
}

// TestAlertRulesPassPromtool runs `promtool check rules` and the rules' unit
// tests (`promtool test rules`).
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	dir := filepath.Join("..", "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// alertRules reads the alerting rules of alerts.yaml.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

// githubAnchor is the fragment GitHub gives a Markdown heading: lower
// case, punctuation other than '-' and '_' dropped, spaces as '-'.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookAnchors lists the anchors of the "###" sections under "## Runbook"
// in docs/operations.md.
func runbookAnchors(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var anchors []string
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line[3:]) == "Runbook"
		case in && strings.HasPrefix(line, "### "):
			anchors = append(anchors, githubAnchor(line[4:]))
		}
	}
	return anchors
}

// TestAlertRulesHaveRunbooks: every alert is named ExplorerEdge..., and its
// runbook_url points to its own section of the runbook in
// docs/operations.md, which exists; every runbook section is an alert's.
func TestAlertRulesHaveRunbooks(t *testing.T) {
	rules := alertRules(t)
	anchors := runbookAnchors(t)
	if len(rules) < 10 || len(anchors) == 0 {
		t.Fatalf("%d alerts, %d runbook sections: is the parsing still right?", len(rules), len(anchors))
	}
	used := map[string]bool{}
	for _, r := range rules {
		if !strings.HasPrefix(r.Alert, "ExplorerEdge") {
			t.Errorf("alert %s: name it ExplorerEdge..., so it says which product pages", r.Alert)
		}
		url := r.Annotations["runbook_url"]
		want := "docs/operations.md#" + githubAnchor(r.Alert)
		if url != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, url, want)
		}
		_, anchor, _ := strings.Cut(url, "#")
		if !slices.Contains(anchors, anchor) {
			t.Errorf("alert %s: runbook_url %q: docs/operations.md has no section #%s under ## Runbook", r.Alert, url, anchor)
		}
		used[anchor] = true
	}
	for _, a := range anchors {
		if !used[a] {
			t.Errorf("docs/operations.md runbook section #%s belongs to no alert", a)
		}
	}
	if githubAnchor("ExplorerEdge Breaker-open (pod)") != "exploreredge-breaker-open-pod" {
		t.Errorf("githubAnchor: %q", githubAnchor("ExplorerEdge Breaker-open (pod)"))
	}
}

// TestCheckCatchesWrongNames keeps the checker honest: each of these must be
// reported, and the correct spellings must not.
func TestCheckCatchesWrongNames(t *testing.T) {
	ex := exportedFamilies(t)
	for _, text := range []string{
		`rate(explorer_edge_request_total[5m])`,
		`explorer_edge_cache_results_total{result="hits"}`,
		`explorer_edge_cache_results_total{result=~"hit|stale_errors"}`,
		`explorer_edge_upstream_requests_total{outcome!="breaker"}`,
		`explorer_edge_requests_total{status="200"}`,
		`explorer_edge_cache_bytes_bucket`,
		`explorer_edge_request_duration_seconds_sum{le="1"}`,
		`go_gorutines`,
	} {
		if _, p := ex.problems(text); len(p) == 0 {
			t.Errorf("%s: not reported", text)
		}
	}
	good := `sum(rate(explorer_edge_request_duration_seconds_bucket{job=~"$job",le="0.1"}[5m])) /
		explorer_edge_request_duration_seconds_count{route="block-list"} +
		explorer_edge_cache_results_total{result=~"hit|stale",route=~"$route"} +
		explorer_edge_upstream_requests_total{outcome!~"breaker_open|budget_exhausted"} +
		explorer_edge_shared_requests_total{op="lock",outcome="timeout"} + go_goroutines + process_cpu_seconds_total`
	if n, p := ex.problems(good); n != 7 || len(p) > 0 {
		t.Errorf("correct names: %d found, problems %v", n, p)
	}
}
