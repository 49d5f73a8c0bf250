package admin

import (
	"bytes"
	"explorer-edge/proxy/logsample"
	"explorer-edge/proxy/route"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// The most-asked keys (GET /cache/top on the admin port): one request in
// admin.top_sample is counted, by its normalized key, into a table of
// topSlots keys kept by the space-saving algorithm (Metwally, Agrawal and
// El Abbadi, 2005): a key not in a full table takes the place of the one
// counted least, inheriting its count as the bound of its own error. Any
// key asked more than a topSlots-th of the sampled requests is in the
// table, its count over by at most its error. Counts halve at each
// minute, so the table tells the last minutes, not the process's life.
//
// The cost on the request path is one atomic load and one comparison of a
// per-thread random number when the request is not sampled, and a mutex,
// a hash and a scan of 256 digests when it is. Neither allocates: a slot
// reuses its key buffer (topKeyBytes from one arena made at start; a
// longer key grows its slot's buffer once, up to server.max_url_bytes).

const (
	topSlots    = 256
	topKeyBytes = 256
	topMinute   = int64(time.Minute)
)

// Top is the table of the most-asked keys; the zero value is off until
// Init.
type Top struct {
	// threshold is the sampling threshold a random uint64 is compared
	// with (sampleThreshold of 1/admin.top_sample); 0 = off.
	threshold atomic.Uint64

	mu     sync.Mutex
	every  int   // admin.top_sample the counts were taken at
	minute int64 // the minute (unix ns / 1 min) the counts are decayed to
	n      int   // slots in use: slots[:n]
	total  uint64
	digest [topSlots]uint64 // xxhash of each slot's key, scanned first
	slots  [topSlots]topSlot
}

type topSlot struct {
	key   []byte
	route route.ID
	count uint64 // sampled requests, halved each minute; over by at most err
	err   uint64
}

// Init turns sampling on for one request in every.
func (t *Top) Init(every int) {
	arena := make([]byte, topSlots*topKeyBytes)
	for i := range t.slots {
		t.slots[i].key = arena[i*topKeyBytes : i*topKeyBytes : (i+1)*topKeyBytes]
	}
	t.SetEvery(every)
}

// setEvery applies admin.top_sample: count 1 request in every (0: none).
// A new rate starts the table over: counts taken at two rates do not add.
// SetEvery changes the sampling (a reload).
func (t *Top) SetEvery(every int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if every == t.every {
		return
	}
	t.every, t.n, t.total = every, 0, 0
	if every <= 0 {
		t.threshold.Store(0)
		return
	}
	t.threshold.Store(logsample.Threshold(1 / float64(every)))
}

// sample counts key, asked at now (unix ns), in one request of every.
// Sample counts key, of route r, when the request is sampled.
func (t *Top) Sample(key string, r route.ID, now int64) {
	if th := t.threshold.Load(); th == 0 || rand.Uint64() > th {
		return
	}
	t.count(key, r, now)
}

// sampleBytes is sample of a key held in a reused buffer (copied if kept).
// SampleBytes is Sample of a key in bytes.
func (t *Top) SampleBytes(key []byte, r route.ID, now int64) {
	if th := t.threshold.Load(); th == 0 || rand.Uint64() > th {
		return
	}
	t.count(unsafe.String(unsafe.SliceData(key), len(key)), r, now)
}

func (t *Top) count(key string, r route.ID, now int64) {
	d := xxhash.Sum64String(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay(now)
	t.total++
	for i := range t.n {
		if t.digest[i] == d && string(t.slots[i].key) == key {
			t.slots[i].count++
			return
		}
	}
	i := t.n
	var floor uint64
	if t.n < topSlots {
		t.n++
	} else { // full: the least counted makes room
		i = 0
		for j := 1; j < topSlots; j++ {
			if t.slots[j].count < t.slots[i].count {
				i = j
			}
		}
		floor = t.slots[i].count
	}
	s := &t.slots[i]
	s.key = append(s.key[:0], key...)
	s.route, s.count, s.err = r, floor+1, floor
	t.digest[i] = d
}

// decay halves the counts once per minute passed since the last call, and
// frees the slots whose counts reach 0. A clock that goes back changes
// nothing.
func (t *Top) decay(now int64) {
	m := now / topMinute
	if m <= t.minute {
		return
	}
	shift := m - t.minute
	t.minute = m
	if shift >= 64 {
		t.n, t.total = 0, 0
		return
	}
	t.total >>= shift
	for i := 0; i < t.n; {
		s := &t.slots[i]
		s.count >>= shift
		s.err >>= shift
		if s.count > 0 {
			i++
			continue
		}
		// Freed: the last slot in use takes its place, buffers swapped.
		t.n--
		t.slots[i], t.slots[t.n] = t.slots[t.n], t.slots[i]
		t.digest[i] = t.digest[t.n]
	}
}

// TopKey is one row of GET /cache/top.
type TopKey struct {
	Key   string `json:"key"`
	Route string `json:"route"`
	// Requests is the estimate: sampled count x admin.top_sample, halved
	// each minute; MaxOver is how much of it may be another key's
	// (the space-saving error, x admin.top_sample).
	Requests uint64  `json:"requests"`
	MaxOver  uint64  `json:"max_over"`
	Share    float64 `json:"share"` // of the sampled requests
}

// topReport is the answer of GET /cache/top.
// Report is the answer of GET /cache/top.
type Report struct {
	Every    int      `json:"sample_every"` // admin.top_sample; 0: off
	Sampled  uint64   `json:"sampled"`      // sampled requests in the table, halved each minute
	Requests uint64   `json:"requests"`     // the estimate of all requests: sampled x sample_every
	Slots    int      `json:"slots"`
	Keys     []TopKey `json:"keys"`
}

// top is the n most counted keys at now, most counted first.
// Report is the n most-asked keys at now.
func (t *Top) Report(n int, now int64) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay(now)
	every := uint64(max(t.every, 0))
	rep := Report{Every: t.every, Sampled: t.total, Requests: t.total * every, Slots: topSlots, Keys: []TopKey{}}
	idx := make([]int, t.n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		sa, sb := &t.slots[a], &t.slots[b]
		switch {
		case sa.count != sb.count:
			if sa.count > sb.count {
				return -1
			}
			return 1
		case sa.err != sb.err: // the surer count first
			if sa.err < sb.err {
				return -1
			}
			return 1
		}
		return bytes.Compare(sa.key, sb.key)
	})
	for _, i := range idx[:min(n, len(idx))] {
		s := &t.slots[i]
		share := 0.0
		if t.total > 0 {
			share = math.Round(float64(s.count)/float64(t.total)*1e4) / 1e4
		}
		rep.Keys = append(rep.Keys, TopKey{Key: string(s.key), Route: s.route.String(),
			Requests: s.count * every, MaxOver: s.err * every, Share: share})
	}
	return rep
}
