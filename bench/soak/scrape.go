package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one scrape of the edge's /metrics.
type sample struct {
	at         time.Time
	goroutines float64 // go_goroutines
	rss        float64 // process_resident_memory_bytes
	cacheBytes float64 // explorer_edge_cache_bytes
	entries    float64 // explorer_edge_cache_entries
	panics     float64 // explorer_edge_panics_total, every where; -1 absent (an edge older than it)
}

// scraper reads the edge's admin /metrics and keeps every sample.
type scraper struct {
	url     string
	hc      *http.Client
	mu      sync.Mutex
	samples []sample
}

func newScraper(url string) *scraper {
	return &scraper{url: url, hc: &http.Client{Timeout: 5 * time.Second}}
}

func (s *scraper) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

// scrape takes one sample and keeps it.
func (s *scraper) scrape(ctx context.Context) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("GET %s: %d", s.url, resp.StatusCode)
	}
	sm := sample{at: time.Now(), goroutines: -1, rss: -1, panics: -1}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "explorer_edge_panics_total{") {
			// One line per where label: summed.
			v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
			if err != nil {
				return sample{}, fmt.Errorf("/metrics: %q: %w", line, err)
			}
			sm.panics = max(sm.panics, 0) + v
			continue
		}
		var dst *float64
		switch {
		case strings.HasPrefix(line, "go_goroutines "):
			dst = &sm.goroutines
		case strings.HasPrefix(line, "process_resident_memory_bytes "):
			dst = &sm.rss
		case strings.HasPrefix(line, "explorer_edge_cache_bytes "):
			dst = &sm.cacheBytes
		case strings.HasPrefix(line, "explorer_edge_cache_entries "):
			dst = &sm.entries
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.IndexByte(line, ' '):]), 64)
		if err != nil {
			return sample{}, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return sample{}, err
	}
	if sm.goroutines < 0 || sm.rss < 0 {
		return sample{}, fmt.Errorf("/metrics has no go_goroutines or process_resident_memory_bytes")
	}
	s.mu.Lock()
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
	return sm, nil
}

// run scrapes every period until ctx ends. A failed scrape is skipped (the
// edge may be busy); the checks need only some samples.
func (s *scraper) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		s.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// settle polls the goroutine count until two readings in a row agree (or
// limit passes) and returns the last one.
func (s *scraper) settle(ctx context.Context, limit time.Duration) (float64, error) {
	prev := -1.0
	return s.pollGoroutines(ctx, limit, func(n float64) bool {
		same := n == prev
		prev = n
		return same
	})
}

// waitBelow polls the goroutine count until it is at most bound or limit
// passes, and returns the last reading.
func (s *scraper) waitBelow(ctx context.Context, bound float64, limit time.Duration) (float64, error) {
	return s.pollGoroutines(ctx, limit, func(n float64) bool { return n <= bound })
}

// pollGoroutines reads the goroutine count every 250 ms until done says so
// or limit passes, and returns the last reading. A failed scrape is tried
// again; only one failing at the deadline is an error.
func (s *scraper) pollGoroutines(ctx context.Context, limit time.Duration, done func(float64) bool) (float64, error) {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	last := -1.0
	for {
		sm, err := s.scrape(ctx)
		if err == nil {
			last = sm.goroutines
			if done(last) {
				return last, nil
			}
		}
		if time.Now().After(deadline) {
			if last < 0 {
				return 0, err
			}
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

// writeTSV writes the samples to path, one line each, seconds since t0.
func (s *scraper) writeTSV(path string, t0 time.Time) error {
	var b strings.Builder
	b.WriteString("seconds\tgoroutines\trss_bytes\tcache_bytes\tcache_entries\tpanics\n")
	for _, sm := range s.all() {
		fmt.Fprintf(&b, "%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n", sm.at.Sub(t0).Seconds(), sm.goroutines, sm.rss, sm.cacheBytes, sm.entries, sm.panics)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
