// Package config is the schema of explorer-edge's configuration file: the
// built-in defaults, the YAML file, then EDGE_* environment variables, loaded
// with koanf. The field comments are the configuration reference.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// Config is the whole configuration of one explorer-edge process.
type Config struct {
	Listen          string        `koanf:"listen"`           // public API address
	AdminListen     string        `koanf:"admin_listen"`     // /metrics, /healthz, /readyz; never the public port
	AdminMaxConns   int           `koanf:"admin_max_conns"`  // connections open at once on admin_listen; more are refused (503)
	Chains          []string      `koanf:"chains"`           // chainShortName values served, matched case-insensitively
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"` // bound on draining in-flight requests at SIGTERM
	WatchConfig     bool          `koanf:"watch_config"`     // reload when the config file changes (SIGHUP always reloads)
	Upstream        Upstream      `koanf:"upstream"`
	Auth            Auth          `koanf:"auth"`
	Cache           Cache         `koanf:"cache"`
	Server          Server        `koanf:"server"`
	Log             Log           `koanf:"log"`
	Shared          Shared        `koanf:"shared"`
	CORS            CORS          `koanf:"cors"`
	Admin           Admin         `koanf:"admin"`
	Tracing         Tracing       `koanf:"tracing"`
	Stream          Stream        `koanf:"stream"`
	CDN             CDN           `koanf:"cdn"` // behind a CDN: tags, lifetimes, purges (config/cdn.go, docs/cdn.md)

	// ChainFinalityDepth is, per chain (a name of chains, any case), how
	// many blocks below the newest block the upstream showed a block is
	// taken as final when the chain's blocks carry no state (the vendor's
	// v6 block-list page: state empty where it does not apply). Without
	// it such a chain has nothing final: its finalized height never
	// rises, every answer is cached as head and the disk tier stays
	// empty. Blocks that carry a state (pending, done) are believed
	// instead. Keep it at least the deepest reorganization the chain
	// has: a deeper one is logged at error, as one that replaced a done
	// block (docs/design.md, "Chain truth").
	ChainFinalityDepth map[string]int64 `koanf:"chain_finality_depth"`
}

// Stream is the stream of chain events on the public port,
// GET /edge/v1/events (docs/stream.md): new heads and reorganizations
// pushed to browsers as server-sent events. Every key but poll_interval
// and variants is read at start (a reload that changes one is refused).
type Stream struct {
	// Enabled serves the stream; false = the path answers 404 like any
	// other outside the route table.
	Enabled bool `koanf:"enabled"`
	// MaxSubscribers bounds the streams open on this node (503 beyond).
	MaxSubscribers int `koanf:"max_subscribers"`
	// MaxPerIP bounds the streams of one client address (429 beyond).
	MaxPerIP int `koanf:"max_per_ip"`
	// Heartbeat is the interval of the comment lines that keep an idle
	// stream open through proxies.
	Heartbeat time.Duration `koanf:"heartbeat"`
	// History is how many events per chain are kept for resumes
	// (Last-Event-ID); an id older than that is answered with a reset.
	History int `koanf:"history"`
	// Buffer is how many events wait for one subscriber; one that falls
	// further behind is dropped and reconnects.
	Buffer int `koanf:"buffer"`
	// WriteTimeout bounds each write to a subscriber; one that passes it
	// is dropped.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// Retry is the reconnection time a drained stream is told (spread
	// over [retry, 2*retry)) and the Retry-After of a refusal.
	Retry time.Duration `koanf:"retry"`
	// PollInterval is how often each chain's newest block page is asked
	// of the upstream while someone listens, by one node of the fleet.
	PollInterval time.Duration `koanf:"poll_interval"`
	// Variants is how many other newest-page questions per chain (another
	// limit) are refreshed with each new head before it is announced,
	// among those 3 distinct clients (addresses grouped as the per-IP
	// limits group them, or verified clients) asked in the last 5
	// minutes; their calls yield to client misses within 40% of
	// upstream.rate (docs/stream.md). 0 = the default page only.
	Variants int `koanf:"variants"`
	// Lease is the lifetime of the fleet's poll lease in Redis: a node
	// that died holding it is replaced within it.
	Lease time.Duration `koanf:"lease"`
}

