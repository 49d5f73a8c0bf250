package main

import (
	"math"
	"runtime/debug"
	"testing"

	"explorer-edge/cache"
	"explorer-edge/sim"
)

// TestMemoryBoundMetric: /metrics says what resident memory the process is
// sized for (the line of the memory panel and of ExplorerEdgeMemoryNearBound):
// 1.5 x cache.max_bytes + 64 MiB, the bound the edge's own Go memory limit
// keeps 32 MiB under.
func TestMemoryBoundMetric(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // run sets the process' limit
	_, url, _ := startSim(t, sim.Faults{})
	f := demoEdge(url)
	const maxBytes = 64 << 20
	f.rest = "cache:\n  max_bytes: 67108864\n"
	e := startEdge(t, f)
	if got, want := e.metric("explorer_edge_memory_bound_bytes"), float64(cache.RSSBound(maxBytes)); got != want {
		t.Fatalf("explorer_edge_memory_bound_bytes = %v, want %v (1.5 x 64 MiB + 64 MiB)", got, want)
	}
}

// TestMemoryBoundFollowsGOMEMLIMIT: with GOMEMLIMIT set the bound is that
// limit plus the same margin; with none in force there is no bound.
func TestMemoryBoundFollowsGOMEMLIMIT(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	debug.SetMemoryLimit(1 << 30)
	if got, want := memoryBound(256<<20), int64(1<<30+32<<20); got != want {
		t.Errorf("GOMEMLIMIT 1 GiB: bound %d, want %d", got, want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := memoryBound(256 << 20); got != 0 {
		t.Errorf("no limit: bound %d, want 0 (no series)", got)
	}
}
