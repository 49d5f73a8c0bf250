package upstream

import (
	"explorer-edge/proxy/route"
	"runtime"
	"testing"
	"time"
)

// TestInflightBoundsLargeAnswers: a route of 8 MB answers runs as many
// fetches at once as the bytes allow; one of 10 KB answers, or one not yet
// answered, is not held back.
func TestInflightBoundsLargeAnswers(t *testing.T) {
	const mb = 1 << 20
	f := NewByteGate(32 << 20) // the default: an eighth of 256 MiB
	big, small := route.TransactionList, route.BlockList
	acquire := func(id route.ID) Reservation {
		t.Helper()
		r, ok := f.acquire(id, time.Minute)
		if !ok {
			t.Fatalf("route %d refused", id)
		}
		return r
	}

	if r := acquire(big); r.n != 64<<10 {
		t.Fatalf("a route not answered yet reserves %d", r.n)
	} else {
		f.release(r, 8_000_000) // learns 8 MB answers
	}
	var held []Reservation
	for range 4 { // four at once, as before the lanes (bench/membound)
		held = append(held, acquire(big))
	}
	if held[0].n != 8_000_000 || held[0].sem != f.large || f.large.TryAcquire(1<<20) {
		t.Fatalf("fetches of 8 MB answers reserve %d, or four leave room for 1 MB more", held[0].n)
	}
	done := make(chan Reservation)
	go func() { done <- acquire(big) }()
	f.release(held[0], 8_000_000)
	if r := <-done; r.n != 8_000_000 {
		t.Fatalf("the fifth fetch reserved %d", r.n)
	} else {
		held[0] = r
	}
	for _, r := range held {
		f.release(r, 8_000_000)
	}

	f.release(acquire(small), 10_000)
	var many []Reservation
	for range 100 { // 10 KB answers: the 64 KB floor, a hundred at once
		many = append(many, acquire(small))
	}
	if many[0].n != 64<<10 {
		t.Fatalf("a route of 10 KB answers reserves %d", many[0].n)
	}
	for _, r := range many {
		f.release(r, 10_000)
	}

	// After a large answer the weight falls by an eighth per smaller one.
	f.release(acquire(small), 4*mb)
	f.release(acquire(small), 10_000)
	if r := acquire(small); r.n != 4*mb-4*mb/8+10_000/8 {
		t.Fatalf("after 4 MB then 10 KB the route reserves %d", r.n)
	}
}

// TestInflightSmallNeverBehindLarge: with the large lane held and a large
// fetch queued for it, a small fetch goes at once (it waited in the same
// queue, behind the large one); with the small lane full too, it waits
// only for small ones. Room the large lane has goes to small fetches only
// while no large one waits. The lanes add up to the capacity.
func TestInflightSmallNeverBehindLarge(t *testing.T) {
	f := NewByteGate(8 << 20) // max_bytes 64 MiB
	big, small := route.TransactionList, route.BlockList
	r, _ := f.acquire(big, 0)
	f.release(r, 7_500_000)
	r, _ = f.acquire(small, 0)
	f.release(r, 9_000)

	first, ok := f.acquire(big, 0)
	if !ok || first.n != f.largeCap || f.largeCap != 7<<20 {
		t.Fatalf("a 7.5 MB fetch reserved %d of the large lane's %d (ok %v)", first.n, f.largeCap, ok)
	}
	queued := make(chan Reservation)
	go func() {
		r, _ := f.acquire(big, time.Minute)
		queued <- r
	}()
	waitQueued(t, f)
	var smalls []Reservation
	for {
		r, ok := f.acquire(small, 0)
		if !ok {
			break
		}
		if r.sem != f.small {
			t.Fatalf("a small fetch took the large lane's room with a large one queued")
		}
		smalls = append(smalls, r)
	}
	if len(smalls) != 16 {
		t.Fatalf("%d small fetches at once, want 16 (1 MiB of 64 KB)", len(smalls))
	}
	got := make(chan Reservation)
	go func() {
		r, _ := f.acquire(small, time.Minute)
		got <- r
	}()
	f.release(smalls[0], 9_000)
	if r := <-got; r.sem != f.small {
		t.Fatalf("the small fetch was refused or went elsewhere: %+v", r)
	} else {
		smalls[0] = r
	}
	select {
	case r := <-queued:
		t.Fatalf("the large fetch went (%d) while the first held its lane", r.n)
	default:
	}
	f.release(first, 7_500_000)
	f.release(<-queued, 7_500_000)
	// No large fetch waits: a small one may use the large lane's room.
	if r, ok := f.acquire(small, 0); !ok || r.sem != f.large {
		t.Fatalf("a small fetch with the small lane full and the large one empty: %+v, %v", r, ok)
	} else {
		f.release(r, 9_000)
	}
	for _, r := range smalls {
		f.release(r, 9_000)
	}
	if !f.large.TryAcquire(f.largeCap) || !f.small.TryAcquire(f.capacity-f.largeCap) || f.small.TryAcquire(1) || f.large.TryAcquire(1) {
		t.Fatal("the lanes do not add up to the capacity, or a Reservation was not given back")
	}
}

// waitQueued returns once a fetch waits for the large lane: TryAcquire
// fails behind a waiter even where there is room.
func waitQueued(t *testing.T, f *ByteGate) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.large.TryAcquire(0) {
		if time.Now().After(deadline) {
			t.Fatal("no fetch queued for the large lane after 10 s")
		}
		runtime.Gosched()
	}
}

// TestInflightWaitBounded: a fetch waits for room at most its wait, and
// not at all with a wait of 0 (a stale copy, a background refresh).
func TestInflightWaitBounded(t *testing.T) {
	f := NewByteGate(8 << 20)
	big := route.TransactionList
	r, _ := f.acquire(big, 0)
	f.release(r, 7_500_000)
	held, _ := f.acquire(big, 0)
	if _, ok := f.acquire(big, 0); ok {
		t.Fatal("a second 7.5 MB fetch found room")
	}
	start := time.Now()
	if _, ok := f.acquire(big, 50*time.Millisecond); ok {
		t.Fatal("a second 7.5 MB fetch found room within its wait")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("the wait of 50 ms took %s", d)
	}
	f.release(held, 7_500_000)
	if r, ok := f.acquire(big, 0); !ok {
		t.Fatal("no room once the first gave its back")
	} else {
		f.release(r, 7_500_000)
	}
}