// Tracing sends OpenTelemetry spans (docs/operations.md, Tracing). Off
// unless otlp_endpoint is set; a reload that changes it is refused (restart).
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP receiver's base URL
	// (http://collector:4318); spans go to its /v1/traces. "" = off.
	OTLPEndpoint string `koanf:"otlp_endpoint"`
	// SampleRatio is the share of requests without a sampled parent that
	// are traced (0 to 1); a client's sampled traceparent is followed.
	SampleRatio float64 `koanf:"sample_ratio"`
	// ServiceName is the service.name of the spans.
	ServiceName string `koanf:"service_name"`
}

// Admin guards the admin port's operations beyond /metrics and the probes.
type Admin struct {
	// PurgeToken is the bearer token POST /purge requires (Authorization:
	// Bearer <token>). Empty, with no purge_token_file: purge is off and
	// the route answers 404. Never logged.
	PurgeToken string `koanf:"purge_token"`
	// PurgeTokenFile is a file holding the token (surrounding white space
	// dropped), read at start and on every reload, so the token can be
	// rotated without a restart. Set one of purge_token and purge_token_file.
	PurgeTokenFile string `koanf:"purge_token_file"`
	// TopSample counts one request in top_sample, by its normalized key,
	// for GET /cache/top (the most-asked keys of the last minutes); 0 =
	// off. Neither way does the hit path allocate.
	TopSample int `koanf:"top_sample"`
}

// MaxTopSample is the largest admin.top_sample: one request in a million.
const MaxTopSample = 1 << 20

// MinPurgeToken is the shortest purge token accepted.
const MinPurgeToken = 16

// Token is the purge token in force: purge_token, or the contents of
// purge_token_file. "" means purge is off. The error never holds the token.
func (a Admin) Token() (string, error) {
	if a.PurgeTokenFile == "" {
		return a.PurgeToken, nil
	}
	t, err := ReadSecretFile(a.PurgeTokenFile)
	if err != nil {
		return "", fmt.Errorf("admin.purge_token_file: %w", err)
	}
	return t, nil
}

// CORS lets frontends running in a browser on other origins call the edge.
type CORS struct {
	// AllowOrigins are the origins ("https://app.example.com", scheme and
	// host as a browser sends them) whose requests get CORS headers; "*"
	// allows every origin. Empty (the default): no CORS headers at all.
	AllowOrigins []string `koanf:"allow_origins"`
	// AllowHeaders are the request headers a preflight allows a page to
	// send (Access-Control-Allow-Headers); the list replaces the default
	// (DefaultAllowHeaders), "*" alone allows any but Authorization.
	AllowHeaders []string      `koanf:"allow_headers"`
	MaxAge       time.Duration `koanf:"max_age"` // how long a browser may keep a preflight's answer
}

// DefaultAllowHeaders is cors.allow_headers by default: what a signed
// client sends, the validator, what a frontend adds to trace a call
// (X-Request-Id, W3C Trace Context), and the event stream's resume
// (Last-Event-ID, which a page's fetch of the stream sends by hand).
func DefaultAllowHeaders() []string {
	return []string{"SVC-ACCESS-KEY", "SVC-ACCESS-SIGN", "SVC-ACCESS-TIMESTAMP", "SVC-ACCESS-PASSPHRASE",
		"If-None-Match", "X-Request-Id", "traceparent", "tracestate", "Last-Event-ID"}
}

// AccessFields are the optional fields of the access log line
// (log.access_fields).
var AccessFields = []string{"method", "key", "bytes", "upstream_ms"}

