// Package sim is explorer-sim, the reference upstream of explorer-edge: a
// real HTTP server speaking the six operations of the chain explorer read
// API over a deterministic synthetic chain.
//
// Every value is derived from hash(seed, chain, coordinates) and from the
// head height, which is a function of chain time; nothing is stored. The
// same request at the same chain time gives the same bytes, and two servers
// with the same seed agree. Transaction, cross-chain and holder identifiers
// encode their coordinates, so lookups recompute instead of searching.
//
// The server also verifies SVC-ACCESS signatures, counts requests
// (/sim/stats) and injects faults on command (/sim/faults).
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"explorer-edge/signer"
)

// The demo account: the defaults of explorer-sim's flags and of the proxy's
// shipped config.yaml. It is published, so it protects nothing.
const (
	DemoAPIKey     = "sim-demo-key"
	DemoSecretKey  = "5D1A9C7E3B2F4A6C8E0D1B3F5A7C9E2B"
	DemoPassphrase = "sim-demo-passphrase"
)

// DemoCredentials returns the demo account.
func DemoCredentials() signer.Credentials {
	return signer.Credentials{APIKey: DemoAPIKey, SecretKey: DemoSecretKey, Passphrase: DemoPassphrase}
}

// DefaultChains are the chains served when Config.Chains is empty.
func DefaultChains() []string { return []string{"CHAINX", "TRADE_ZONE"} }

// MaxSkew is how far SVC-ACCESS-TIMESTAMP may be from the wall clock.
const MaxSkew = 30 * time.Second

// Config configures a Server. The zero value is usable: no auth, defaults
// below.
type Config struct {
	Auth          bool               // verify SVC-ACCESS-* headers
	Credentials   signer.Credentials // the one accepted client; zero means DemoCredentials()
	BlockInterval time.Duration      // time between blocks; 0 means 1s
	PendingDepth  int                // newest blocks still "pending"; 0 means 2, negative means none
	Seed          int64              // all content derives from it
	Chains        []string           // chainShortName values served; empty means DefaultChains()
	Now           func() time.Time   // chain clock; nil means time.Now. Auth skew uses the wall clock.
	Faults        Faults             // initial faults
	Logger        *slog.Logger       // nil discards
	// Profile is the reading of each point the vendor's documentation
	// leaves open (profile.go); nil means ParseProfile(DefaultProfile).
	Profile *Profile

	onWait func() // test hook: a request starts waiting (latency or hang)
}

// Server is a simulated explorer. It is safe for concurrent use.
type Server struct {
	cfg    Config
	chains map[string]*chain // by canonical upper-case name
	order  []*chain
	routes map[string]*route // by path
	sign   *signer.Signer
	log    *slog.Logger
	admin  http.Handler
	stats  counters

	faultsMu  sync.Mutex
	faults    Faults
	profileMu sync.Mutex
	profile   profileState
	bombMu    sync.Mutex
	bomb      *gzipBomb // the gzip bomb fault's body, built on first use

	// Lifecycle: done ends hung requests; wg counts handlers in flight.
	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
	srv    *http.Server
	ln     net.Listener
	served chan struct{} // closed when Serve has returned
}

// New returns a Server for cfg with defaults filled in. It does not listen;
// use Handler with a server of your own, or Start.
func New(cfg Config) *Server {
	if cfg.BlockInterval <= 0 {
		cfg.BlockInterval = time.Second
	}
	switch {
	case cfg.PendingDepth == 0:
		cfg.PendingDepth = 2
	case cfg.PendingDepth < 0:
		cfg.PendingDepth = 0
	}
	if len(cfg.Chains) == 0 {
		cfg.Chains = DefaultChains()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Credentials == (signer.Credentials{}) {
		cfg.Credentials = DemoCredentials()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:    cfg,
		chains: make(map[string]*chain),
		routes: make(map[string]*route),
		sign:   signer.New(cfg.Credentials),
		log:    cfg.Logger,
		faults: cfg.Faults.normalized(),
		done:   make(chan struct{}),
	}
	for _, name := range cfg.Chains {
		c := newChain(name, cfg.Seed)
		if c.short == "" || s.chains[c.short] != nil {
			continue
		}
		s.chains[c.short] = c
		s.order = append(s.order, c)
	}
	for i := range routeTable {
		s.routes[routeTable[i].path] = &routeTable[i]
	}
	prof := MustProfile(DefaultProfile)
	if cfg.Profile != nil {
		prof = *cfg.Profile
	}
	s.profile = profileState{prof, cfg.Now()}
	s.stats.reset()
	s.admin = s.adminHandler()
	return s
}

// Start listens on 127.0.0.1:0 and serves in the background.
func Start(cfg Config) (*Server, error) { return Listen(cfg, "127.0.0.1:0") }

// Listen listens on addr and serves in the background.
func Listen(cfg Config, addr string) (*Server, error) {
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := New(cfg)
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	return s, nil
}

// Addr is the listening address ("127.0.0.1:port") after Start or Listen.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is the base URL ("http://127.0.0.1:port") after Start or Listen.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops the listener, closes connections, ends hung requests and waits
// for every handler to return. Handlers started afterwards answer 503.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	var err error
	if s.srv != nil {
		err = s.srv.Close()
		<-s.served
	}
	s.wg.Wait()
	return err
}

// Handler returns the server's HTTP handler (the Server itself).
func (s *Server) Handler() http.Handler { return s }

