package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/ipgroup"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/tcpio"
)

// ListenerConfig is what Listener guards a listener with.
type ListenerConfig struct {
	Name          string // "public" or "admin": the listener label of metrics and logs
	MaxConns      int    // connections open at once; beyond it a new one is refused; 0 = no cap
	MaxConnsPerIP int    // connections open at once from one peer (its PeerKey); 0 = no cap
	Gather        bool   // hand out tcpio.Conns (the public listener, unless server.plain_conns)
	// HealthReserve is how many connections are taken beyond MaxConns, each
	// to ask /healthz or /readyz once (healthOnly), so that connections
	// held idle up to the cap do not fail the probes; 0 = none.
	HealthReserve int
	// HealthHold is how long a connection of the health reserve lives
	// after its accept; 0 = HealthHold (2 s).
	HealthHold time.Duration
}

// PublicListener is the public listener's guard: server.max_conns and
// server.max_conns_per_ip.
func PublicListener(cfg config.Server) ListenerConfig {
	return ListenerConfig{Name: "public", MaxConns: cfg.MaxConns, MaxConnsPerIP: cfg.MaxConnsPerIP, Gather: !cfg.PlainConns}
}

// AdminListener is the admin listener's guard: admin_max_conns, and
// HealthReserve places above it for /healthz and /readyz.
func AdminListener(cfg config.Config) ListenerConfig {
	return ListenerConfig{Name: "admin", MaxConns: cfg.AdminMaxConns, HealthReserve: HealthReserve}
}

// HealthReserve is how many connections the admin listener takes beyond
// admin_max_conns for the probes (ListenerConfig.HealthReserve).
const HealthReserve = 4

// concurrencySlack is how far above a listener's cap its fasthttp server's
// Concurrency is set (see NewServer).
const concurrencySlack = 64

// HealthHold is how long a connection of the health reserve lives after
// its accept, asked or not (ListenerConfig.HealthHold).
const HealthHold = 2 * time.Second

// Tuning of the guard (not configuration: nothing an operator should need
// to change).
const (
	acceptBackoffMin = 5 * time.Millisecond // first wait after a failed accept; doubles
	acceptBackoffMax = time.Second          // as net/http's Server waits
	logInterval      = 10 * time.Second     // at most one warning per listener and kind
	refuseTimeout    = 100 * time.Millisecond
)

// PeerKey says what server.max_conns_per_ip counts a connection from peer
// under: its group (ipgroup.Key with auth.ip_v6_prefix, the key of every
// per-address limit), or nothing (counted false: a trusted proxy). It is
// asked at each accept, so a reload applies to new connections; a
// connection gives its place back under the key it took it with.
type PeerKey func(peer netip.Addr) (key netip.Addr, counted bool)

// Guard wraps ln for a fasthttp server so that neither a flood of
// connections nor running out of descriptors stops it:
//
//   - Accept never returns a temporary error. fasthttp's Serve returns on
//     any error that is not a timeout, and the edge exited with it: EMFILE
//     under a flood of idle connections was enough. Here accept waits (5 ms,
//     doubling to 1 s) and tries again; each failure is counted
//     (accept_errors_total) and logged at most once per 10 s.
//   - Beyond MaxConns open connections, or MaxConnsPerIP from one peer
//     (one key of PeerKey: an IPv6 peer by its prefix; peers in
//     auth.trusted_proxies excepted, a load balancer's connections all
//     come from it), a new connection gets an envelope of
//     the error table (503/50001 or 429/50011, Connection: close) and is
//     closed at once: it costs a descriptor for microseconds, where
//     fasthttp's own caps answer in plain text and its MaxConnsPerIP does
//     not see IPv6. Counted in connections_refused_total.
//   - Beyond MaxConns, HealthReserve more connections are taken, for the
//     probes: each may ask /healthz or /readyz once (healthOnly) and is
//     closed within 2 s of its accept, asked or not, so that idle
//     connections up to the cap do not make a probe fail (and a liveness
//     probe restart a healthy edge), and idle ones do not hold the
//     reserve either. They count in connections_open.
//
// A connection gives back its place when it is closed, after its
// descriptor is. Serve the listener from one fasthttp server.
//
// key says what MaxConnsPerIP counts a peer under; nil: ipgroup.Key with
// the default prefix, every peer counted.
func Guard(ln net.Listener, cfg ListenerConfig, m *metrics.Metrics, log *slog.Logger, key PeerKey) net.Listener {
	if key == nil {
		key = func(ip netip.Addr) (netip.Addr, bool) { return ipgroup.Key(ip, ipgroup.DefaultV6Bits), true }
	}
	l := &guardedListener{
		Listener:     ln,
		cfg:          cfg,
		log:          log.With("listener", cfg.Name),
		closed:       make(chan struct{}),
		hold:         cmp.Or(cfg.HealthHold, HealthHold),
		perIP:        map[netip.Addr]int{},
		key:          key,
		acceptErrors: m.AcceptErrors.WithLabelValues(cfg.Name),
		refusedMax:   m.ConnsRefused.WithLabelValues(cfg.Name, "max_conns"),
		refusedIP:    m.ConnsRefused.WithLabelValues(cfg.Name, "max_conns_per_ip"),
		open:         m.ConnsOpen.WithLabelValues(cfg.Name),
		answerMax: refusalAnswer(&envelope.Error{Status: 503, Code: "50001", RetryAfter: 1,
			Msg: "Service temporarily unavailable: " + strconv.Itoa(cfg.MaxConns) + " connections open, the most this port takes"}),
		answerIP: refusalAnswer(&envelope.Error{Status: 429, Code: "50011", RetryAfter: 1,
			Msg: "Too many connections from your address: at most " + strconv.Itoa(cfg.MaxConnsPerIP) + " at once"}),
	}
	m.ConnsMax.WithLabelValues(cfg.Name).Set(float64(cfg.MaxConns))
	return l
}