// Upstream is the explorer API the edge forwards misses to.
type Upstream struct {
	BaseURL    string        `koanf:"base_url"`   // scheme://host[:port][/prefix]
	APIKey     string        `koanf:"api_key"`    // edge's own credentials; every upstream request is re-signed
	SecretKey  string        `koanf:"secret_key"` // never logged
	Passphrase string        `koanf:"passphrase"` // never logged
	Timeout    time.Duration `koanf:"timeout"`    // one upstream attempt
	Rate       float64       `koanf:"rate"`       // quota in requests per second, whole fleet
	Burst      int           `koanf:"burst"`      // bucket size
	// BudgetWait is how long a client miss may wait for a token when the
	// bucket is empty and no stale copy exists, before 503/50001.
	BudgetWait       time.Duration `koanf:"budget_wait"`
	MaxConns         int           `koanf:"max_conns"`          // connections to the upstream host
	MaxResponseBytes int           `koanf:"max_response_bytes"` // larger answers, on the wire or decoded, are an error (50026)
	Retries          int           `koanf:"retries"`            // extra attempts after 5xx, timeout, connection error
	RetryBackoff     time.Duration `koanf:"retry_backoff"`      // first backoff; doubles, with full jitter
	RetryMaxTime     time.Duration `koanf:"retry_max_time"`     // bound on all attempts of one call
	BreakerFailures  int           `koanf:"breaker_failures"`   // consecutive failures that open the breaker
	BreakerOpenFor   time.Duration `koanf:"breaker_open_for"`   // how long it stays open before a probe
	// MaxRetryAfter caps the lock-out an upstream 429 (or 50011) asks for
	// with Retry-After: no call leaves before min(Retry-After,
	// max_retry_after). A reload ends a lock-out.
	MaxRetryAfter time.Duration `koanf:"max_retry_after"`
	// PositionListMaxLimit is the largest position-list limit the edge
	// accepts and forwards: the vendor's Chinese page says 100, its English
	// page 50 (docs/explorer-readings.md). Above it the edge refuses the
	// question itself (400/50036); an upstream that refuses a limit below it
	// is answered once and its refusal cached for the negative time.
	PositionListMaxLimit int `koanf:"position_list_max_limit"`

	// Each secret can instead be read from a file (a mounted Kubernetes
	// Secret, a Docker secret): its whole content, trailing newline
	// trimmed, read at start and again on every reload. A key and its
	// _file set in the same place are an error; the environment's wins
	// over the file's.
	APIKeyFile     string `koanf:"api_key_file"`
	SecretKeyFile  string `koanf:"secret_key_file"`
	PassphraseFile string `koanf:"passphrase_file"`

	// Accounts are further explorer accounts (another paid key, a
	// self-hosted mirror) beside the one above, which is the account named
	// "default". Each has its own host, credentials and budget; the other
	// settings of this block apply to all. A miss goes to the healthiest
	// account with a token (docs/reliability.md, Several upstream accounts).
	Accounts []Account `koanf:"accounts"`
}

// APIPath is the path of the explorer API below upstream.base_url: the
// edge's routes (/api/v5/...) are sent as they are asked.
const APIPath = "/api/v5"

// MaxPositionListLimit bounds upstream.position_list_max_limit: a page of
// holders beyond it would be no page (the reachable window is 10000).
const MaxPositionListLimit = 1000

// MaxFinalityDepth bounds chain_finality_depth: the reachable window of
// the newest 10000 blocks, below which nothing is asked.
const MaxFinalityDepth = 10000

// FinalityDepth is chain_finality_depth of chain (matched
// case-insensitively), 0 when none is set.
func (c *Config) FinalityDepth(chain string) int64 {
	for k, d := range c.ChainFinalityDepth {
		if strings.EqualFold(k, chain) {
			return d
		}
	}
	return 0
}

// MaxAccounts bounds upstream.accounts: each is a metric label.
const MaxAccounts = 15

// Account is one more upstream account.
type Account struct {
	Name       string  `koanf:"name"`     // metric label; "default" is the upstream block's
	BaseURL    string  `koanf:"base_url"` // as upstream.base_url
	APIKey     string  `koanf:"api_key"`
	SecretKey  string  `koanf:"secret_key"` // never logged
	Passphrase string  `koanf:"passphrase"` // never logged
	Rate       float64 `koanf:"rate"`       // this account's quota, whole fleet
	Burst      int     `koanf:"burst"`

	// Files holding the credentials instead, as upstream.*_file.
	APIKeyFile     string `koanf:"api_key_file"`
	SecretKeyFile  string `koanf:"secret_key_file"`
	PassphraseFile string `koanf:"passphrase_file"`
}

