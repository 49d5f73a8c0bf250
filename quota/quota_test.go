package quota

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNeverMoreThanTheRate: many takers with and without waits never get
// more than rate x seconds + burst (a cancelled reservation of
// x/time/rate could give some back twice).
func TestNeverMoreThanTheRate(t *testing.T) {
	const rate, burst = 200.0, 10
	b := New(rate, burst)
	start := time.Now()
	stop := start.Add(500 * time.Millisecond)
	var got atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				wait := time.Duration(w%4) * time.Millisecond
				if ok, _ := b.Take(wait, w%5 == 0); ok {
					got.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	limit := rate*time.Since(start).Seconds() + burst
	if float64(got.Load()) > limit+1 {
		t.Fatalf("%d tokens in %v, more than rate x seconds + burst = %.0f", got.Load(), time.Since(start), limit)
	}
	if got.Load() < burst {
		t.Fatalf("only %d tokens", got.Load())
	}
}

// TestBackgroundLeavesAQuarter: background takes stop at a quarter of the
// burst; client takes go on.
func TestBackgroundLeavesAQuarter(t *testing.T) {
	b := New(0.001, 8)
	n := 0
	for {
		if ok, _ := b.Take(0, true); !ok {
			break
		}
		n++
	}
	// A take needs a quarter of the burst (2) there before it.
	if n != 7 {
		t.Fatalf("background took %d of 8, want 7", n)
	}
	if ok, _ := b.Take(0, false); !ok {
		t.Fatal("a client miss found no token")
	}
	if b.Spend() {
		t.Fatal("Spend took from an empty bucket")
	}
	if c := New(1, 1); !c.Spend() || c.Spend() {
		t.Fatal("Spend of a bucket of one")
	}
}