type guardedListener struct {
	net.Listener
	cfg       ListenerConfig
	log       *slog.Logger
	closed    chan struct{} // closed by Close: a waiting Accept stops waiting
	closeOnce sync.Once
	key       PeerKey       // what MaxConnsPerIP counts a peer under
	hold      time.Duration // how long a connection of the health reserve lives

	acceptErrors, refusedMax, refusedIP prometheus.Counter
	open                                prometheus.Gauge
	answerMax, answerIP                 []byte // the refusals, whole HTTP answers

	n     atomic.Int64 // connections open, but for the health reserve's
	spare atomic.Int64 // connections open in the health reserve
	mu    sync.Mutex   // guards perIP
	perIP map[netip.Addr]int

	// Accept's own: fasthttp calls it from one goroutine.
	backoff   time.Duration
	errLog    logEvery
	refuseLog logEvery
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !retryableAccept(err) {
				return nil, err
			}
			l.acceptFailed(err)
			continue
		}
		l.backoff = 0
		ip := peerAddr(c)
		counted, health, answer := l.admit(ip)
		if answer != nil {
			l.refuse(c, answer)
			continue
		}
		if health {
			return newHealthConn(c, l), nil
		}
		return l.wrap(c, counted), nil
	}
}

func (l *guardedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// retryableAccept tells an accept error that passes (descriptors or
// buffers short for now, a connection reset before it was accepted) from a
// listener that is closed or broken.
func retryableAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EPROTO,
		syscall.EPERM, // Linux: a firewall rule refused the connection
		syscall.EINTR, syscall.EAGAIN:
		return true
	}
	return false
}

// acceptFailed counts and (sampled) logs a retryable accept error, then
// waits before the next try, or less if the listener is closed meanwhile.
func (l *guardedListener) acceptFailed(err error) {
	l.acceptErrors.Inc()
	l.backoff = min(max(2*l.backoff, acceptBackoffMin), acceptBackoffMax)
	if suppressed, ok := l.errLog.allow(time.Now()); ok {
		l.log.Warn("accept failing; retrying", "err", err.Error(), "retry_in", l.backoff.String(),
			"suppressed", suppressed, "open", l.n.Load())
	}
	t := time.NewTimer(l.backoff)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.closed:
	}
}

// admit takes a place for a new connection from ip, or returns the answer
// that refuses it. counted is ip's key if the connection counts toward
// its cap, else the zero Addr; health is a place of the health reserve.
func (l *guardedListener) admit(ip netip.Addr) (counted netip.Addr, health bool, refuse []byte) {
	if n := l.n.Add(1); l.cfg.MaxConns > 0 && n > int64(l.cfg.MaxConns) {
		l.n.Add(-1)
		if l.spare.Add(1) <= int64(l.cfg.HealthReserve) {
			l.open.Inc()
			return netip.Addr{}, true, nil
		}
		l.spare.Add(-1)
		l.refusedMax.Inc()
		return netip.Addr{}, false, l.answerMax
	}
	if l.cfg.MaxConnsPerIP > 0 && ip.IsValid() {
		if key, ok := l.key(ip); ok {
			l.mu.Lock()
			k := l.perIP[key]
			if k >= l.cfg.MaxConnsPerIP {
				l.mu.Unlock()
				l.n.Add(-1)
				l.refusedIP.Inc()
				return netip.Addr{}, false, l.answerIP
			}
			l.perIP[key] = k + 1
			l.mu.Unlock()
			counted = key
		}
	}
	l.open.Inc()
	return counted, false, nil
}