// Client is one frontend allowed in when auth.mode is "signed".
type Client struct {
	Name       string  `koanf:"name"` // metric label; must be unique
	APIKey     string  `koanf:"api_key"`
	SecretKey  string  `koanf:"secret_key"`
	Passphrase string  `koanf:"passphrase"`
	Rate       float64 `koanf:"rate"`  // requests per second; 0 = no limit
	Burst      int     `koanf:"burst"` // bucket size
	// Share weighs the client's misses against other clients' when they
	// wait for the upstream budget: with shares 1 and 3, two clients that
	// both wait get a quarter and three quarters of the tokens. 0 = 1.
	Share float64 `koanf:"share"`

	// Files holding the credentials instead, as upstream.*_file.
	APIKeyFile     string `koanf:"api_key_file"`
	SecretKeyFile  string `koanf:"secret_key_file"`
	PassphraseFile string `koanf:"passphrase_file"`
}

// Auth decides who may call the edge.
type Auth struct {
	Mode           string        `koanf:"mode"`            // "off" or "signed"
	MaxSkew        time.Duration `koanf:"max_skew"`        // accepted distance of SVC-ACCESS-TIMESTAMP from now
	Clients        []Client      `koanf:"clients"`         // used when mode is "signed"
	IPRate         float64       `koanf:"ip_rate"`         // per client IP when mode is "off"; 0 = no limit
	IPBurst        int           `koanf:"ip_burst"`        // bucket size per IP
	TrustedProxies []string      `koanf:"trusted_proxies"` // IPs or CIDRs whose X-Forwarded-For is believed
	// IPMaxTracked bounds the addresses ip_rate keeps a bucket for (24 bytes
	// each, allocated at start; rounded up to a multiple of 8). When it is
	// full, a new address takes the place of the one whose bucket is fullest.
	IPMaxTracked int `koanf:"ip_max_tracked"`
	// IPv6Prefix is how many leading bits of an IPv6 address count as one
	// client for every per-address limit (ip_rate's bucket,
	// stream.max_per_ip, server.max_conns_per_ip: internal/ipgroup): 64
	// (the default) counts a subscriber's /64 as one client, as one host
	// commonly holds all of it; 128 counts each address. It stays here
	// rather than under server: the rate was its first user.
	IPv6Prefix int `koanf:"ip_v6_prefix"`
}

