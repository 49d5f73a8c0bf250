package admission

import (
	"hash/maphash"
	"math/bits"
	"net/netip"
	"sync"
	"time"

	"explorer-edge/internal/ipgroup"
)

// ipLimiters is the per-client-IP rate limit of auth.mode off: a table of
// fixed size (auth.ip_max_tracked addresses) holding one GCRA state per
// address, so that neither memory nor the work of a request grows with the
// number of addresses seen. A scan of a million addresses costs the same per
// request as one client does.
//
// The table is set-associative: an address hashes (with a per-process
// random seed, so a client cannot aim at one set) to a set of ipWays
// slots, and only that set is searched. A new address takes an empty slot
// of its set, or else the one whose bucket is fullest (the smallest
// theoretical arrival time): forgetting that address gives it back at most
// the little it had spent, and forgetting one whose bucket is already full
// changes nothing. Sets are guarded by striped locks, so clients of
// different stripes never wait for each other.
type ipLimiters struct {
	seed  maphash.Seed
	sets  []ipSet
	locks [ipStripes]ipStripe
}

// ipWays is the number of slots searched per request.
const ipWays = 8

// ipStripes is the number of locks over the sets.
const ipStripes = 64

type ipSet [ipWays]ipSlot

// ipSlot is one address's state: tat is the GCRA theoretical arrival time
// in Unix nanoseconds, 0 for an empty slot.
type ipSlot struct {
	key [16]byte
	tat int64
}

// ipStripe is one lock and what it counts, padded to its own cache line.
type ipStripe struct {
	mu      sync.Mutex
	tracked int64 // slots in use in this stripe's sets
	scanned int64 // slots examined by allow, for tests of the per-call work
	_       [40]byte
}

// newIPLimiters holds up to maxTracked addresses, rounded up to whole sets.
func newIPLimiters(maxTracked int) *ipLimiters {
	n := max(1, (maxTracked+ipWays-1)/ipWays)
	return &ipLimiters{seed: maphash.MakeSeed(), sets: make([]ipSet, n)}
}

// capacity is the number of addresses the table can hold.
func (l *ipLimiters) capacity() int { return len(l.sets) * ipWays }

// allow takes one request of key (an address, or an IPv6 prefix, as 16
// bytes) at rate r per second with bucket burst. When it refuses, wait is
// how long until a request would be allowed. It does not allocate.
func (l *ipLimiters) allow(key [16]byte, r float64, burst int, now time.Time) (ok bool, wait time.Duration) {
	if r <= 0 {
		return true, 0
	}
	// Emission interval and bucket depth in ns, bounded so that no sum
	// of times overflows (1e18 ns is 31 years).
	const limit = 1e18
	interval := int64(min(max(1, float64(time.Second)/r), limit))
	tolerance := int64(min(float64(interval)*float64(max(burst, 1)), limit))
	nowNs := now.UnixNano()

	hi, _ := bits.Mul64(maphash.Comparable(l.seed, key), uint64(len(l.sets)))
	set := &l.sets[hi]
	stripe := &l.locks[hi%ipStripes]
	stripe.mu.Lock()
	defer stripe.mu.Unlock()

	slot := -1
	victim := 0
	for i := range set {
		stripe.scanned++
		s := &set[i]
		if s.tat != 0 && s.key == key {
			slot = i
			break
		}
		if s.tat < set[victim].tat {
			victim = i // an empty slot (0) or the fullest bucket
		}
	}
	if slot < 0 {
		slot = victim
		if set[slot].tat == 0 {
			stripe.tracked++
		}
		set[slot] = ipSlot{key: key, tat: nowNs}
	}
	s := &set[slot]
	next := max(s.tat, nowNs) + interval
	if next-nowNs > tolerance {
		return false, time.Duration(next - nowNs - tolerance)
	}
	s.tat = next
	return true, 0
}

// tracked is the number of addresses held, and scanned the number of slots
// examined by every allow so far.
func (l *ipLimiters) stats() (tracked, scanned int64) {
	for i := range l.locks {
		st := &l.locks[i]
		st.mu.Lock()
		tracked += st.tracked
		scanned += st.scanned
		st.mu.Unlock()
	}
	return tracked, scanned
}

// ipKey is the key an address is limited under, as 16 bytes: its group
// (ipgroup.Key), the one every per-address limit counts.
func ipKey(a netip.Addr, v6Bits int) [16]byte {
	return ipgroup.Key(a, v6Bits).As16()
}
