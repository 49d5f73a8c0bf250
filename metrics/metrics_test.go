package metrics_test

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// bucketAround returns the bounds of the histogram bucket that holds v
// (lo exclusive, hi inclusive; lo is 0 for the first bucket).
func bucketAround(bounds []float64, v float64) (lo, hi float64) {
	for _, b := range bounds {
		if v <= b {
			return lo, b
		}
		lo = b
	}
	return lo, math.Inf(1)
}

func histogramBounds(t *testing.T, m *metrics.Metrics, name string) []float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.GetMetric()) == 0 {
			continue
		}
		var bounds []float64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		return bounds
	}
	t.Fatalf("histogram %s not exported", name)
	return nil
}

// TestLatencyBucketsResolveHitsAndMisses: a hit takes a few microseconds
// and a miss up to upstream.timeout (5s by default). Each must land in a
// bucket whose bounds are within 2.5x of each other and which is not the
// first one (whose lower bound, 0, says nothing), so histogram_quantile
// can tell a 5 us hit from a 40 us one and a 5 s miss from a 1 s one. The
// number of buckets stays bounded: each is a series per route.
func TestLatencyBucketsResolveHitsAndMisses(t *testing.T) {
	m := metrics.New(route.Names(), nil, cacheStats{})
	for _, h := range []struct {
		name   string
		values []float64 // seconds that must be resolved
	}{
		{"explorer_edge_request_duration_seconds", []float64{3e-6, 5e-6, 20e-6, 1e-3, 1, 5}},
		{"explorer_edge_upstream_duration_seconds", []float64{200e-6, 1e-3, 50e-3, 1, 5}},
	} {
		bounds := histogramBounds(t, m, h.name)
		if len(bounds) > 24 {
			t.Errorf("%s: %d buckets, want at most 24 (each one is a series per route)", h.name, len(bounds))
		}
		for _, v := range h.values {
			lo, hi := bucketAround(bounds, v)
			if lo == 0 || math.IsInf(hi, 1) || hi/lo > 2.5 {
				t.Errorf("%s: %gs falls in (%g, %g]: not resolved (want 0 < lo, hi <= 2.5 lo)", h.name, v, lo, hi)
			}
		}
	}
}

// TestNoSeriesThatCannotMove: a path outside the route table is answered
// 404 before any cache lookup or upstream call, so route="unknown" exists
// only on requests_total (code 404, made at start so rate() sees the
// first one) and request_duration_seconds. A code the unknown route has
// never answered gets its series when it first happens.
func TestNoSeriesThatCannotMove(t *testing.T) {
	routes := route.Names()
	m := metrics.New(routes, nil, cacheStats{})
	unknown := len(routes)
	count := func() map[string][]string { // family -> codes (or "" per series) with route="unknown"
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				var route, code string
				for _, l := range s.GetLabel() {
					switch l.GetName() {
					case "route":
						route = l.GetValue()
					case "code":
						code = l.GetValue()
					}
				}
				if route == "unknown" {
					out[mf.GetName()] = append(out[mf.GetName()], code)
				}
			}
		}
		return out
	}
	got := count()
	for _, name := range []string{"explorer_edge_cache_results_total", "explorer_edge_upstream_requests_total", "explorer_edge_upstream_duration_seconds"} {
		if n := len(got[name]); n > 0 {
			t.Errorf("%s has %d series with route=\"unknown\", which can never move", name, n)
		}
	}
	if codes := got["explorer_edge_requests_total"]; len(codes) != 1 || codes[0] != "404" {
		t.Errorf("requests_total{route=\"unknown\"} codes %v, want [404]", codes)
	}
	if n := len(got["explorer_edge_request_duration_seconds"]); n != 1 {
		t.Errorf("request_duration_seconds{route=\"unknown\"}: %d series, want 1", n)
	}

	m.Request(unknown, m.CodeIndex("50115"), 1e-5)
	got = count()
	if codes := got["explorer_edge_requests_total"]; len(codes) != 2 {
		t.Errorf("after a 50115 on an unknown path, requests_total{route=\"unknown\"} codes %v, want 404 and 50115", codes)
	}
}

// TestDiskFamilies: the disk tier's families read the store's counters at
// scrape time, each under its name, and the histogram observes reads.
func TestDiskFamilies(t *testing.T) {
	m := metrics.New(route.Names(), nil, cacheStats{})
	st := metrics.DiskStats{Hits: 1, Misses: 2, Writes: 3, Drops: 4, WriteErrors: 5, Evictions: 6, Expired: 7, Corrupt: 8, Deleted: 9, Bytes: 10, Entries: 11, Resident: 12}
	observe := m.Disk(1<<20, func() metrics.DiskStats { return st })
	observe(3e-6)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		s := mf.GetMetric()[0]
		switch {
		case s.GetCounter() != nil:
			got[mf.GetName()] = s.GetCounter().GetValue()
		case s.GetGauge() != nil:
			got[mf.GetName()] = s.GetGauge().GetValue()
		case s.GetHistogram() != nil:
			got[mf.GetName()] = float64(s.GetHistogram().GetSampleCount())
		}
	}
	for name, want := range map[string]float64{
		"hits_total": 1, "misses_total": 2, "writes_total": 3, "drops_total": 4, "write_errors_total": 5,
		"evictions_total": 6, "expired_total": 7, "corrupt_total": 8, "deleted_total": 9,
		"bytes": 10, "entries": 11, "resident_bytes": 12, "max_bytes": 1 << 20, "read_seconds": 1,
	} {
		if v, ok := got["explorer_edge_disk_"+name]; !ok || v != want {
			t.Errorf("explorer_edge_disk_%s = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
}
