//go:build linux

// Command epoll is a second reference point of bench/compare (EPOLL=1): an
// HTTP/1.1 keep-alive server written directly on epoll, one OS thread,
// level-triggered, no goroutine per connection, no Go netpoller, no
// deadlines, answering every request with one fixed body. It asks whether
// Go's I/O path (goroutines, the netpoller's extra read that returns
// EAGAIN, runtime timers) is what keeps a Go server below nginx here: if
// it were, this server would beat bench/bare. It is a measuring tool, not
// a server: it parses nothing but the blank line that ends a request.
//
//	go run ./bench/epoll -listen 127.0.0.1:8092 -body answer.json
package main

import (
	"bytes"
	"flag"
	"log"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

type conn struct {
	in, out []byte
	waiting bool // registered for EPOLLOUT: out did not fit the socket
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8092", "address to listen on (IPv4)")
	bodyFile := flag.String("body", "", "file whose bytes every answer carries")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatal(err)
	}
	addr, err := netip.ParseAddrPort(*listen)
	if err != nil || !addr.Addr().Is4() {
		log.Fatalf("-listen %q: want an IPv4 host:port", *listen)
	}
	lfd := must(syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0))
	check(syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1))
	check(syscall.Bind(lfd, &syscall.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}))
	check(syscall.Listen(lfd, 4096))
	ep := must(syscall.EpollCreate1(syscall.EPOLL_CLOEXEC))
	check(syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}))

	head := func(now time.Time) []byte {
		return []byte("HTTP/1.1 200 OK\r\nServer: epoll\r\nDate: " + now.UTC().Format(time.RFC1123[:len(time.RFC1123)-3]) +
			"GMT\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	}
	second := time.Now().Unix()
	answer := append(head(time.Now()), body...)
	conns := map[int32]*conn{}
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 16<<10)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		check(err)
		if now := time.Now(); now.Unix() != second {
			second, answer = now.Unix(), append(head(now), body...)
		}
		for _, ev := range events[:n] {
			fd := ev.Fd
			if int(fd) == lfd {
				for {
					nfd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					syscall.SetsockoptInt(nfd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
					conns[int32(nfd)] = &conn{}
					check(syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, nfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(nfd)}))
				}
				continue
			}
			c := conns[fd]
			if ev.Events&syscall.EPOLLOUT != 0 && !flush(ep, fd, c) {
				closeConn(conns, fd)
				continue
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLHUP|syscall.EPOLLERR) == 0 {
				continue
			}
			// Level-triggered: one read per event; what is left is reported
			// again. No read is made only to learn that nothing is there.
			m, err := syscall.Read(int(fd), buf)
			if err == syscall.EAGAIN {
				continue
			}
			if m <= 0 {
				closeConn(conns, fd)
				continue
			}
			c.in = append(c.in, buf[:m]...)
			for {
				end := bytes.Index(c.in, []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				c.in = c.in[end+4:]
				c.out = append(c.out, answer...)
			}
			if len(c.in) == 0 {
				c.in = c.in[:0:0]
			}
			if !flush(ep, fd, c) {
				closeConn(conns, fd)
			}
		}
	}
}

// flush writes what c has to send; the rest waits for EPOLLOUT.
func flush(ep int, fd int32, c *conn) bool {
	for len(c.out) > 0 {
		w, err := syscall.Write(int(fd), c.out)
		if err == syscall.EAGAIN {
			return c.wait(ep, fd, true)
		}
		if err != nil {
			return false
		}
		c.out = c.out[w:]
	}
	c.out = c.out[:0]
	return c.wait(ep, fd, false)
}

// wait registers fd for EPOLLOUT or stops, when that changes.
func (c *conn) wait(ep int, fd int32, out bool) bool {
	if c.waiting == out {
		return true
	}
	c.waiting = out
	events := uint32(syscall.EPOLLIN)
	if out {
		events |= syscall.EPOLLOUT
	}
	return syscall.EpollCtl(ep, syscall.EPOLL_CTL_MOD, int(fd), &syscall.EpollEvent{Events: events, Fd: fd}) == nil
}

func closeConn(conns map[int32]*conn, fd int32) {
	syscall.Close(int(fd))
	delete(conns, fd)
}

func must(fd int, err error) int {
	check(err)
	return fd
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
