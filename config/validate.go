package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Validate reports every problem at once. No message carries a secret: a
// value that may hold one is quoted with its user info and secrets
// redacted (see Redact).
func (c *Config) Validate() error {
	v := &validator{}
	// Each check adds its messages in turn: this order is the order of
	// the list an operator reads.
	c.checkListeners(v)
	c.checkChains(v)
	v.positive("shutdown_timeout", c.ShutdownTimeout)
	c.checkUpstreamAccount(v)
	c.checkTracing(v)
	c.checkAccounts(v)
	c.checkUpstreamCalls(v)
	c.checkAuth(v)
	c.checkCache(v)
	c.checkServer(v)
	c.checkLog(v)
	c.checkCORS(v)
	c.checkAccessFields(v)
	c.checkAdmin(v)
	c.checkShared(v)
	c.checkStream(v)
	c.checkCDN(v)
	if len(v.errs) == 0 {
		return nil
	}
	return errors.New(redact(errors.Join(v.errs...).Error(), c.secrets()))
}

// validator gathers Validate's problems, so that one run lists them all.
type validator struct{ errs []error }

func (v *validator) bad(format string, a ...any) { v.errs = append(v.errs, fmt.Errorf(format, a...)) }

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.bad("%s: must be > 0, got %s", key, d)
	}
}

func (v *validator) nonNegative(key string, d time.Duration) {
	if d < 0 {
		v.bad("%s: must not be negative, got %s", key, d)
	}
}

// port checks the port of s: 1..65535 (0 too, any free port, where
// listening), or a service name; net would take 99999 as its own error at
// start only, or not at all in a URL.
func (v *validator) port(key, s, port string, listening bool) {
	if port == "" && !listening {
		v.bad("%s: %q has no port", key, s)
		return
	}
	if n, err := net.LookupPort("tcp", port); err != nil || (n == 0 && !listening) {
		v.bad("%s: %q: port %q is out of range (1..65535)", key, s, port)
	}
}

// addr checks a host:port; listen and admin_listen may take port 0.
func (v *validator) addr(key, s string) {
	// An address is no place for credentials: say so without quoting them.
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		v.bad("%s: %q holds user info; use host:port, credentials have keys of their own", key, "xxxxx@"+s[i+1:])
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		v.bad("%s: %q is not host:port: %v", key, s, err)
		return
	}
	v.port(key, s, port, key == "listen" || key == "admin_listen")
}

// baseURL checks an upstream base_url. The edge appends the API's path
// (/api/v5/...) to base_url's; a base_url that already ends in it would
// make every call /api/v5/api/v5/..., a 404 from the upstream.
func (v *validator) baseURL(key, s string) {
	p, err := url.Parse(s)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" {
		v.bad("%s: %q must be http(s)://host[:port][/prefix] without a query", key, s)
		return
	}
	if port := p.Port(); port != "" || strings.HasSuffix(p.Host, ":") {
		v.port(key, s, port, false)
	}
	if path := strings.TrimRight(p.Path, "/"); strings.HasSuffix(path, APIPath) || strings.Contains(path+"/", APIPath+"/") {
		v.bad("%s: %q holds the API's path %s, which the edge adds to every call (/api/v5/api/v5/...); give the host, and a prefix only if the API is served below one", key, s, APIPath)
	}
}

func (c *Config) checkListeners(v *validator) {
	v.addr("listen", c.Listen)
	v.addr("admin_listen", c.AdminListen)
	if c.Listen == c.AdminListen {
		v.bad("admin_listen: must differ from listen (%s)", c.Listen)
	}
}

func (c *Config) checkChains(v *validator) {
	if len(c.Chains) == 0 {
		v.bad("chains: at least one chain is required")
	}
	for _, ch := range c.Chains {
		if strings.TrimSpace(ch) == "" {
			v.bad("chains: empty chain name")
		}
	}
	for k, d := range c.ChainFinalityDepth {
		if !slices.ContainsFunc(c.Chains, func(ch string) bool { return strings.EqualFold(strings.TrimSpace(ch), k) }) {
			v.bad("chain_finality_depth: %q is not a chain of chains (%s)", k, strings.Join(c.Chains, ", "))
		}
		if d < 1 || d > MaxFinalityDepth {
			v.bad("chain_finality_depth.%s: must be 1 to %d blocks, got %d", k, MaxFinalityDepth, d)
		}
	}
}