// Cache sizes the cache and sets its times.
type Cache struct {
	MaxBytes int64 `koanf:"max_bytes"` // bound on bytes held by entries
	// DiskPath is the directory of the disk tier (cache/disk, docs/disk.md):
	// final answers, as stored (compressed), kept in a file under the
	// memory cache so that a node restarts warm; looked up after memory
	// and before the shared tier. It must be a writable directory. "" =
	// off. A reload cannot change it (restart).
	DiskPath string `koanf:"disk_path"`
	// DiskMaxBytes bounds what the disk tier's entries take in its file,
	// oldest evicted first; the file takes up to 1.35x it, plus 16 MB
	// bbolt grows it by. Used only with disk_path; at least 1 MiB.
	DiskMaxBytes int64 `koanf:"disk_max_bytes"`
	// IdentityBytes is the most of MaxBytes identity copies of the answers
	// clients that do not take gzip ask for most may hold (answers are
	// held compressed; the others are inflated per request); what they do
	// not hold is the entries'. 0 is 1/4 of max_bytes, -1 none. At most
	// half of max_bytes.
	IdentityBytes int64 `koanf:"identity_bytes"`
	// StaleWhileRevalidate is how long past its fresh time an answer of
	// each class is still served at once while one background refresh
	// runs: {head: 1s, final: 30s, volatile: 30s, negative: 5s}. A single
	// duration sets every class. The head window bounds how far the newest
	// pages lag the chain (fresh + window: 2 blocks with the defaults).
	StaleWhileRevalidate PerClass      `koanf:"stale_while_revalidate"`
	StaleIfError         time.Duration `koanf:"stale_if_error"` // serve stale while the upstream fails
	BatchWindow          time.Duration `koanf:"batch_window"`   // gather per-hash misses into one upstream call
	// CrossChainSettle is how old a cross-chain record's updateTime (the
	// vendor's "last update time of the record") must be, when the answer
	// is asked, for the record to be final: a record updated since may
	// still change, and is cached as head (short). 0 = a record with a
	// status is final at once, whatever its updateTime.
	CrossChainSettle time.Duration `koanf:"cross_chain_settle"`
	// BlockPages answers a block-list question without a height from the
	// blocks the edge holds (docs/frontends.md), else from the one page
	// of the newest 100 blocks that holds it, asked once for every
	// variant: limit=5, 10, 20 and page=2 of one head cost one upstream
	// call, and the stream refreshes its variants with one call a block.
	// false: each such question is asked as it is (pinned pages, head=,
	// are assembled either way). Default true.
	BlockPages bool `koanf:"block_pages"`
	// Policy is "finality" (TTL by how settled each answer is) or "route"
	// (one TTL per route: the shortest of its classes), for comparison.
	Policy string `koanf:"policy"`
	// TTL overrides fresh times per route and class, e.g.
	// ttl: {block-list: {head: 2s}}. Unnamed values keep their defaults.
	TTL map[string]PerClass `koanf:"ttl"`
}

// PerClass is one duration per answer class (head, final, volatile,
// negative: the proxy's classification of answers).
type PerClass struct {
	Head     time.Duration `koanf:"head"`
	Final    time.Duration `koanf:"final"`
	Volatile time.Duration `koanf:"volatile"`
	Negative time.Duration `koanf:"negative"`
}

// SameForAll is d for every class.
func SameForAll(d time.Duration) PerClass { return PerClass{d, d, d, d} }

// fields names the classes' durations, for validation.
func (w PerClass) fields() []struct {
	name string
	d    time.Duration
} {
	return []struct {
		name string
		d    time.Duration
	}{{"head", w.Head}, {"final", w.Final}, {"volatile", w.Volatile}, {"negative", w.Negative}}
}

// Server hardens the public listener.
type Server struct {
	ReadTimeout    time.Duration `koanf:"read_timeout"`     // whole request, headers included (slowloris)
	WriteTimeout   time.Duration `koanf:"write_timeout"`    // whole response
	IdleTimeout    time.Duration `koanf:"idle_timeout"`     // keep-alive between requests
	MaxHeaderBytes int           `koanf:"max_header_bytes"` // request line and headers
	MaxURLBytes    int           `koanf:"max_url_bytes"`    // request target; longer gets 414
	GOMAXPROCS     int           `koanf:"gomaxprocs"`       // 0 = Go's default
	// PlainConns serves plain net.Conns with fasthttp's usual write buffer
	// instead of the tuned connections of package tcpio (one writev per
	// answer, raw system calls, lazy deadlines). A fallback, not a tuning.
	PlainConns bool `koanf:"plain_conns"`
	// MaxConns caps the connections open at once; more are refused with
	// 503/50001. At start it is lowered, with a warning, to what the
	// descriptor limit can hold beside admin_max_conns, upstream.max_conns
	// and the process's own descriptors (RLIMIT_NOFILE, soft raised to hard).
	MaxConns int `koanf:"max_conns"`
	// MaxConnsPerIP caps the connections open at once from one peer
	// address (429/50011 beyond it); 0 = no cap. Peers in
	// auth.trusted_proxies are exempt. Behind a proxy not listed there,
	// every client shares the proxy's address: leave it 0.
	MaxConnsPerIP int `koanf:"max_conns_per_ip"`
}

