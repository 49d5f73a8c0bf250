package server

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/internal/ipgroup"
	"explorer-edge/metrics"
)

type noCacheStats struct{}

func (noCacheStats) Entries() int64       { return 0 }
func (noCacheStats) Bytes() int64         { return 0 }
func (noCacheStats) Evictions() int64     { return 0 }
func (noCacheStats) MaxBytes() int64      { return 0 }
func (noCacheStats) IdentityBytes() int64 { return 0 }

// fakeConn is an accepted connection from a given peer address; writes
// are discarded.
type fakeConn struct {
	net.Conn // nil: only the methods below are called
	peer     *net.TCPAddr
	closed   bool
}

func (c *fakeConn) RemoteAddr() net.Addr              { return c.peer }
func (c *fakeConn) LocalAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv6loopback, Port: 80} }
func (c *fakeConn) Write(b []byte) (int, error)       { return len(b), nil }
func (c *fakeConn) Close() error                      { c.closed = true; return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetDeadline(time.Time) error       { return nil }
func (c *fakeConn) SetReadDeadline(t time.Time) error { return nil }
func (c *fakeConn) Read(b []byte) (int, error)        { return 0, io.EOF }
func (c *fakeConn) String() string                    { return c.peer.String() }

// fakeListener hands out its conns, then reports itself closed.
type fakeListener struct {
	conns []*fakeConn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.conns) == 0 {
		return nil, net.ErrClosed
	}
	c := l.conns[0]
	l.conns = l.conns[1:]
	return c, nil
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv6loopback, Port: 80} }

// peersOf makes n connections from n addresses of the /64 prefix (host
// parts 1..n), and, when mapped, as many from IPv4-mapped addresses of
// one IPv4 address.
func peersOf(prefix string, n int) []*fakeConn {
	base := netip.MustParseAddr(prefix).As16()
	var out []*fakeConn
	for i := 1; i <= n; i++ {
		a := base
		a[12], a[13], a[14], a[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		a[8] = byte(i % 7) // not only the last bits differ
		out = append(out, &fakeConn{peer: net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(a), 40000))})
	}
	return out
}

// acceptAll accepts from ln until it is done and returns what was
// admitted, by peer.
func acceptAll(t *testing.T, ln net.Listener) []net.Conn {
	t.Helper()
	var got []net.Conn
	for {
		c, err := ln.Accept()
		if err != nil {
			return got
		}
		got = append(got, c)
	}
}

// server.max_conns_per_ip counts an IPv6 peer by its group (PeerKey):
// 2,100 addresses of one /64 get the cap of one client, not 2,100 times
// it; another /64 has its own; an IPv4-mapped peer counts as its IPv4.
func TestMaxConnsPerIPGroupsIPv6(t *testing.T) {
	const perIP = 4
	m := metrics.New(nil, nil, noCacheStats{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := ListenerConfig{Name: "public", MaxConns: 10000, MaxConnsPerIP: perIP}

	one := peersOf("2001:db8:aaaa:1::", 2100)
	other := peersOf("2001:db8:aaaa:2::", 10)
	v4 := []*fakeConn{
		{peer: &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}},
		{peer: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.9"), Port: 2}},
	}
	for range perIP {
		v4 = append(v4, &fakeConn{peer: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.9"), Port: 3}})
	}
	all := append(append(append([]*fakeConn{}, one...), other...), v4...)
	ln := Guard(&fakeListener{conns: all}, cfg, m, log, nil) // nil: the default /64
	got := acceptAll(t, ln)
	count := map[netip.Addr]int{}
	for _, c := range got {
		count[ipgroup.Key(peerAddr(c), 64)]++
	}
	if n := count[netip.MustParseAddr("2001:db8:aaaa:1::")]; n != perIP {
		t.Errorf("2,100 addresses of one /64: %d connections admitted, want %d (the cap of one client)", n, perIP)
	}
	if n := count[netip.MustParseAddr("2001:db8:aaaa:2::")]; n != perIP {
		t.Errorf("another /64: %d admitted, want %d", n, perIP)
	}
	if n := count[netip.MustParseAddr("192.0.2.9")]; n != perIP {
		t.Errorf("192.0.2.9, plain and IPv4-mapped: %d admitted, want %d", n, perIP)
	}
	refused := 0
	for _, c := range all {
		if c.closed {
			refused++
		}
	}
	if want := len(all) - 3*perIP; refused != want {
		t.Errorf("%d connections refused and closed, want %d", refused, want)
	}
	if n := testutil.ToFloat64(m.ConnsRefused.WithLabelValues("public", "max_conns_per_ip")); n != float64(len(all)-3*perIP) {
		t.Errorf("connections_refused_total{max_conns_per_ip} = %v, want %d", n, len(all)-3*perIP)
	}

	// A closed connection gives its place back to its group: one more
	// address of the /64 is admitted, and only one.
	got[0].Close()
	ln = guardAgain(ln, peersOf("2001:db8:aaaa:1::", 3))
	if n := len(acceptAll(t, ln)); n != 1 {
		t.Errorf("after one connection of the /64 closed: %d admitted, want 1", n)
	}

	// The key is PeerKey's: per address (a prefix of 128), each of the
	// 2,100 addresses is a client of its own.
	per128 := func(ip netip.Addr) (netip.Addr, bool) { return ipgroup.Key(ip, 128), true }
	ln2 := Guard(&fakeListener{conns: peersOf("2001:db8:bbbb:1::", 2100)}, cfg, metrics.New(nil, nil, noCacheStats{}), log, per128)
	if n := len(acceptAll(t, ln2)); n != 2100 {
		t.Errorf("with a prefix of 128: %d of 2,100 addresses admitted", n)
	}
	// And a peer PeerKey does not count (a trusted proxy) is not capped.
	exempt := func(netip.Addr) (netip.Addr, bool) { return netip.Addr{}, false }
	ln3 := Guard(&fakeListener{conns: peersOf("2001:db8:cccc:1::", 50)}, cfg, metrics.New(nil, nil, noCacheStats{}), log, exempt)
	if n := len(acceptAll(t, ln3)); n != 50 {
		t.Errorf("an exempt peer: %d of 50 connections admitted", n)
	}
}

// guardAgain gives ln, a guarded fakeListener, more connections to hand
// out.
func guardAgain(ln net.Listener, more []*fakeConn) net.Listener {
	g := ln.(*guardedListener)
	g.Listener.(*fakeListener).conns = more
	return g
}
