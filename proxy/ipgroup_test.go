package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// Every per-address limit groups IPv6 clients by auth.ip_v6_prefix
// (internal/ipgroup): the tests here are the measurement, 2,100
// addresses of one /64 against the caps, with the addresses injected
// (X-Forwarded-For from a trusted proxy); ipgroup_linux_test.go binds
// them for real where the machine allows.

// addrOf is the i-th address (from 1) of the /64 of prefix, spread over
// the whole interface identifier.
func addrOf(prefix string, i int) netip.Addr {
	a := netip.MustParseAddr(prefix).As16()
	a[8], a[11] = byte(i*37), byte(i%5)
	a[12], a[13], a[14], a[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return netip.AddrFrom16(a)
}

// streamOrRefusal sends a stream request on c and reads the answer's
// head: a refusal's body is read (the connection can ask again), a
// stream's is left (the connection is the stream's now).
func streamOrRefusal(t *testing.T, c net.Conn, br *bufio.Reader, target string, headers ...string) int {
	t.Helper()
	req := "GET " + target + " HTTP/1.1\r\nHost: edge\r\nAccept: text/event-stream\r\n"
	for i := 0; i+1 < len(headers); i += 2 {
		req += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stream request: %v", err)
	}
	if res.StatusCode != 200 {
		io.Copy(io.Discard, res.Body)
	}
	c.SetReadDeadline(time.Time{})
	return res.StatusCode
}

// openStreams asks a stream for each client address of addrs through a
// trusted proxy (X-Forwarded-For), refusals on one connection, each
// stream on its own, and returns how many streams were opened. It stops
// once more than limit were: the cap is broken already.
func openStreamsFrom(t *testing.T, edge string, addrs []netip.Addr, limit int) (opened int) {
	t.Helper()
	var c net.Conn
	var br *bufio.Reader
	for i, a := range addrs {
		if c == nil {
			c = dialEdge(t, edge)
			br = bufio.NewReader(c)
		}
		switch status := streamOrRefusal(t, c, br, "/edge/v1/events?chains=chainx", "X-Forwarded-For", a.String()); status {
		case 200:
			opened++
			c = nil // held by its stream until the test ends
			if opened > limit {
				t.Logf("stopped after %d requests: %d streams open", i+1, opened)
				return opened
			}
		case 429:
		default:
			t.Fatalf("stream %d from %s: status %d", i, a, status)
		}
	}
	return opened
}

// stream.max_per_ip counts an IPv6 client by its group: 2,100 addresses
// of one /64 open the cap of one client (the measurement was 2,007 of a
// node's 2,048), another /64 has a cap of its own, and IPv4-mapped
// addresses count as their IPv4.
func TestStreamMaxPerIPGroupsIPv6(t *testing.T) {
	const perIP = 4
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) {
		c.Stream.MaxPerIP = perIP
		c.Auth.TrustedProxies = []string{"127.0.0.1"}
	})
	var one []netip.Addr
	for i := 1; i <= 2100; i++ {
		one = append(one, addrOf("2001:db8:77:1::", i))
	}
	if n := openStreamsFrom(t, h.addr, one, perIP); n != perIP {
		t.Errorf("2,100 addresses of one /64 opened %d streams, want %d (one client's share)", n, perIP)
	}
	var other []netip.Addr
	for i := 1; i <= perIP+2; i++ {
		other = append(other, addrOf("2001:db8:77:2::", i))
	}
	if n := openStreamsFrom(t, h.addr, other, perIP); n != perIP {
		t.Errorf("another /64 opened %d streams, want %d", n, perIP)
	}
	v4 := []netip.Addr{netip.MustParseAddr("203.0.113.5")}
	for range perIP {
		v4 = append(v4, netip.MustParseAddr("::ffff:203.0.113.5"))
	}
	if n := openStreamsFrom(t, h.addr, v4, perIP); n != perIP {
		t.Errorf("203.0.113.5, plain and IPv4-mapped, opened %d streams, want %d", n, perIP)
	}
}

// auth.ip_v6_prefix sets the group of the stream's cap as it does the
// rate's: with 128, each address of a /64 is a client of its own.
func TestStreamMaxPerIPFollowsPrefix(t *testing.T) {
	const perIP = 2
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) {
		c.Stream.MaxPerIP = perIP
		c.Auth.TrustedProxies = []string{"127.0.0.1"}
		c.Auth.IPv6Prefix = 128
	})
	var addrs []netip.Addr
	for i := 1; i <= 3; i++ {
		a := addrOf("2001:db8:78:1::", i)
		addrs = append(addrs, a, a, a) // 3 asks per address: the cap is 2
	}
	if n := openStreamsFrom(t, h.addr, addrs, 3*perIP); n != 3*perIP {
		t.Errorf("3 addresses of one /64 with ip_v6_prefix 128: %d streams, want %d", n, 3*perIP)
	}
}