// Log configures log/slog.
type Log struct {
	Level        string  `koanf:"level"`         // debug, info, warn, error
	Format       string  `koanf:"format"`        // json or text
	AccessSample float64 `koanf:"access_sample"` // fraction of requests logged, 0 = no access log
	// RepeatInterval bounds lines a client can repeat at will (a 5xx answer,
	// fasthttp's warnings about connections): one per interval for each
	// (message, route, code); the next one says how many were left out
	// (suppressed=K) and log_suppressed_total counts them. 0 logs every
	// one. The access log has its own sampling (access_sample).
	RepeatInterval time.Duration `koanf:"repeat_interval"`
	// AccessFields adds fields to the access line (AccessFields): method,
	// key (the normalized question, never the raw query), bytes (of the
	// body sent), upstream_ms (the upstream call of a miss). None by default.
	AccessFields []string `koanf:"access_fields"`
}

// Shared is fleet mode on Redis.
type Shared struct {
	RedisAddr     string        `koanf:"redis_addr"` // empty: single node; "host:port" (comma-separated for a cluster)
	RedisUsername string        `koanf:"redis_username"`
	RedisPassword string        `koanf:"redis_password"` // never logged
	RedisTLS      bool          `koanf:"redis_tls"`
	RedisCluster  bool          `koanf:"redis_cluster"`
	Timeout       time.Duration `koanf:"timeout"`   // bound on any Redis round trip; past it a node goes on alone
	LockTTL       time.Duration `koanf:"lock_ttl"`  // fetch lock lifetime; a dead holder's lock expires after it
	LockWait      time.Duration `koanf:"lock_wait"` // how long other nodes wait for the holder's answer
	Prefix        string        `koanf:"prefix"`    // key prefix, to share one Redis between deployments
	// LocalShare is the fraction of upstream.rate (and burst) one node may
	// spend on its own while Redis is down, 0 < x <= 1. The default, 0.34,
	// keeps a fleet of three within the quota; set about 1/N for N nodes.
	LocalShare float64 `koanf:"local_share"`

	// Files holding the Redis username and password instead, as
	// upstream.*_file. A changed one needs a restart, as shared.* does.
	RedisUsernameFile string `koanf:"redis_username_file"`
	RedisPasswordFile string `koanf:"redis_password_file"`
}

// Default is the configuration before any file or environment.
func Default() Config {
	return Config{
		Listen:          ":8080",
		AdminListen:     ":8081",
		AdminMaxConns:   64,
		Chains:          []string{"CHAINX", "TRADE_ZONE"},
		ShutdownTimeout: 15 * time.Second,
		Upstream: Upstream{
			BaseURL:          "http://127.0.0.1:8900",
			Timeout:          5 * time.Second,
			Rate:             20,
			Burst:            20,
			BudgetWait:       250 * time.Millisecond,
			MaxConns:         64,
			MaxResponseBytes: 8 << 20,
			Retries:          2,
			RetryBackoff:     50 * time.Millisecond,
			RetryMaxTime:     8 * time.Second,
			BreakerFailures:  5,
			BreakerOpenFor:   5 * time.Second,
			MaxRetryAfter:    60 * time.Second,
			// The vendor's Chinese page; its English page says 50.
			PositionListMaxLimit: 100,
		},
		Auth: Auth{Mode: "off", MaxSkew: 30 * time.Second, IPMaxTracked: 100_000, IPv6Prefix: 64},
		Cache: Cache{
			MaxBytes:             256 << 20,
			DiskMaxBytes:         1 << 30,
			StaleWhileRevalidate: PerClass{Head: time.Second, Final: 30 * time.Second, Volatile: 30 * time.Second, Negative: 5 * time.Second},
			StaleIfError:         10 * time.Minute,
			BatchWindow:          2 * time.Millisecond,
			// Twice the longest the vendor's records were seen to move
			// after their status (explorer-sim's update-moves: 5 minutes).
			CrossChainSettle: 10 * time.Minute,
			BlockPages:       true,
			Policy:           "finality",
			TTL:              map[string]PerClass{},
		},
		Server: Server{
			ReadTimeout:    10 * time.Second,
			WriteTimeout:   10 * time.Second,
			IdleTimeout:    60 * time.Second,
			MaxHeaderBytes: 8 << 10,
			MaxURLBytes:    4 << 10,
			MaxConns:       10_000,
		},
		Log:   Log{Level: "info", Format: "json", RepeatInterval: time.Second},
		CORS:  CORS{MaxAge: 10 * time.Minute, AllowHeaders: DefaultAllowHeaders()},
		Admin: Admin{TopSample: 64},
		Shared: Shared{
			Timeout:    50 * time.Millisecond,
			LockTTL:    10 * time.Second,
			LockWait:   6 * time.Second,
			Prefix:     "edge:",
			LocalShare: 0.34,
		},
		Tracing: Tracing{SampleRatio: 0.1, ServiceName: "explorer-edge"},
		Stream: Stream{MaxSubscribers: 2048, MaxPerIP: 32, Heartbeat: 15 * time.Second, History: 256, Buffer: 16,
			WriteTimeout: 10 * time.Second, Retry: 3 * time.Second, PollInterval: time.Second, Variants: 4, Lease: 3 * time.Second},
		CDN: CDNDefaults(),
	}
}

