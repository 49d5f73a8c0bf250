// Package fleet is explorer-edge's shared tier on Redis (docs/fleet.md): a second cache tier behind every node's Ristretto, one upstream budget
// for the whole fleet, and a fetch lock per key, so that a fill by any node
// is a hit for all and N nodes spend one quota.
//
// Redis is an optimisation, never a dependency: every round trip is bounded
// by Config.Timeout, and after a failure the node skips Redis altogether
// (gets miss, sets drop, locks are granted at once, the budget spends a local
// share) until a background probe finds it answering again.
package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"explorer-edge/cache"
	"explorer-edge/metrics"
)

// Config is where the shared tier lives and how long a node waits for it.
type Config struct {
	Addrs    []string // seed addresses: one Redis, or any nodes of a cluster
	Username string   // ACL user; empty = default
	Password string   // never logged
	TLS      bool
	Cluster  bool          // Redis Cluster: slots learnt from the seeds
	Timeout  time.Duration // bound on one round trip; past it the node goes on alone
	LockTTL  time.Duration // lifetime of a fetch lock: a dead holder's lock frees itself
	LockWait time.Duration // how long a node waits for another node's fetch
	Prefix   string        // of every key, to share one Redis between deployments
	// Rate and Burst are the upstream quota of the whole fleet. LocalShare
	// is the fraction of both a node spends on its own while Redis is down.
	Rate       float64
	Burst      int
	LocalShare float64
	// MaxBody bounds the body an entry read from Redis may hold or inflate
	// to (upstream.max_response_bytes); a larger one is a miss. 0 = 8 MiB.
	MaxBody int
	// Backoff is how long a node leaves Redis alone after a failure before
	// probing it again. 0 = one second.
	Backoff time.Duration
	// PurgePoll is how often a node reads the fleet's purge log (purge.go);
	// 0 = 200ms. PurgeKeep bounds the records the log keeps; 0 = 10000.
	PurgePoll time.Duration
	PurgeKeep int
}

// Operations and outcomes, the label values of shared_requests_total.
const (
	opGet = iota
	opSet
	opLock
	opRate
	numOps
)

const (
	outOK = iota
	outMiss
	outError
	outTimeout
	numOuts
)

var (
	opNames  = [numOps]string{"get", "set", "lock", "rate"}
	outNames = [numOuts]string{"ok", "miss", "error", "timeout"}
)

// Redis is the shared tier of one node. It implements proxy.Tier; its
// Budget is the proxy's upstream budget. Create it with New.
type Redis struct {
	cfg    Config
	opt    rueidis.ClientOption
	client atomic.Pointer[rueidis.Client] // nil until a first connection succeeds
	down   atomic.Bool                    // Redis is skipped; a probe runs
	budget *Budget
	log    *slog.Logger

	m        *metrics.Metrics
	requests [numOps][numOuts]prometheus.Counter
	filled   prometheus.Counter // lock waits that ended with the other node's answer
	timedOut prometheus.Counter // lock waits that ran out of lock_wait

	purges purgeState // this node's place in the fleet's purge log (purge.go)
	events eventWatch // the event stream's subscription (stream.go)

	// cdn: this node sends purges to a CDN, or may (cdn.go): it reports
	// how far it has read the purge log; cdnToken names it there.
	cdnOn    atomic.Bool
	cdnOnce  sync.Once
	cdnToken string

	closed chan struct{}
	wg     sync.WaitGroup // the probe, the purge watch
}

// New connects to Redis. Redis being down is not an error: the node starts
// alone and joins the fleet when a probe reaches it. It fails only on a
// configuration it cannot use.
func New(cfg Config, m *metrics.Metrics, log *slog.Logger) (*Redis, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 8 << 20
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Redis{cfg: cfg, m: m, log: log, closed: make(chan struct{})}
	for op := range numOps {
		for out := range numOuts {
			r.requests[op][out] = m.SharedRequests.WithLabelValues(opNames[op], outNames[out])
		}
	}
	r.filled = m.SharedLockWait.WithLabelValues("filled")
	r.timedOut = m.SharedLockWait.WithLabelValues("timeout")
	r.opt = clientOption(cfg)
	r.budget = newBudget(r, "budget", cfg.Rate, cfg.Burst)
	m.SharedUp.Set(0)
	if err := r.probe(); err != nil {
		log.Warn("shared tier unreachable; serving alone until it answers", "redis", cfg.Addrs, "err", err)
		r.markDown()
	} else {
		m.SharedUp.Set(1)
		log.Info("shared tier connected", "redis", cfg.Addrs, "cluster", cfg.Cluster)
	}
	return r, nil
}

