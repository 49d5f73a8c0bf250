//go:build !race

package testkit

// Race: the race detector is on (see race.go).
const Race = false