// Load reads defaults, then the YAML file at path (skipped when path is
// empty), then EDGE_* environment variables, then the files of *_file keys.
// It does not validate (Check does). Its error lists every problem, one a
// line, each naming where the value came from (the file, or the variable
// that set it) and its key path; it is redacted (see Redact). EDGE_*
// variables that name no key are left out (IgnoredEnv names them).
func Load(path string) (Config, error) {
	cfg, _, probs, err := load(path)
	if err != nil {
		return Config{}, errors.New(Redact(err.Error()))
	}
	if len(probs) > 0 {
		return Config{}, probs.err(cfg.secrets())
	}
	return cfg, nil
}

// Check is Load and Validate: every problem of both, one a line (a value
// that could not be read is not validated again). On error the Config is
// what could be read, over the defaults, for a caller that wants its log
// settings to report the error with.
// more are further checks, made where what they check is declared (the
// route table's check of cache.ttl, route.CheckConfig); their problems are
// listed with the others.
func Check(path string, more ...func(*Config) error) (Config, error) {
	cfg, src, probs, err := load(path)
	if err != nil {
		return Default(), errors.New(Redact(err.Error()))
	}
	probs = append(probs, probs.validate(&cfg, src, more)...)
	if len(probs) > 0 {
		return cfg, probs.err(cfg.secrets())
	}
	return cfg, nil
}

// load is Load before its problems are formatted: the configuration as far
// as it decoded, where each value came from, and the problems. err is a
// file that cannot be read or parsed.
func load(path string) (Config, sources, problems, error) {
	k := koanf.New(".")
	src := sources{file: path, env: map[string]string{}}
	if path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, src, nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	// EDGE_UPSTREAM__SECRET_KEY -> upstream.secret_key. Variables that
	// name no key are skipped (IgnoredEnv): the kubelet sets EDGE_PORT and
	// the like for a Service named edge. Client credentials
	// (EDGE_AUTH__CLIENTS__<NAME>__...) address a list item by name;
	// applyClientEnv handles them.
	err := k.Load(env.Provider(".", env.Opt{Prefix: "EDGE_", TransformFunc: func(name, value string) (string, any) {
		key, ok := envKey(name)
		if !ok {
			return "", nil
		}
		src.env[key] = name
		return key, value
	}}), nil)
	if err != nil {
		return Config{}, src, nil, err
	}
	cfg, probs := decode(k, src)
	for key, name := range applyClientEnv(&cfg) {
		src.env[key] = name
	}
	probs = append(probs, readSecretFiles(&cfg, src)...)
	return cfg, src, probs, nil
}

// Parse is Load for YAML held in memory (tests, fuzzing), without the
// environment and without reading the files of *_file keys.
func Parse(yamlText []byte) (Config, error) {
	k := koanf.New(".")
	if err := k.Load(rawBytes(yamlText), yaml.Parser()); err != nil {
		return Config{}, err
	}
	cfg, probs := decode(k, sources{file: "config"})
	if len(probs) > 0 {
		return Config{}, probs.err(cfg.secrets())
	}
	return cfg, nil
}

