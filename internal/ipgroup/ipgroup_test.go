package ipgroup

import (
	"net/netip"
	"testing"
)

func TestKey(t *testing.T) {
	for _, c := range []struct {
		in   string
		bits int
		want string
	}{
		{"192.0.2.7", 64, "192.0.2.7"},
		{"::ffff:192.0.2.7", 64, "192.0.2.7"}, // an IPv4-mapped address is its IPv4
		{"::ffff:192.0.2.7", 128, "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2::1", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff::1", 48, "2001:db8:1::"},
		{"2001:db8:1:2::1", 128, "2001:db8:1:2::1"},
		{"2001:db8:1:2::1", 0, "2001:db8:1:2::"}, // out of range: the default /64
		{"fe80::1:2:3:4%eth0", 128, "fe80::1:2:3:4"},
		{"fe80::1:2:3:4%eth0", 64, "fe80::"},
	} {
		if got := Key(netip.MustParseAddr(c.in), c.bits); got != netip.MustParseAddr(c.want) {
			t.Errorf("Key(%s, %d) = %s, want %s", c.in, c.bits, got, c.want)
		}
	}
	if got := Key(netip.Addr{}, 64); got.IsValid() {
		t.Errorf("Key(zero Addr) = %s, want the zero Addr", got)
	}
	// IPv4 and IPv6 never share a key: ::/64 holds no IPv4 address.
	if Key(netip.MustParseAddr("::1"), 64) == Key(netip.MustParseAddr("0.0.0.1"), 64) {
		t.Error("an IPv6 group and an IPv4 address share a key")
	}
}

func TestKeyAllocatesNothing(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1:2::1")
	if n := testing.AllocsPerRun(100, func() { Key(a, 64) }); n != 0 {
		t.Errorf("Key allocates %v times", n)
	}
}