// check refuses a configuration New cannot use.
func (cfg Config) check() error {
	if len(cfg.Addrs) == 0 {
		return errors.New("fleet: no Redis address")
	}
	if cfg.Timeout <= 0 || cfg.LockTTL <= 0 || cfg.LockWait <= 0 {
		return errors.New("fleet: timeout, lock_ttl and lock_wait must be > 0")
	}
	if cfg.Rate <= 0 || cfg.Burst < 1 || cfg.LocalShare <= 0 || cfg.LocalShare > 1 {
		return fmt.Errorf("fleet: rate %v, burst %d, local share %v out of range", cfg.Rate, cfg.Burst, cfg.LocalShare)
	}
	if cfg.Cluster && strings.ContainsAny(cfg.Prefix, "{}") {
		// The key's own hash tag spreads entries over the slots; a brace in
		// the prefix would make it the tag of every key.
		return fmt.Errorf("fleet: prefix %q must not contain braces in cluster mode", cfg.Prefix)
	}
	return nil
}

// clientOption is how the node's client talks to Redis.
func clientOption(cfg Config) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress: cfg.Addrs,
		Username:    cfg.Username,
		Password:    cfg.Password,
		// Every node keeps its hot set in Ristretto already; server-assisted
		// client-side caching would be a third copy of it.
		DisableCache: true,
		// A failed command is not retried inside the client: the node goes
		// on alone at once, and the probe decides when Redis is back.
		DisableRetry: true,
		// A single Redis is used as one even where a seed was expected to be
		// a cluster, and the client exists while Redis is down (it redials).
		ForceSingleClient: !cfg.Cluster,
		// Connecting (TCP, TLS, HELLO, AUTH) may take longer than one
		// command: it happens once, in the probe, not on a request.
		Dialer:           net.Dialer{Timeout: max(cfg.Timeout, time.Second), KeepAlive: 15 * time.Second},
		ConnWriteTimeout: max(10*cfg.Timeout, 3*time.Second),
		ClientName:       "explorer-edge",
	}
	if cfg.TLS {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return opt
}

// rejected counts a value read from Redis that the edge refused.
func (r *Redis) rejected(reason string) { r.m.SharedRejected.WithLabelValues(reason).Inc() }

// Budget is the fleet's shared upstream budget (proxy.Options.Budget).
func (r *Redis) Budget() *Budget { return r.budget }

// Close stops the probe and closes the connections.
func (r *Redis) Close() {
	close(r.closed)
	r.wg.Wait()
	if c := r.client.Load(); c != nil {
		(*c).Close()
	}
}

// live returns the client, or nil while the node goes on alone.
func (r *Redis) live() rueidis.Client {
	if r.down.Load() {
		return nil
	}
	if c := r.client.Load(); c != nil {
		return *c
	}
	return nil
}

// result counts one operation and reports whether Redis answered; a
// failure takes the node off Redis until the probe finds it again.
func (r *Redis) result(op int, err error) bool {
	switch {
	case err == nil:
		r.requests[op][outOK].Inc()
		return true
	case rueidis.IsRedisNil(err):
		r.requests[op][outMiss].Inc()
		return true
	case isWrongType(err):
		// A value of another type where ours goes was written by someone
		// else: a miss, not a Redis that is down.
		r.requests[op][outMiss].Inc()
		r.rejected("entry")
		return true
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		r.requests[op][outTimeout].Inc()
	default:
		r.requests[op][outError].Inc()
	}
	if r.markDown() {
		r.log.Warn("shared tier failed; serving alone", "op", opNames[op], "err", err, "retry_in", r.cfg.Backoff)
	}
	return false
}

func isWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// markDown takes the node off Redis and starts the probe, once per outage.
func (r *Redis) markDown() bool {
	if !r.down.CompareAndSwap(false, true) {
		return false
	}
	r.m.SharedUp.Set(0)
	select {
	case <-r.closed:
		return true // closing: no probe
	default:
	}
	r.wg.Add(1)
	go r.reconnect()
	return true
}

// reconnect probes Redis every Backoff until it answers within Timeout.
func (r *Redis) reconnect() {
	defer r.wg.Done()
	t := time.NewTimer(r.cfg.Backoff)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
			return
		case <-t.C:
		}
		err := r.probe()
		if err == nil {
			err = r.catchUpPurges() // before serving from Redis again
		}
		if err != nil {
			r.log.Debug("shared tier probe failed", "err", err)
			t.Reset(r.cfg.Backoff)
			continue
		}
		r.down.Store(false)
		r.m.SharedUp.Set(1)
		r.log.Info("shared tier answers again; fleet mode resumed")
		return
	}
}

// probe connects if need be, then PINGs within Timeout: a Redis that answers
// slower than requests may wait is as good as down.
func (r *Redis) probe() error {
	c := r.client.Load()
	if c == nil {
		// A single-node client comes back even when its first dial failed
		// (ForceSingleClient), and redials on use: keep it.
		nc, err := rueidis.NewClient(r.opt)
		if nc != nil {
			c = &nc
			r.client.Store(c)
		}
		if err != nil {
			return err
		}
	}
	// The first PING may redial (a restarted Redis); that is not timed.
	dial, cancel := context.WithTimeout(context.Background(), r.opt.Dialer.Timeout)
	err := (*c).Do(dial, (*c).B().Ping().Build()).Error()
	cancel()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	return (*c).Do(ctx, (*c).B().Ping().Build()).Error()
}

// entryKey and lockKey share a hash tag, so a key and its lock live in one
// cluster slot (and entries spread over all slots).
func (r *Redis) entryKey(key string) string { return r.cfg.Prefix + "{" + key + "}" }
func (r *Redis) lockKey(key string) string  { return r.cfg.Prefix + "{" + key + "}:lock" }

// Get returns the entry for key if it is usable at now (fresh, or within
// one of its stale windows), else nil.
func (r *Redis) Get(key string, now time.Time) *cache.Entry {
	return r.GetMany([]string{key}, now)[0]
}

