package main

import (
	"math"
	"runtime/debug"

	"explorer-edge/cache"
)

// memoryBound is the resident memory the process is sized to stay within
// (explorer_edge_memory_bound_bytes): the Go memory limit in force plus
// the margin cache.MemoryLimit keeps under cache.RSSBound (32 MiB). With
// the limit run sets that is RSSBound(max_bytes); with GOMEMLIMIT set it
// follows GOMEMLIMIT. 0 when no limit is in force (GOMEMLIMIT=off).
func memoryBound(maxBytes int64) int64 {
	limit := debug.SetMemoryLimit(-1) // reads it
	if limit <= 0 || limit == math.MaxInt64 {
		return 0
	}
	return limit + cache.RSSBound(maxBytes) - cache.MemoryLimit(maxBytes)
}