type rawBytes []byte

func (b rawBytes) ReadBytes() ([]byte, error)    { return b, nil }
func (b rawBytes) Read() (map[string]any, error) { return nil, errors.New("not supported") }

// decode turns what k holds into a Config over the defaults. It goes on
// past a value it cannot read, so that every problem is listed; such a
// value keeps its default.
func decode(k *koanf.Koanf, src sources) (Config, problems) {
	cfg := Default()
	ttlRaw := k.Get("cache.ttl")
	clientsRaw := k.Get("auth.clients")
	accountsRaw := k.Get("upstream.accounts")
	swrRaw := k.Get("cache.stale_while_revalidate")
	k.Delete("cache.ttl")
	k.Delete("auth.clients")
	k.Delete("upstream.accounts")
	k.Delete("cache.stale_while_revalidate")
	dc := func(out any) *mapstructure.DecoderConfig {
		return &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				durationHook,
				mapstructure.StringToSliceHookFunc(",")),
			// The environment's values are all strings: "7.5" must read as
			// a number. Durations are the exception (durationHook).
			WeaklyTypedInput: true,
			ErrorUnused:      true, // unknown keys are an error
			TagName:          "koanf",
			Result:           out,
		}
	}
	var probs problems
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{DecoderConfig: dc(&cfg)}); err != nil {
		probs = append(probs, decodeProblems("", err, src)...)
	}
	if err := decodeInto(ttlRaw, &cfg.Cache.TTL, dc); err != nil {
		probs = append(probs, decodeProblems("cache.ttl", err, src)...)
	}
	if err := decodeWindows(swrRaw, &cfg.Cache.StaleWhileRevalidate, dc); err != nil {
		probs = append(probs, decodeProblems("cache.stale_while_revalidate", err, src)...)
	}
	if accountsRaw != nil {
		if err := decodeInto(accountsRaw, &cfg.Upstream.Accounts, dc); err != nil {
			probs = append(probs, decodeProblems("upstream.accounts", err, src)...)
		}
	}
	if clientsRaw != nil {
		cfg.Auth.Clients = nil
		if err := decodeInto(clientsRaw, &cfg.Auth.Clients, dc); err != nil {
			probs = append(probs, decodeProblems("auth.clients", err, src)...)
		}
	}
	return cfg, probs
}

// decodeWindows reads a per-class map into w, over its defaults, or a
// single duration for every class.
func decodeWindows(raw any, w *PerClass, dc func(any) *mapstructure.DecoderConfig) error {
	if _, isMap := raw.(map[string]any); raw == nil || isMap {
		return decodeInto(raw, w, dc)
	}
	var d struct {
		D time.Duration `koanf:"d"` // decodeProblems names it by its section
	}
	if err := decodeInto(map[string]any{"d": raw}, &d, dc); err != nil {
		return err
	}
	*w = SameForAll(d.D)
	return nil
}

func decodeInto(raw any, out any, dc func(any) *mapstructure.DecoderConfig) error {
	if raw == nil {
		return nil
	}
	d, err := mapstructure.NewDecoder(dc(out))
	if err != nil {
		return err
	}
	return d.Decode(raw)
}

// applyClientEnv sets client secrets from the environment, so none has to
// live in a file: EDGE_AUTH__CLIENTS__<NAME>__SECRET_KEY (and __API_KEY,
// __PASSPHRASE, and each with _FILE) for the client named <name>
// (case-insensitive). It returns the keys it set (auth.clients[i].api_key)
// with the variable that set each.
func applyClientEnv(cfg *Config) map[string]string {
	set := map[string]string{}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		i, field, ok := clientEnv(cfg, name)
		if !ok {
			continue
		}
		c := &cfg.Auth.Clients[i]
		*clientField(c, field) = value
		set[fmt.Sprintf("auth.clients[%d].%s", i, field)] = name
	}
	return set
}