// checkUpstreamAccount checks the upstream block's own account, "default":
// its host and credentials.
func (c *Config) checkUpstreamAccount(v *validator) {
	u := c.Upstream
	v.baseURL("upstream.base_url", u.BaseURL)
	if u.APIKey == "" || u.SecretKey == "" || u.Passphrase == "" {
		v.bad("upstream: api_key, secret_key and passphrase are all required (EDGE_UPSTREAM__SECRET_KEY, or secret_key_file naming a file, etc.)")
	}
}

func (c *Config) checkTracing(v *validator) {
	if tr := c.Tracing; tr.OTLPEndpoint != "" {
		if p, err := url.Parse(tr.OTLPEndpoint); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			v.bad("tracing.otlp_endpoint: %q must be http(s)://host[:port]", tr.OTLPEndpoint)
		}
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 {
		v.bad("tracing.sample_ratio: must be within 0..1, got %v", c.Tracing.SampleRatio)
	}
}

// checkAccounts checks upstream.accounts: names unique and not "default",
// each with a host, credentials and a budget of its own.
func (c *Config) checkAccounts(v *validator) {
	u := c.Upstream
	if len(u.Accounts) > MaxAccounts {
		v.bad("upstream.accounts: at most %d, got %d", MaxAccounts, len(u.Accounts))
	}
	accountNames := map[string]bool{"default": true}
	for i, a := range u.Accounts {
		switch {
		case a.Name == "":
			v.bad("upstream.accounts[%d].name: required", i)
		case accountNames[a.Name]:
			v.bad("upstream.accounts[%d].name: %q used twice (\"default\" is the upstream block's)", i, a.Name)
		}
		accountNames[a.Name] = true
		v.baseURL(fmt.Sprintf("upstream.accounts[%d].base_url", i), a.BaseURL)
		if a.APIKey == "" || a.SecretKey == "" || a.Passphrase == "" {
			v.bad("upstream.accounts[%d] (%s): api_key, secret_key and passphrase are all required", i, a.Name)
		}
		if a.Rate <= 0 || a.Burst < 1 {
			v.bad("upstream.accounts[%d] (%s): rate must be > 0 and burst >= 1", i, a.Name)
		}
	}
}

// checkUpstreamCalls checks how upstream calls are made: timeouts, budget,
// connections, retries and the breaker.
func (c *Config) checkUpstreamCalls(v *validator) {
	u := c.Upstream
	v.positive("upstream.timeout", u.Timeout)
	if u.Rate <= 0 {
		v.bad("upstream.rate: must be > 0, got %v", u.Rate)
	}
	if u.Burst < 1 {
		v.bad("upstream.burst: must be >= 1, got %d", u.Burst)
	}
	v.nonNegative("upstream.budget_wait", u.BudgetWait)
	if u.MaxConns < 1 {
		v.bad("upstream.max_conns: must be >= 1, got %d", u.MaxConns)
	}
	if u.MaxResponseBytes < 1024 {
		v.bad("upstream.max_response_bytes: must be >= 1024, got %d", u.MaxResponseBytes)
	}
	if u.Retries < 0 || u.Retries > 10 {
		v.bad("upstream.retries: must be 0..10, got %d", u.Retries)
	}
	v.positive("upstream.retry_backoff", u.RetryBackoff)
	v.positive("upstream.retry_max_time", u.RetryMaxTime)
	if u.RetryMaxTime > 0 && u.RetryMaxTime < u.Timeout {
		v.bad("upstream.retry_max_time: %s is shorter than upstream.timeout (%s): no attempt could run its whole timeout; make it at least the timeout", u.RetryMaxTime, u.Timeout)
	}
	if u.BreakerFailures < 1 {
		v.bad("upstream.breaker_failures: must be >= 1, got %d", u.BreakerFailures)
	}
	v.positive("upstream.breaker_open_for", u.BreakerOpenFor)
	v.positive("upstream.max_retry_after", u.MaxRetryAfter)
	if u.PositionListMaxLimit < 1 || u.PositionListMaxLimit > MaxPositionListLimit {
		v.bad("upstream.position_list_max_limit: must be 1 to %d, got %d", MaxPositionListLimit, u.PositionListMaxLimit)
	}
}

