package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"explorer-edge/config"
	"explorer-edge/proxy/server"
	"explorer-edge/sim"
)

// routeLocalV6 routes a /64 of unique local addresses to loopback (a
// "local" route in the local table, as 127.0.0.0/8 is), so that a
// socket with IP_FREEBIND can connect from any of its addresses; the
// route goes at the end of the test. It needs root (CAP_NET_ADMIN) and
// IPv6 on lo: without them the test is skipped.
func routeLocalV6(t *testing.T) string {
	t.Helper()
	prefix := fmt.Sprintf("fd00:e1:%x::", os.Getpid()&0xffff)
	cidr := prefix + "/64"
	out, err := exec.Command("ip", "-6", "route", "add", "local", cidr, "dev", "lo", "table", "local").CombinedOutput()
	if err != nil {
		t.Skipf("cannot route %s to loopback (%v: %s): the injected-address tests cover the grouping", cidr, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "-6", "route", "del", "local", cidr, "dev", "lo", "table", "local").Run() })
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	c, err := dialFrom(addrOf(prefix, 1), ln.Addr().String())
	if err != nil {
		t.Skipf("cannot connect from %s: %v", addrOf(prefix, 1), err)
	}
	c.Close()
	return prefix
}

// dialFrom connects to addr from the local address from.
func dialFrom(from netip.Addr, addr string) (net.Conn, error) {
	d := net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0)),
		Timeout:   10 * time.Second,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) })
			if err != nil {
				return err
			}
			return serr
		},
	}
	return d.Dial("tcp", addr)
}

// serveOnV6Loopback serves h's edge on [::1] behind the public
// listener's guard with cfg.
func serveOnV6Loopback(t *testing.T, h *harness, cfg server.ListenerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.p.NewServer(h.cfg.Server)
	go srv.Serve(h.p.Listener(ln, cfg))
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// The measurement of the issue with real peers: 2,100 addresses of one
// /64, routed to loopback, against server.max_conns_per_ip and
// stream.max_per_ip, with no proxy in between. Each gets one client's
// share.
func TestPerIPCapsRealIPv6Prefix(t *testing.T) {
	prefix := routeLocalV6(t)
	const perIP, clients = 4, 2100
	h := newHarness(t, withStream, func(c *config.Config, _ *sim.Config) { c.Stream.MaxPerIP = perIP })

	t.Run("server.max_conns_per_ip", func(t *testing.T) {
		edge := serveOnV6Loopback(t, h, server.ListenerConfig{Name: "public", MaxConns: 10000, MaxConnsPerIP: perIP, Gather: true})
		const good = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=2"
		admitted := 0
		for i := 1; i <= clients && admitted <= perIP; i++ {
			c, err := dialFrom(addrOf(prefix, i), edge)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET "+good+" HTTP/1.1\r\nHost: edge\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			io.Copy(io.Discard, res.Body)
			switch res.StatusCode {
			case 200:
				admitted++
				t.Cleanup(func() { c.Close() }) // holds its place
			case 429:
				c.Close()
			default:
				t.Fatalf("connection %d: status %d", i, res.StatusCode)
			}
		}
		if admitted != perIP {
			t.Errorf("%d addresses of one /64: %d connections held, want %d", clients, admitted, perIP)
		}
	})

	t.Run("stream.max_per_ip", func(t *testing.T) {
		edge := serveOnV6Loopback(t, h, server.ListenerConfig{Name: "public", MaxConns: 10000, Gather: true})
		opened := 0
		for i := 1; i <= clients && opened <= perIP; i++ {
			c, err := dialFrom(addrOf(prefix, i), edge)
			if err != nil {
				t.Fatal(err)
			}
			if streamOrRefusal(t, c, bufio.NewReader(c), "/edge/v1/events?chains=chainx") == 200 {
				opened++
				t.Cleanup(func() { c.Close() })
			} else {
				c.Close()
			}
		}
		if opened != perIP {
			t.Errorf("%d addresses of one /64: %d streams, want %d", clients, opened, perIP)
		}
	})
}
