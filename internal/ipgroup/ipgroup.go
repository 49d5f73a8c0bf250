// Package ipgroup says which clients one per-address limit counts
// together. Every such limit of the edge (auth.ip_rate, stream.max_per_ip,
// server.max_conns_per_ip) keys on Key, so that they agree on who one
// client is: one subscriber commonly holds a whole IPv6 /64, and a cap
// that counted whole IPv6 addresses would give it as many shares as it
// has addresses (2,100 addresses of one /64 once opened 2,007 of a node's
// 2,048 streams).
package ipgroup

import "net/netip"

// DefaultV6Bits is the IPv6 prefix a limit groups by when none is
// configured (auth.ip_v6_prefix's default).
const DefaultV6Bits = 64

// Key is the address a per-address limit counts a of: an IPv4 address
// (IPv4-mapped IPv6 included, as its IPv4) alone, an IPv6 address by its
// first v6Bits bits (the rest zero, without a zone). v6Bits outside
// 1..128 is DefaultV6Bits. The zero Addr stays the zero Addr. It does not
// allocate.
func Key(a netip.Addr, v6Bits int) netip.Addr {
	a = a.Unmap()
	if !a.Is6() {
		return a
	}
	if v6Bits < 1 || v6Bits > 128 {
		v6Bits = DefaultV6Bits
	}
	p, err := a.WithZone("").Prefix(v6Bits)
	if err != nil {
		return a.WithZone("")
	}
	return p.Addr()
}
