package admission

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// addrN is the n-th of many distinct IPv6 addresses, each in its own /64.
func addrN(n int) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0x20, 0x01
	binary.BigEndian.PutUint64(b[:8], 0x2001_0db8_0000_0000|uint64(n))
	b[15] = 1
	return netip.AddrFrom16(b)
}

// TestIPLimiterBounded fills the per-IP limiter with far more addresses
// than it may hold: it keeps at most its capacity, and a call examines at
// most one set of slots however many addresses it has seen (the old map
// swept all 100,000 on every new address).
func TestIPLimiterBounded(t *testing.T) {
	const maxTracked, seen = 100_000, 250_000
	l := newIPLimiters(maxTracked)
	if c := l.capacity(); c < maxTracked || c >= maxTracked+ipWays {
		t.Fatalf("capacity %d for ip_max_tracked %d", c, maxTracked)
	}
	now := time.Unix(1_800_000_000, 0)
	// Slots examined per call over the first 1,000 addresses and over the
	// last 1,000, when the table has long been full.
	var perCall []float64
	var mark int64
	for i := range seen {
		if i == seen-1_000 {
			_, mark = l.stats()
		}
		if ok, _ := l.allow(ipKey(addrN(i), 64), 1, 2, now); !ok {
			t.Fatalf("address %d refused on its first request", i)
		}
		if i == 999 || i == seen-1 {
			_, scanned := l.stats()
			perCall = append(perCall, float64(scanned-mark)/1_000)
		}
	}
	t.Logf("slots examined per call: %.2f over the first 1,000 addresses, %.2f over the last 1,000", perCall[0], perCall[1])
	for _, n := range perCall {
		if n > ipWays {
			t.Fatalf("%.2f slots examined per call, want at most %d whatever the number of addresses", n, ipWays)
		}
	}
	tracked, scanned := l.stats()
	t.Logf("%d addresses seen, %d tracked (capacity %d), %d slots examined", seen, tracked, l.capacity(), scanned)
	if tracked > int64(l.capacity()) || tracked < maxTracked/2 {
		t.Fatalf("tracked %d addresses, want at most the capacity %d (and most of it used)", tracked, l.capacity())
	}
	if scanned > seen*ipWays {
		t.Fatalf("%d slots examined for %d calls", scanned, seen)
	}
	// The table is full of spent buckets; a known client is still limited.
	x := ipKey(addrN(seen-1), 64)
	if ok, _ := l.allow(x, 1, 2, now); !ok {
		t.Fatal("second request of a burst of 2 refused")
	}
	if ok, wait := l.allow(x, 1, 2, now); ok || wait <= 0 || wait > time.Second {
		t.Fatalf("third request at once: ok %v, wait %v; want refused for up to 1s", ok, wait)
	}
}

