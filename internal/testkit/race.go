//go:build race

package testkit

// Race: the race detector is on. It makes sync.Pool drop items at random,
// so allocation counts mean nothing under -race.
const Race = true
