//go:build !linux

package tcpio

import "net"

// sock, away from Linux, is net.Conn's Read and a writev through
// net.Buffers (conn_linux.go has the raw system calls).
type sock struct {
	iov  [2][]byte
	bufs net.Buffers
}

func (s *sock) init(*net.TCPConn) error { return nil }

// writeAll sends a then b, whole, and returns how many bytes went.
func (s *sock) writeAll(tc *net.TCPConn, a, b []byte) (int, error) {
	s.iov = [2][]byte{a, b}
	s.bufs = s.iov[:]
	n, err := s.bufs.WriteTo(tc)
	s.iov = [2][]byte{}
	return int(n), err
}

func (s *sock) read(tc *net.TCPConn, p []byte) (int, error) { return tc.Read(p) }