// TestIPLimiterGCRA: burst requests at once, then one per 1/rate.
func TestIPLimiterGCRA(t *testing.T) {
	l := newIPLimiters(64)
	k := ipKey(netip.MustParseAddr("203.0.113.9"), 64)
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 {
		if ok, _ := l.allow(k, 2, 3, now); !ok {
			t.Fatalf("request %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := l.allow(k, 2, 3, now)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th at once: ok %v wait %v, want refused for 500ms", ok, wait)
	}
	if ok, _ := l.allow(k, 2, 3, now.Add(wait)); !ok {
		t.Fatal("refused after the wait it was given")
	}
	if ok, _ := l.allow(k, 2, 3, now.Add(wait)); ok {
		t.Fatal("two allowed after one interval")
	}
	other := ipKey(netip.MustParseAddr("203.0.113.10"), 64)
	if ok, _ := l.allow(other, 2, 3, now); !ok {
		t.Fatal("another address shares the bucket")
	}
}

// TestIPv6PrefixSharesBucket: two addresses of one /64 are one client under
// the default ip_v6_prefix; with 128 they are two. IPv4 and IPv4-mapped
// IPv6 are the same client.
func TestIPv6PrefixSharesBucket(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1:2::1")
	b := netip.MustParseAddr("2001:db8:1:2:ffff:ffff:ffff:fffe")
	c := netip.MustParseAddr("2001:db8:1:3::1")
	if ipKey(a, 64) != ipKey(b, 64) || ipKey(a, 64) == ipKey(c, 64) {
		t.Fatal("keys by /64 wrong")
	}
	if ipKey(a, 128) == ipKey(b, 128) {
		t.Fatal("ip_v6_prefix 128 merged two addresses")
	}
	if ipKey(netip.MustParseAddr("::ffff:198.51.100.1"), 64) != ipKey(netip.MustParseAddr("198.51.100.1"), 64) {
		t.Fatal("IPv4-mapped IPv6 is another client than IPv4")
	}

	for _, tc := range []struct {
		bits    int
		allowed int
	}{{64, 1}, {128, 2}} {
		cfg := config.Default().Auth
		cfg.IPRate, cfg.IPBurst, cfg.IPv6Prefix = 0.001, 1, tc.bits
		adm, err := New(cfg, metrics.New(route.Names(), nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		allowed := 0
		for _, ip := range []netip.Addr{a, b} {
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: ip.AsSlice()}, nil)
			if _, err := adm.Admit(&ctx, time.Unix(1_800_000_000, 0)); err == nil {
				allowed++
			}
		}
		if allowed != tc.allowed {
			t.Errorf("ip_v6_prefix %d: %d of two addresses in one /64 allowed with burst 1, want %d", tc.bits, allowed, tc.allowed)
		}
	}
}

// BenchmarkIPLimiter: the cost of a call with 1,000 and with 100,000
// addresses tracked, for a known address and for a new one (which takes
// a slot from another). Before the fixed table, a new address at 100,000
// swept the whole map: 920 us per call against 224 ns at 1,000.
func BenchmarkIPLimiter(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{1_000, 100_000} {
		l := newIPLimiters(100_000)
		for i := range n {
			l.allow(ipKey(addrN(i), 64), 10, 10, now)
		}
		b.Run(fmt.Sprintf("tracked=%d/known", n), func(b *testing.B) {
			b.ReportAllocs()
			k := ipKey(addrN(7), 64)
			for b.Loop() {
				l.allow(k, 10, 10, now)
			}
		})
		b.Run(fmt.Sprintf("tracked=%d/new", n), func(b *testing.B) {
			b.ReportAllocs()
			i := n
			for b.Loop() {
				i++
				l.allow(ipKey(addrN(i), 64), 10, 10, now)
			}
		})
	}
}

// TestIPLimiterEvictsFullestBucket: in a full table a new address takes the
// slot of the address nearest to a full bucket, never that of a client
// that has spent its burst, so a run of new addresses does not give a
// limited client its burst back.
func TestIPLimiterEvictsFullestBucket(t *testing.T) {
	l := newIPLimiters(ipWays) // one set: every address competes for it
	now := time.Unix(1_800_000_000, 0)
	spent := ipKey(netip.MustParseAddr("198.51.100.1"), 64)
	for range 3 {
		l.allow(spent, 1, 3, now)
	}
	if ok, _ := l.allow(spent, 1, 3, now); ok {
		t.Fatal("burst of 3 allowed a 4th")
	}
	for i := range 10 * ipWays {
		l.allow(ipKey(addrN(i), 64), 1, 3, now)
	}
	if tracked, _ := l.stats(); tracked != ipWays {
		t.Fatalf("%d tracked in a table of %d", tracked, ipWays)
	}
	if ok, _ := l.allow(spent, 1, 3, now); ok {
		t.Fatal("new addresses evicted a spent bucket: its burst is back")
	}
}

// TestIPLimiterExtremeRates: rates and bursts at the ends of their ranges
// do not overflow the times. A bucket deeper than 1e18 ns (31 years) of
// the rate is cut there.
func TestIPLimiterExtremeRates(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		rate        float64
		burst       int
		least, most int // allowed of 50 at once
	}{{1e-15, 1, 1, 1}, {1e-15, 1 << 40, 1, 1}, {1e12, 1, 1, 1}, {1e12, 1 << 62, 50, 50}, {0.5, 1 << 62, 50, 50}} {
		l := newIPLimiters(8)
		k := ipKey(netip.MustParseAddr("203.0.113.1"), 64)
		allowed := 0
		for range 50 {
			if ok, wait := l.allow(k, c.rate, c.burst, now); ok {
				allowed++
			} else if wait <= 0 {
				t.Fatalf("rate %v burst %d: refused with wait %v", c.rate, c.burst, wait)
			}
		}
		if allowed < c.least || allowed > c.most {
			t.Errorf("rate %v burst %d: %d of 50 at once allowed, want %d..%d", c.rate, c.burst, allowed, c.least, c.most)
		}
	}
}