func (c *Config) checkAuth(v *validator) {
	a := c.Auth
	switch a.Mode {
	case "off":
	case "signed":
		if len(a.Clients) == 0 {
			v.bad("auth.clients: mode signed needs at least one client")
		}
	default:
		v.bad("auth.mode: %q is neither \"off\" nor \"signed\"", a.Mode)
	}
	v.positive("auth.max_skew", a.MaxSkew)
	c.checkClients(v)
	if a.IPRate < 0 || (a.IPRate > 0 && a.IPBurst < 1) {
		v.bad("auth.ip_rate: must be >= 0, and ip_burst >= 1 when ip_rate is set")
	}
	if a.IPMaxTracked < 1 || a.IPMaxTracked > 10_000_000 {
		v.bad("auth.ip_max_tracked: must be within 1..10000000, got %d", a.IPMaxTracked)
	}
	if a.IPv6Prefix < 1 || a.IPv6Prefix > 128 {
		v.bad("auth.ip_v6_prefix: must be within 1..128 bits, got %d", a.IPv6Prefix)
	}
	for _, p := range a.TrustedProxies {
		if _, err := netip.ParseAddr(p); err != nil {
			if _, err := netip.ParsePrefix(p); err != nil {
				v.bad("auth.trusted_proxies: %q is neither an IP nor a CIDR", p)
			}
		}
	}
}

// checkClients checks auth.clients: names and api keys unique, credentials
// where signed mode needs them, and each client's limits.
func (c *Config) checkClients(v *validator) {
	a := c.Auth
	names, keys := map[string]bool{}, map[string]bool{}
	for i, cl := range a.Clients {
		if cl.Name == "" {
			v.bad("auth.clients[%d].name: required", i)
		} else if cl.Name == "anonymous" {
			v.bad("auth.clients[%d].name: \"anonymous\" is the edge's name for unsigned traffic; choose another", i)
		} else if names[cl.Name] {
			v.bad("auth.clients[%d].name: %q used twice", i, cl.Name)
		}
		names[cl.Name] = true
		if a.Mode == "signed" && (cl.APIKey == "" || cl.SecretKey == "" || cl.Passphrase == "") {
			v.bad("auth.clients[%d] (%s): api_key, secret_key and passphrase are required", i, cl.Name)
		}
		if cl.APIKey != "" && keys[cl.APIKey] {
			v.bad("auth.clients[%d] (%s): api_key used by another client", i, cl.Name)
		}
		keys[cl.APIKey] = true
		if cl.Rate < 0 || (cl.Rate > 0 && cl.Burst < 1) {
			v.bad("auth.clients[%d] (%s): rate must be >= 0 and burst >= 1 when rate is set", i, cl.Name)
		}
		if cl.Share < 0 || cl.Share > 1000 {
			v.bad("auth.clients[%d] (%s): share must be within 0..1000 (0 = 1), got %v", i, cl.Name, cl.Share)
		}
	}
}

func (c *Config) checkCache(v *validator) {
	ca := c.Cache
	if ca.MaxBytes < 1<<20 {
		v.bad("cache.max_bytes: must be >= 1048576, got %d", ca.MaxBytes)
	}
	if ca.IdentityBytes < -1 || ca.IdentityBytes > ca.MaxBytes/2 {
		v.bad("cache.identity_bytes: must be -1 (none), 0 (1/4 of max_bytes) or at most half of max_bytes, got %d", ca.IdentityBytes)
	}
	for _, f := range ca.StaleWhileRevalidate.fields() {
		v.nonNegative("cache.stale_while_revalidate."+f.name, f.d)
	}
	v.nonNegative("cache.stale_if_error", ca.StaleIfError)
	for _, f := range ca.StaleWhileRevalidate.fields() {
		if f.d > ca.StaleIfError {
			// An answer served stale while a refresh runs also stands in
			// when that refresh fails: stale_if_error would not hold.
			v.bad("cache.stale_while_revalidate.%s: %s is longer than cache.stale_if_error (%s): a stale answer would stand in for a failing upstream longer than stale_if_error says", f.name, f.d, ca.StaleIfError)
		}
	}
	v.positive("cache.batch_window", ca.BatchWindow)
	v.nonNegative("cache.cross_chain_settle", ca.CrossChainSettle)
	c.checkDisk(v)
	if ca.Policy != "finality" && ca.Policy != "route" {
		v.bad("cache.policy: %q is neither \"finality\" nor \"route\"", ca.Policy)
	}
	// Route names and that each route keeps a TTL are the route table's
	// to check (route.CheckConfig): the table lives there.
	for route, t := range ca.TTL {
		for _, f := range t.fields() {
			v.nonNegative("cache.ttl."+route+"."+f.name, f.d)
		}
	}
}