// GetMany is Get for several keys, pipelined: one round trip (one per
// cluster node holding some of them) instead of one per key.
func (r *Redis) GetMany(keys []string, now time.Time) []*cache.Entry {
	entries := make([]*cache.Entry, len(keys))
	c := r.live()
	if c == nil || len(keys) == 0 {
		return entries
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Get().Key(r.entryKey(k)).Build()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	for i, res := range c.DoMulti(ctx, cmds...) {
		b, err := res.AsBytes()
		if !r.result(opGet, err) || err != nil {
			continue
		}
		if e := r.entry(keys[i], b); e.StateAt(now.UnixNano()) != cache.Missing {
			entries[i] = e
		}
	}
	return entries
}

// entry decodes a stored value of key; one it cannot read is a miss.
func (r *Redis) entry(key string, b []byte) *cache.Entry {
	e, err := decode(b, r.cfg.MaxBody)
	if err == nil && e.Key != key {
		err = errors.New("entry holds another key")
	}
	if err != nil {
		if !errors.Is(err, errVersion) { // another version's entry is no attack
			r.rejected("entry")
		}
		r.log.Debug("shared entry unreadable; treated as a miss", "key", key, "err", err)
		return nil
	}
	return e
}

// Set stores e until its last usable moment (the later of its stale
// windows), the same lifetime it has in Ristretto.
func (r *Redis) Set(e *cache.Entry, now time.Time) {
	ttl := time.Duration(e.Fresh + max(e.StaleWhileRevalidate, e.StaleIfError) - now.UnixNano())
	if ttl < time.Millisecond {
		return
	}
	c := r.live()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	cmd := c.B().Set().Key(r.entryKey(e.Key)).Value(rueidis.BinaryString(encode(e))).Px(ttl).Build()
	r.result(opSet, c.Do(ctx, cmd).Error())
}

// release deletes a lock only while it still holds our token: a holder
// slower than lock_ttl must not free the lock of the node that took over.
var release = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// boundLock deletes a lock without an expiry and shortens one longer than
// lock_ttl (ARGV[1], milliseconds), atomically.
var boundLock = rueidis.NewLuaScript(`local t = redis.call("PTTL", KEYS[1])
if t == -1 then return redis.call("DEL", KEYS[1]) end
if t > tonumber(ARGV[1]) then return redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
return 0`)

func noUnlock() {}

// Lock takes the fetch lock of key for this node, or waits for the node
// that holds it: it polls for that node's answer and returns it as filled.
// When the holder gives up without an answer (an error, an uncacheable
// envelope) or dies (its lock expires), the first poller to see the lock
// free takes it over. Lock returns within lock_wait (plus one round trip),
// after which the caller fetches on its own; while Redis is down it returns
// at once. unlock is never nil and may be called any number of times.
func (r *Redis) Lock(key string, now func() time.Time) (unlock func(), filled *cache.Entry) {
	c := r.live()
	if c == nil {
		return noUnlock, nil
	}
	lk, ek := r.lockKey(key), r.entryKey(key)
	token := strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	deadline := time.Now().Add(r.cfg.LockWait)
	waited := false
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 20*time.Millisecond) {
		held, e, ok := r.tryLock(c, lk, ek, key, token)
		if !ok {
			return noUnlock, nil
		}
		if e.StateAt(now().UnixNano()) == cache.Fresh {
			if held { // the holder stored its answer and left just before we came
				r.unlock(c, lk, token)
			}
			if waited {
				r.filled.Inc()
			}
			return noUnlock, e
		}
		if held {
			var once atomic.Bool
			return func() {
				if once.CompareAndSwap(false, true) {
					r.unlock(c, lk, token)
				}
			}, nil
		}
		waited = true
		left := time.Until(deadline)
		if left <= 0 {
			r.timedOut.Inc()
			return noUnlock, nil
		}
		// Jitter keeps the waiting nodes from polling in step.
		time.Sleep(min(backoff/2+rand.N(backoff/2+1), left))
	}
}

// tryLock sets the lock if it is free, then reads the entry, in one round
// trip. In that order: a holder stores before it unlocks, so whoever finds
// the lock free also finds the holder's answer.
func (r *Redis) tryLock(c rueidis.Client, lk, ek, key, token string) (held bool, e *cache.Entry, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	res := c.DoMulti(ctx,
		c.B().Set().Key(lk).Value(token).Nx().Px(r.cfg.LockTTL).Build(),
		c.B().Get().Key(ek).Build(),
		c.B().Pttl().Key(lk).Build())
	err := res[0].Error()
	if !r.result(opLock, err) {
		return false, nil, false
	}
	held = err == nil
	// Every lock a node sets expires within lock_ttl. One without an
	// expiry, or with a longer one, was written by someone else and would
	// hold every node's fetch of this key for lock_wait: it is bounded.
	if ttl, perr := res[2].AsInt64(); !held && perr == nil && (ttl == -1 || ttl > r.cfg.LockTTL.Milliseconds()) {
		r.rejected("lock")
		r.log.Warn("shared fetch lock without a bounded expiry; repaired", "key", lk)
		ctx2, cancel2 := context.WithTimeout(context.Background(), r.cfg.Timeout)
		boundLock.Exec(ctx2, c, []string{lk}, []string{strconv.FormatInt(r.cfg.LockTTL.Milliseconds(), 10)})
		cancel2()
	}
	b, err := res[1].AsBytes()
	if !r.result(opGet, err) {
		if held {
			r.unlock(c, lk, token)
		}
		return false, nil, false
	}
	if err == nil {
		e = r.entry(key, b)
	}
	return held, e, true
}

// unlock releases a lock this node holds. While the node is off Redis it
// still tries, in the background: a lock left to expire would hold the
// other nodes' requests for lock_wait.
func (r *Redis) unlock(c rueidis.Client, lk, token string) {
	do := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		defer cancel()
		return release.Exec(ctx, c, []string{lk}, []string{token}).Error()
	}
	if r.down.Load() {
		go do()
		return
	}
	r.result(opLock, do())
}
