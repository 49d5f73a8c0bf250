package proxy

import "testing"

// TestInflightBoundsLargeAnswers: a route of 8 MB answers runs as many
// fetches at once as the bytes allow; one of 10 KB answers, or one not yet
// answered, is not held back.
func TestInflightBoundsLargeAnswers(t *testing.T) {
	const mb = 1 << 20
	f := newInflight(24_000_000) // three answers of 8 MB
	big, small := routeTransactionList, routeBlockList

	if w := f.acquire(big); w != 64<<10 {
		t.Fatalf("a route not answered yet reserves %d", w)
	} else {
		f.release(big, w, 8_000_000) // learns 8 MB answers
	}
	var held []int64
	for range 3 {
		held = append(held, f.acquire(big))
	}
	if held[0] != 8_000_000 || f.sem.TryAcquire(1<<20) {
		t.Fatalf("fetches of 8 MB answers reserve %d, or three leave room for 1 MB more", held[0])
	}
	done := make(chan int64)
	go func() { done <- f.acquire(big) }()
	f.release(big, held[0], 8_000_000)
	if w := <-done; w != 8_000_000 {
		t.Fatalf("the fourth fetch reserved %d", w)
	}
	for _, w := range held[1:] {
		f.release(big, w, 8_000_000)
	}

	w := f.acquire(small)
	f.release(small, w, 10_000)
	var many []int64
	for range 100 { // 10 KB answers: the 64 KB floor, a hundred at once in what is left
		many = append(many, f.acquire(small))
	}
	if many[0] != 64<<10 {
		t.Fatalf("a route of 10 KB answers reserves %d", many[0])
	}
	for _, w := range many {
		f.release(small, w, 10_000)
	}

	// After a large answer the weight falls by an eighth per smaller one.
	f.release(small, f.acquire(small), 4*mb)
	f.release(small, f.acquire(small), 10_000)
	if w := f.acquire(small); w != 4*mb-4*mb/8+10_000/8 {
		t.Fatalf("after 4 MB then 10 KB the route reserves %d", w)
	}
}
