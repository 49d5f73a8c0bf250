package route

import (
	"explorer-edge/internal/testkit"
	"fmt"
	"strings"
	"testing"
)

// A lookup finds exactly what was stored for that URI or nothing, even when
// far more URIs than slots were stored and most were overwritten.
func TestMemoNeverAnswersForAnotherURI(t *testing.T) {
	m := NewMemo()
	r := ByPath([]byte("/api/v5/chainx/block/block-list"))
	uri := func(i int) string {
		return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d", i)
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i) }
	n := 3 * memoSlots
	for i := range n {
		m.Store([]byte(uri(i)), []byte(key(i)), r)
	}
	found := 0
	for i := range n {
		e := m.Lookup([]byte(uri(i)))
		if e == nil {
			continue
		}
		found++
		if e.raw != uri(i) || e.Key != key(i) || e.Route != r {
			t.Fatalf("lookup %q returned %q -> %q", uri(i), e.raw, e.Key)
		}
	}
	if found < memoSlots/2 || found > memoSlots {
		t.Fatalf("%d of %d URIs remembered in %d slots", found, n, memoSlots)
	}
	if e := m.Lookup([]byte(uri(n))); e != nil {
		t.Fatalf("a URI never stored was found: %q", e.raw)
	}

	long := "/api/v5/chainx/block/block-list?chainShortName=chainx&x=" + strings.Repeat("a", memoMaxURI)
	m.Store([]byte(long), []byte("k"), r)
	if m.Lookup([]byte(long)) != nil {
		t.Fatal("a URI over memoMaxURI was remembered")
	}
	multi := ByPath([]byte("/api/v5/chainx/tz/cross/transaction-multi"))
	m.Store([]byte("/api/v5/chainx/tz/cross/transaction-multi?txId=ab"), []byte("k"), multi)
	if m.Lookup([]byte("/api/v5/chainx/tz/cross/transaction-multi?txId=ab")) != nil {
		t.Fatal("a per-hash route was remembered")
	}
}

// Remembering a URI costs two allocations, the entry and one string holding
// the URI and its key, however long they are.
func TestRememberingAURIAllocatesTwice(t *testing.T) {
	if testkit.Race {
		t.Skip("allocation counts are meaningless under -race")
	}
	m := NewMemo()
	r := ByPath([]byte("/api/v5/chainx/block/block-list"))
	raw := []byte("/api/v5/chainx/block/block-list?chainShortName=chainx&height=30198879&limit=17")
	key := []byte("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=30198879&limit=17&page=1")
	allocs := testing.AllocsPerRun(100, func() { m.Store(raw, key, r) })
	if allocs != 2 {
		t.Fatalf("store: %v allocations, want 2", allocs)
	}
	e := m.Lookup(raw)
	if e == nil || e.raw != string(raw) || e.Key != string(key) {
		t.Fatalf("lookup after store: %+v", e)
	}
}