// enter registers a handler in flight, unless the server is closed.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// ServeHTTP dispatches to /sim/* (control endpoints, no auth, not counted)
// or to one of the six API routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeJSON(w, http.StatusServiceUnavailable, envelope(codeServer, "explorer-sim is shutting down"))
		return
	}
	defer s.wg.Done()
	if strings.HasPrefix(r.URL.Path, "/sim/") {
		s.admin.ServeHTTP(w, r)
		return
	}
	rt := s.routes[r.URL.Path]
	if rt == nil {
		writeError(w, &Error{http.StatusNotFound, codeNotFound, "no such path: " + r.URL.Path})
		return
	}
	s.serveAPI(w, r, rt)
}

// serveAPI is one request's way through an API route: count, method, auth,
// faults, parameters, answer.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rt *route) {
	s.stats.record(rt, r)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, &Error{http.StatusMethodNotAllowed, codeMethod, "method " + r.Method + " is not allowed, use GET"})
		return
	}
	if s.cfg.Auth {
		if err := s.authenticate(r); err != nil {
			s.stats.authFailure()
			s.log.Debug("auth rejected", "route", rt.name, "code", err.Code)
			writeError(w, err)
			return
		}
	}
	f := s.Faults()
	kind := faultNone
	if f.Route == "" || f.Route == rt.name {
		if !s.delay(r.Context(), f) {
			abort(w) // the client left or the server is closing: no answer at all
			return
		}
		kind = f.pick()
	}
	if s.injectAnswer(w, r, kind, f) {
		return
	}
	status, body := s.answer(r, rt)
	status, body = spoil(kind, f, status, body)
	writeJSON(w, status, body)
}

// injectAnswer answers with fault kind in place of the route's answer, or
// with none at all. It reports false for a kind that leaves the answer to
// the route (spoil may change it after).
func (s *Server) injectAnswer(w http.ResponseWriter, r *http.Request, kind int, f Faults) bool {
	switch kind {
	case faultHTTP500:
		writeJSON(w, http.StatusInternalServerError, envelope(codeServer, "System error (injected fault)"))
	case faultHTTP429:
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
		writeJSON(w, http.StatusTooManyRequests, envelope(codeRateLimit, "Too Many Requests (injected fault)"))
	case faultEnvelope:
		status, msg := http.StatusOK, "injected error envelope"
		if v, ok := LookupVendorCode(f.EnvelopeCode); ok && f.EnvelopeVendor {
			status, msg = v.Status, v.Msg+" (injected)"
		}
		writeJSON(w, status, envelope(f.EnvelopeCode, msg))
	case faultHang:
		s.waiting()
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		abort(w) // never an empty 200 when the handler returns
	case faultDrop:
		abort(w)
	case faultGzipBomb:
		s.writeGzipBomb(w, f.GzipBombBytes)
	default:
		return false
	}
	return true
}

// spoil turns the route's answer into what fault kind makes of it: not
// JSON, cut in half, or padded to f.OversizedBytes; other kinds leave it.
func spoil(kind int, f Faults, status int, body []byte) (int, []byte) {
	switch kind {
	case faultMalformed:
		status, body = http.StatusOK, []byte(`{"code":"0","msg":"","data":[{"page":"1" "limit":}`)
	case faultTruncated:
		status, body = http.StatusOK, body[:len(body)/2]
	case faultOversized:
		pad := max(f.OversizedBytes-len(body), 0)
		status, body = http.StatusOK, append(bytes.Repeat([]byte{' '}, pad), body...)
	}
	return status, body
}

// answer computes the route's envelope and its HTTP status.
func (s *Server) answer(r *http.Request, rt *route) (int, []byte) {
	p := params{r.URL.Query()}
	pr := s.profileNow()
	refuse := func(err *Error) (int, []byte) {
		status := err.Status
		if pr.StatusVendor {
			status = vendorStatus(err.Code, status)
		}
		return status, envelope(err.Code, err.Msg)
	}
	c, err := s.chainParam(p)
	if err != nil {
		return refuse(err)
	}
	data, err := rt.serve(s, c, p, ask{s.cfg.Now(), pr})
	if err != nil {
		return refuse(err)
	}
	body, merr := json.Marshal(struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
		Data any    `json:"data"`
	}{"0", "", data})
	if merr != nil { // cannot happen: every value is strings and bools
		return http.StatusInternalServerError, envelope(codeServer, merr.Error())
	}
	return http.StatusOK, body
}

// delay sleeps the fault's latency plus jitter; false if the client left or
// the server closed meanwhile.
func (s *Server) delay(ctx context.Context, f Faults) bool {
	d := f.latency()
	if d <= 0 {
		return true
	}
	s.waiting()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

func (s *Server) waiting() {
	if s.cfg.onWait != nil {
		s.cfg.onWait()
	}
}

// abort drops the connection without an answer.
func abort(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // reset, so the client sees the failure at once
	}
	conn.Close()
}

// envelope is an answer without data: {"code":..,"msg":..,"data":[]}.
func envelope(code, msg string) []byte {
	b, _ := json.Marshal(struct {
		Code string   `json:"code"`
		Msg  string   `json:"msg"`
		Data []string `json:"data"`
	}{code, msg, []string{}})
	return b
}

func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{http.StatusInternalServerError, codeServer, err.Error()}
	}
	writeJSON(w, e.Status, envelope(e.Code, e.Msg))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
