package upstream

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
)

// tokenTap is a budget the test opens one token at a time.
type tokenTap struct{ n atomic.Int64 }

// tapAccount is the account every token of a tap comes from.
var tapAccount = &account{name: "tap"}

func (b *tokenTap) try(bool, *account) (*account, time.Duration) {
	for {
		n := b.n.Load()
		if n <= 0 {
			return nil, time.Millisecond
		}
		if b.n.CompareAndSwap(n, n-1) {
			return tapAccount, 0
		}
	}
}

// grantOrder queues waiters of each tenant (per[i] of tenants[i]) on a
// dry budget, then gives tokens one by one and returns who got each.
func grantOrder(t *testing.T, tenants []*Tenant, per []int, tokens int) []string {
	t.Helper()
	var tap tokenTap
	g := newFairQueue(tap.try)
	all := 0
	for _, n := range per {
		all += n
	}
	got := make(chan string, all)
	var wg sync.WaitGroup
	total := 0
	for i, tn := range tenants {
		for range per[i] {
			total++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if u, _ := g.take(tn, 30*time.Second, false, nil); u != nil {
					got <- tn.Name
				}
			}()
			// Arrivals in a known order: each waits before the next comes.
			testkit.WaitFor(t, "waiter queued", func() bool { return g.waiting() == total })
		}
	}
	var order []string
	for range tokens {
		tap.n.Add(1)
		order = append(order, <-got)
	}
	// Release the rest so no goroutine outlives the test.
	tap.n.Add(int64(total - tokens))
	wg.Wait()
	testkit.WaitFor(t, "dispatcher gone", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return !g.running })
	return order
}

func count(order []string, name string) int {
	n := 0
	for _, o := range order {
		if o == name {
			n++
		}
	}
	return n
}

// TestFairQueueSharesTokensByWeight: a client that queued 30 misses first
// does not starve one that queued later; with shares 1:3 the tokens split
// 1:3 while both wait.
func TestFairQueueSharesTokensByWeight(t *testing.T) {
	for _, tc := range []struct {
		greedy, quiet float64
		wantQuiet     int // of 20 tokens
	}{{1, 1, 10}, {1, 3, 15}} {
		t.Run(fmt.Sprintf("%v:%v", tc.greedy, tc.quiet), func(t *testing.T) {
			greedy := &Tenant{Name: "greedy", Share: tc.greedy}
			quiet := &Tenant{Name: "quiet", Share: tc.quiet}
			order := grantOrder(t, []*Tenant{greedy, quiet}, []int{30, 30}, 20)
			if got := count(order, "quiet"); got < tc.wantQuiet-1 || got > tc.wantQuiet+1 {
				t.Fatalf("quiet got %d of 20 tokens, want %d±1 (order %s)", got, tc.wantQuiet, strings.Join(order, " "))
			}
		})
	}
}

// TestFairQueueIsWorkConserving: a client alone takes every token.
func TestFairQueueIsWorkConserving(t *testing.T) {
	alone := &Tenant{Name: "alone", Share: 1}
	order := grantOrder(t, []*Tenant{alone}, []int{12}, 12)
	if n := count(order, "alone"); n != 12 {
		t.Fatalf("alone got %d of 12 tokens", n)
	}
}

// TestFairQueueDeadlines: a waiter whose wait ends leaves the queue empty
// and the dispatcher stops; a caller that may not wait never queues, and
// takes nothing while others wait.
func TestFairQueueDeadlines(t *testing.T) {
	var tap tokenTap
	g := newFairQueue(tap.try)
	a := &Tenant{Name: "a", Share: 1}
	if u, _ := g.take(a, 20*time.Millisecond, false, nil); u != nil {
		t.Fatal("a token from a dry budget")
	}
	if n := g.waiting(); n != 0 {
		t.Fatalf("%d waiters left after their deadline", n)
	}
	testkit.WaitFor(t, "dispatcher gone", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return !g.running })

	done := make(chan bool)
	go func() { u, _ := g.take(a, 30*time.Second, false, nil); done <- u == tapAccount }()
	testkit.WaitFor(t, "waiter queued", func() bool { return g.waiting() == 1 })
	tap.n.Add(1)
	// The token is owed to the waiter: neither a caller without a wait nor
	// a background refresh may take it first. (The dispatcher may have
	// taken it already; then they find none either way.)
	if u, _ := g.take(a, 0, false, nil); u != nil {
		t.Fatal("a caller without a wait jumped the queue")
	}
	if u, _ := g.take(a, time.Second, true, nil); u != nil {
		t.Fatal("a background refresh jumped the queue")
	}
	if !<-done {
		t.Fatal("the waiter did not get the token")
	}
}

// TestFairQueueStraightThrough: with no one waiting and tokens in the
// budget, a take is the budget's own take, without allocating.
func TestFairQueueStraightThrough(t *testing.T) {
	var tap tokenTap
	tap.n.Store(1 << 40)
	g := newFairQueue(tap.try)
	a := &Tenant{Name: "a", Share: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		if u, _ := g.take(a, time.Second, false, nil); u == nil {
			t.Fatal("no token from a full budget")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per take", allocs)
	}
}

func BenchmarkFairQueueStraightThrough(b *testing.B) {
	var tap tokenTap
	tap.n.Store(1 << 62)
	g := newFairQueue(tap.try)
	a := &Tenant{Name: "a", Share: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.take(a, time.Second, false, nil)
		}
	})
}
