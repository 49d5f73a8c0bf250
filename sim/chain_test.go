package sim

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestDeterminism: the same request at the same chain time gives the same
// bytes, from one server and from two with the same seed; another seed
// gives other content.
func TestDeterminism(t *testing.T) {
	clk := newClock()
	a := start(t, Config{Now: clk.Now, Seed: 7})
	b := start(t, Config{Now: clk.Now, Seed: 7})
	other := start(t, Config{Now: clk.Now, Seed: 8})
	head := a.Head("CHAINX")
	if b.Head("CHAINX") != head {
		t.Fatalf("heads differ: %d %d", head, b.Head("CHAINX"))
	}
	queries := []string{
		"/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=100",
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&limit=100", head-1),
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&protocolType=internal", head-9),
		"/api/v5/chainx/token/position-list?chainShortName=CHAINX&limit=50&tokenContractAddress=" + a.TokenContracts("CHAINX")[2],
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + join(a.CrossHashes("TRADE_ZONE", 20)),
		"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + a.CrossHashes("TRADE_ZONE", 4)[3],
		"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + join(a.InternalTxHashes("CHAINX", 20)),
	}
	for _, q := range queries {
		first := get(t, a, q)
		again := get(t, a, q)
		twin := get(t, b, q)
		if first.status != 200 || !bytes.Equal(first.body, again.body) || !bytes.Equal(first.body, twin.body) {
			t.Errorf("%s: answers differ (status %d)", q, first.status)
		}
		if bytes.Equal(first.body, get(t, other, q).body) {
			t.Errorf("%s: seed 8 answers as seed 7", q)
		}
	}
	for _, f := range []func(*Server) []string{
		func(s *Server) []string { return s.CrossHashes("TRADE_ZONE", 5) },
		func(s *Server) []string { return s.TxHashes("CHAINX", head-3) },
		func(s *Server) []string { return s.InternalTxHashes("CHAINX", 5) },
		func(s *Server) []string { return s.TokenContracts("TRADE_ZONE") },
		func(s *Server) []string { return []string{s.UnknownHash(4)} },
	} {
		if fmt.Sprint(f(a)) != fmt.Sprint(f(b)) {
			t.Errorf("hash lists of equal seeds differ: %v %v", f(a), f(b))
		}
	}
}

// TestHeadAdvances moves the injected clock by three intervals. It reads
// a page down from a height: today's reading of height (height-down).
func TestHeadAdvances(t *testing.T) {
	clk := newClock()
	today := MustProfile("today")
	s := start(t, Config{Now: clk.Now, BlockInterval: 2 * time.Second, Profile: &today})
	h0 := s.Head("CHAINX")
	blockAt := func(h int64) map[string]any {
		l := list(t, get(t, s, fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d&limit=1", h)).ok(t), "blockList")
		if len(l) != 1 {
			t.Fatalf("block %d: %d blocks", h, len(l))
		}
		return object(t, l[0])
	}
	newest := list(t, get(t, s, "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=3").ok(t), "blockList")
	for i, want := range []string{"pending", "pending", "done"} {
		if got := field(t, newest[i], "state"); got != want || field(t, newest[i], "height") != fmt.Sprint(h0-int64(i)) {
			t.Errorf("block %d below head: %s at %s, want %s at %d", i, got, field(t, newest[i], "height"), want, h0-int64(i))
		}
	}
	before := blockAt(h0)
	if len(get(t, s, fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d", h0+3)).ok(t)) != 1 {
		t.Fatal("no wrapper for a future height")
	}

	clk.Advance(6 * time.Second)
	if got := s.Head("CHAINX"); got != h0+3 {
		t.Fatalf("head after 3 intervals = %d, want %d", got, h0+3)
	}
	after := blockAt(h0)
	if before["state"] != "pending" || after["state"] != "done" || after["burnt"] == "" {
		t.Errorf("block %d: state %v then %v (burnt %q)", h0, before["state"], after["state"], after["burnt"])
	}
	if before["hash"] != after["hash"] || before["txnCount"] != after["txnCount"] || before["blockTime"] != after["blockTime"] {
		t.Error("a block's content changed when it became done")
	}
	if l := list(t, get(t, s, fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d", h0+3)).ok(t), "blockList"); len(l) != 20 {
		t.Errorf("block %d after it was produced: %d blocks, want 20", h0+3, len(l))
	}
	// Transactions of a pending block include pending ones; once done, none.
	pendingTx := func(h int64) (n int) {
		for _, v := range list(t, get(t, s, fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&limit=100", h)).ok(t), "blockList") {
			if field(t, v, "state") == "pending" {
				n++
			}
		}
		return n
	}
	if pendingTx(h0) != 0 {
		t.Errorf("done block %d lists pending transactions", h0)
	}
	found := false
	for h := h0 + 2; h <= h0+3; h++ {
		found = found || pendingTx(h) > 0
	}
	if !found {
		t.Error("no pending transaction in the two pending blocks")
	}
}

func TestSealOpen(t *testing.T) {
	c := newChain("CHAINX", 1)
	for _, p := range []uint64{0, 1, 12345, 1 << 40, 1<<64 - 1} {
		for _, n := range []int{20, 32} {
			s := sealed(c.key, kindTx, p, n)
			if len(s) != 2+2*n {
				t.Fatalf("sealed length %d", len(s))
			}
			got, ok := open(c.key, kindTx, s, n)
			if !ok || got != p {
				t.Errorf("open(sealed(%d)) = %d, %v", p, got, ok)
			}
			if _, ok := open(c.key, kindCross, s, n); ok {
				t.Errorf("a tx identifier opened as a cross-chain one")
			}
			if _, ok := open(c.key^1, kindTx, s, n); ok {
				t.Errorf("an identifier opened under another chain key")
			}
		}
	}
	for _, x := range []uint64{0, 42, 1<<63 + 5} {
		if unfeistel(9, feistel(9, x)) != x {
			t.Errorf("feistel is not inverted at %d", x)
		}
	}
	h := c.txHash(5_000_000, 17)
	if hh, i, ok := c.openTx(h, 5_000_000); !ok || hh != 5_000_000 || i != 17 {
		t.Errorf("openTx = %d %d %v", hh, i, ok)
	}
	if _, _, ok := c.openTx(h, 4_999_999); ok {
		t.Error("a transaction above head opened")
	}
}

func TestDec(t *testing.T) {
	f := func(v uint64, d int, want string) {
		t.Helper()
		if got := dec(v, d); got != want {
			t.Errorf("dec(%d, %d) = %q, want %q", v, d, got, want)
		}
	}
	f(0, 18, "0")
	f(1500000, 6, "1.5")
	f(1, 18, "0.000000000000000001")
	f(123, 0, "123")
	f(1e18, 18, "1")
	if got := sdec(1, 3, 0); got != "-2" {
		t.Errorf("sdec = %q", got)
	}
}

func TestHolderAmountsOrdered(t *testing.T) {
	c := newChain("TRADE_ZONE", 3)
	for i := range c.tokens {
		tk := &c.tokens[i]
		for _, e := range []int64{-5, 0, 1000} {
			prev := c.holderAmount(tk, 1, e)
			for r := int64(2); r <= 12_000; r++ {
				a := c.holderAmount(tk, r, e)
				if a > prev {
					t.Fatalf("%s epoch %d: rank %d holds %d > rank %d's %d", tk.symbol, e, r, a, r-1, prev)
				}
				prev = a
			}
		}
	}
}