// checkDisk checks the disk tier: a directory the edge can create its
// file in (a probe file is created and removed), its own (owned by the
// edge's user or root, not writable by group or others), and its bound. Reloads
// validate too: a disk_path that stopped being writable (a read-only
// volume) refuses the reload, the configuration in force serving on.
func (c *Config) checkDisk(v *validator) {
	ca := c.Cache
	if ca.DiskPath == "" {
		return
	}
	if ca.DiskMaxBytes < 1<<20 {
		v.bad("cache.disk_max_bytes: must be >= 1048576 with cache.disk_path set, got %d", ca.DiskMaxBytes)
	}
	fi, err := os.Stat(ca.DiskPath)
	switch {
	case err != nil:
		v.bad("cache.disk_path: %q is not a writable directory: %v", ca.DiskPath, err)
		return
	case !fi.IsDir():
		v.bad("cache.disk_path: %q is not a writable directory: not a directory", ca.DiskPath)
		return
	case fi.Mode().Perm()&0o022 != 0:
		// Whoever can write there can plant disk.db as a symlink to a
		// file elsewhere (cache/disk.CheckDir checks the same at open).
		v.bad("cache.disk_path: %q is writable by group or others (mode %s): another user could plant disk.db there; chmod go-w it, or use a directory of the edge's own", ca.DiskPath, fi.Mode())
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		v.bad("cache.disk_path: %q is owned by uid %d, neither the edge's (%d) nor root's: its owner could plant disk.db there", ca.DiskPath, st.Uid, os.Geteuid())
		return
	}
	f, err := os.CreateTemp(ca.DiskPath, ".check-*")
	if err != nil {
		v.bad("cache.disk_path: %q is not a writable directory: %v", ca.DiskPath, err)
		return
	}
	f.Close()
	os.Remove(f.Name())
}

// checkServer checks the listeners' limits: server.* and admin_max_conns.
func (c *Config) checkServer(v *validator) {
	s := c.Server
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.write_timeout", s.WriteTimeout)
	v.positive("server.idle_timeout", s.IdleTimeout)
	if s.MaxHeaderBytes < 1024 {
		v.bad("server.max_header_bytes: must be >= 1024, got %d", s.MaxHeaderBytes)
	}
	if s.MaxURLBytes < 256 || s.MaxURLBytes > s.MaxHeaderBytes {
		v.bad("server.max_url_bytes: must be 256..max_header_bytes, got %d", s.MaxURLBytes)
	}
	if s.MaxConns < 1 {
		v.bad("server.max_conns: must be >= 1, got %d", s.MaxConns)
	}
	if s.MaxConnsPerIP < 0 {
		v.bad("server.max_conns_per_ip: must be >= 0 (0 = no cap), got %d", s.MaxConnsPerIP)
	}
	if c.AdminMaxConns < 1 {
		v.bad("admin_max_conns: must be >= 1, got %d", c.AdminMaxConns)
	}
	if s.GOMAXPROCS < 0 {
		v.bad("server.gomaxprocs: must be >= 0, got %d", s.GOMAXPROCS)
	}
}

// checkLog checks log.* but access_fields (checkAccessFields).
func (c *Config) checkLog(v *validator) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.bad("log.level: %q is not debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "text" {
		v.bad("log.format: %q is neither json nor text", c.Log.Format)
	}
	if c.Log.AccessSample < 0 || c.Log.AccessSample > 1 {
		v.bad("log.access_sample: must be within 0..1, got %v", c.Log.AccessSample)
	}
	v.nonNegative("log.repeat_interval", c.Log.RepeatInterval)
}

