package admin

import (
	"explorer-edge/proxy/route"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTopSpaceSaving: a key asked more than a topSlots-th of the counted
// requests is in the table whatever else is asked, its count over the
// truth by at most its error.
func TestTopSpaceSaving(t *testing.T) {
	var tk Top
	tk.Init(1)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	long := strings.Repeat("k", 3*topKeyBytes) // longer than a slot's first buffer
	heavy := 0
	for i := range 20000 {
		if i%50 == 0 {
			tk.count(long, route.BlockList, now)
			heavy++
			continue
		}
		tk.count(fmt.Sprintf("/key/%d", i), route.TransactionList, now) // each once
	}
	rep := tk.Report(3, now)
	if len(rep.Keys) != 3 || rep.Keys[0].Key != long || rep.Keys[0].Route != "block-list" {
		t.Fatalf("top: %+v", rep.Keys[0])
	}
	k := rep.Keys[0]
	if k.Requests < uint64(heavy) || k.Requests-k.MaxOver > uint64(heavy) {
		t.Fatalf("heavy key counted %d (over by at most %d), asked %d", k.Requests, k.MaxOver, heavy)
	}
	if rep.Sampled != 20000 || tk.n != topSlots {
		t.Fatalf("sampled %d, slots used %d", rep.Sampled, tk.n)
	}
	// An hour later every count is gone; a clock going back changes nothing.
	if rep = tk.Report(3, now+int64(time.Hour)); len(rep.Keys) != 0 || rep.Sampled != 0 {
		t.Fatalf("an hour later: %+v", rep)
	}
	tk.count("/again", route.BlockList, now)
	if rep = tk.Report(3, now); len(rep.Keys) != 1 || rep.Keys[0].Requests != 1 {
		t.Fatalf("clock back: %+v", rep)
	}
}

// BenchmarkTopCountMissing is the sampled path at its worst: every key new
// to a full table, which scans it for the least counted.
func BenchmarkTopCountMissing(b *testing.B) {
	var tk Top
	tk.Init(1)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&protocolType=transaction&page=1&limit=20", i)
	}
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tk.count(keys[i%len(keys)], route.TransactionList, now)
	}
}

// BenchmarkTopSampleCall is what the hit path pays for the sampling alone:
// the call on a key the table holds, off, at 1 in 64 and on every request.
func BenchmarkTopSampleCall(b *testing.B) {
	key := "/api/v5/chainx/block/block-list?chainShortName=CHAINX&page=1&limit=20"
	for _, every := range []int{0, 64, 1} {
		b.Run(fmt.Sprint("every=", every), func(b *testing.B) {
			var tk Top
			tk.Init(every)
			now := time.Now().UnixNano()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk.Sample(key, route.BlockList, now)
				}
			})
		})
	}
}