// release gives back a connection's place; its descriptor is closed.
func (l *guardedListener) release(ip netip.Addr) {
	l.n.Add(-1)
	l.open.Dec()
	if !ip.IsValid() {
		return
	}
	l.mu.Lock()
	if k := l.perIP[ip]; k > 1 {
		l.perIP[ip] = k - 1
	} else {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
}

// refuse writes answer on a connection just accepted and closes it. A new
// socket's send buffer is empty, so the write does not wait; the deadline
// only bounds a pathological case.
func (l *guardedListener) refuse(c net.Conn, answer []byte) {
	c.SetWriteDeadline(time.Now().Add(refuseTimeout))
	c.Write(answer)
	c.Close()
	if suppressed, ok := l.refuseLog.allow(time.Now()); ok {
		l.log.Warn("connections refused at a cap", "refused", suppressed+1, "open", l.n.Load(),
			"max_conns", l.cfg.MaxConns, "max_conns_per_ip", l.cfg.MaxConnsPerIP)
	}
}

// wrap makes c give back its place when closed: a tcpio.Conn on the public
// listener, a countedConn elsewhere.
func (l *guardedListener) wrap(c net.Conn, counted netip.Addr) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return &countedAny{Conn: c, slot: slot{l: l, ip: counted}}
	}
	if l.cfg.Gather {
		s := &slot{l: l, ip: counted}
		if g, err := tcpio.New(tc, s.release); err == nil {
			return g
		}
	}
	return &countedConn{TCPConn: tc, slot: slot{l: l, ip: counted}}
}

func peerAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// slot is a connection's place in its listener's counts (zero: none),
// given back once, at the first Close.
type slot struct {
	l      *guardedListener
	ip     netip.Addr // counted toward this address's cap, if valid
	health bool       // a place of the health reserve
	done   atomic.Bool
}

func (s *slot) release() {
	if s.l == nil || !s.done.CompareAndSwap(false, true) {
		return
	}
	if s.health {
		s.l.spare.Add(-1)
		s.l.open.Dec()
		return
	}
	s.l.release(s.ip)
}

// healthConn is a connection taken in its listener's health reserve: the
// admin handler answers it /healthz or /readyz only, then closes it
// (healthOnly), and no deadline the server sets lets a read or a write
// outlast until.
type healthConn struct {
	net.Conn
	slot  slot
	until time.Time
}

func newHealthConn(c net.Conn, l *guardedListener) *healthConn {
	h := &healthConn{Conn: c, slot: slot{l: l, health: true}, until: time.Now().Add(l.hold)}
	c.SetDeadline(h.until)
	return h
}

func (c *healthConn) Close() error {
	err := c.Conn.Close()
	c.slot.release()
	return err
}

func (c *healthConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.bound(t)) }
func (c *healthConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.bound(t)) }
func (c *healthConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.bound(t)) }

func (c *healthConn) bound(t time.Time) time.Time {
	if t.IsZero() || t.After(c.until) {
		return c.until
	}
	return t
}

// HealthOnly reports whether c is a connection of a listener's health
// reserve, which may ask /healthz and /readyz only.
func HealthOnly(c net.Conn) bool {
	_, ok := c.(*healthConn)
	return ok
}

// countedConn keeps *net.TCPConn's methods (fasthttp sets keep-alive
// through them) and gives back its slot when closed.
type countedConn struct {
	*net.TCPConn
	slot slot
}

func (c *countedConn) Close() error {
	err := c.TCPConn.Close()
	c.slot.release()
	return err
}

type countedAny struct {
	net.Conn
	slot slot
}

func (c *countedAny) Close() error {
	err := c.Conn.Close()
	c.slot.release()
	return err
}

// refusalAnswer is a whole HTTP/1.1 answer carrying e's envelope, for a
// connection refused before fasthttp sees it.
func refusalAnswer(e *envelope.Error) []byte {
	body := envelope.Append(nil, e.Code, e.Msg)
	b := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\n",
		e.Status, fasthttp.StatusMessage(e.Status))
	if e.RetryAfter > 0 {
		b = fmt.Appendf(b, "Retry-After: %d\r\n", e.RetryAfter)
	}
	b = fmt.Appendf(b, "Content-Length: %d\r\n\r\n", len(body))
	return append(b, body...)
}

// logEvery lets one line through per logInterval and counts the others.
type logEvery struct {
	last  time.Time
	quiet int
}

// allow reports whether a line may be written now and, if so, how many
// were held back since the last one.
func (e *logEvery) allow(now time.Time) (suppressed int, ok bool) {
	if !e.last.IsZero() && now.Sub(e.last) < logInterval {
		e.quiet++
		return 0, false
	}
	suppressed, e.quiet, e.last = e.quiet, 0, now
	return suppressed, true
}
