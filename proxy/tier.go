package proxy

import (
	"time"

	"explorer-edge/cache"
)

// Tier is the shared second cache tier of fleet mode (DESIGN.md section 6).
// The proxy declares it here, beside its only user; fleet.Redis implements
// it (and gives the shared upstream budget, Options.Budget). Every method
// goes on without Redis when it is slow or down: Get misses, Set drops,
// Lock lets the caller fetch.
type Tier interface {
	// Get returns a usable entry for key, or nil.
	Get(key string, now time.Time) *cache.Entry
	// GetMany is Get for several keys in one round trip: entries[i] is
	// for keys[i]. Per-hash routes look up all their missing hashes at once.
	GetMany(keys []string, now time.Time) (entries []*cache.Entry)
	// Set stores e with its remaining fresh and stale windows.
	Set(e *cache.Entry, now time.Time)
	// Lock takes the fleet-wide fetch lock of key. When another node holds
	// it, Lock waits (bounded) for that node's answer and returns it as
	// filled. unlock is never nil.
	Lock(key string, now func() time.Time) (unlock func(), filled *cache.Entry)
}