func (c *Config) checkCORS(v *validator) {
	if len(c.CORS.AllowOrigins) > 1 && slices.Contains(c.CORS.AllowOrigins, "*") {
		v.bad("cors.allow_origins: \"*\" allows every origin; it cannot be mixed with listed origins (%d listed): keep \"*\" alone or list the origins", len(c.CORS.AllowOrigins)-1)
	}
	for _, o := range c.CORS.AllowOrigins {
		if o == "*" {
			continue
		}
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			v.bad("cors.allow_origins: %q is not \"*\" or an origin such as https://app.example.com", o)
		}
	}
	v.nonNegative("cors.max_age", c.CORS.MaxAge)
	for _, h := range c.CORS.AllowHeaders {
		if !isToken(h) || (h == "*" && len(c.CORS.AllowHeaders) > 1) {
			v.bad("cors.allow_headers: %q is not a header name such as X-Request-Id (or \"*\" alone)", h)
		}
	}
}

func (c *Config) checkAccessFields(v *validator) {
	for _, f := range c.Log.AccessFields {
		if !slices.Contains(AccessFields, f) {
			v.bad("log.access_fields: %q is not one of %s", f, strings.Join(AccessFields, ", "))
		}
	}
}

// checkAdmin checks the purge token (reading purge_token_file) and
// admin.top_sample.
func (c *Config) checkAdmin(v *validator) {
	if c.Admin.PurgeToken != "" && c.Admin.PurgeTokenFile != "" {
		v.bad("admin: set purge_token or purge_token_file, not both")
	} else if t, err := c.Admin.Token(); err != nil {
		v.errs = append(v.errs, err)
	} else if t != "" && len(t) < MinPurgeToken {
		v.bad("admin.purge_token: at least %d characters (a guessable token opens purge to anyone on the admin port)", MinPurgeToken)
	}
	if c.Admin.TopSample < 0 || c.Admin.TopSample > MaxTopSample {
		v.bad("admin.top_sample: must be within 0 (off) and %d, got %d", MaxTopSample, c.Admin.TopSample)
	}
}

// checkShared checks shared.*: the Redis settings only in fleet mode
// (redis_addr set), local_share always.
func (c *Config) checkShared(v *validator) {
	sh := c.Shared
	if sh.RedisAddr != "" {
		for _, addr := range strings.Split(sh.RedisAddr, ",") {
			v.addr("shared.redis_addr", strings.TrimSpace(addr))
		}
		v.positive("shared.timeout", sh.Timeout)
		v.positive("shared.lock_ttl", sh.LockTTL)
		v.positive("shared.lock_wait", sh.LockWait)
		if sh.LockWait > sh.LockTTL && sh.LockTTL > 0 {
			v.bad("shared.lock_wait: %s is longer than shared.lock_ttl (%s): a node would outwait the lock it waits on and fetch beside its holder; make it shorter than lock_ttl", sh.LockWait, sh.LockTTL)
		}
	}
	if !(sh.LocalShare > 0 && sh.LocalShare <= 1) {
		v.bad("shared.local_share: must be within (0, 1], got %v", sh.LocalShare)
	}
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2),
// as a header name is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// MaxStreamVariants bounds stream.variants: each is one more upstream
// call per new head.
const MaxStreamVariants = 16

func (c *Config) checkStream(v *validator) {
	st := c.Stream
	if st.MaxSubscribers < 1 || st.MaxPerIP < 1 || st.History < 1 || st.Buffer < 1 {
		v.bad("stream.max_subscribers, max_per_ip, history, buffer: must be >= 1, got %d, %d, %d, %d", st.MaxSubscribers, st.MaxPerIP, st.History, st.Buffer)
	}
	v.positive("stream.heartbeat", st.Heartbeat)
	v.positive("stream.write_timeout", st.WriteTimeout)
	v.positive("stream.retry", st.Retry)
	if st.PollInterval < 100*time.Millisecond {
		v.bad("stream.poll_interval: must be >= 100ms, got %v", st.PollInterval)
	}
	if st.Variants < 0 || st.Variants > MaxStreamVariants {
		v.bad("stream.variants: must be within 0..%d, got %d", MaxStreamVariants, st.Variants)
	}
	if st.Lease < 2*st.PollInterval {
		v.bad("stream.lease: must be at least twice stream.poll_interval (%v), got %v", st.PollInterval, st.Lease)
	}
}
