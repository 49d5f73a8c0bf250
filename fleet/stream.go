package fleet

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The event stream's share of the fleet (docs/stream.md): one node per
// chain polls the upstream's newest block page, holding a lease in Redis
// that it renews at every poll, and publishes what it announces on a
// channel every node subscribes to, so that N nodes cost one poll per
// interval. Redis being down is the shared tier's usual case: Lease says
// so (ok false) and the node polls alone, within its local share of the
// budget.

// holdLease takes the lease (KEYS[1]) for token ARGV[1] when it is free,
// or renews it when token holds it, for ARGV[2] milliseconds; 1 when
// token holds it now.
var holdLease = rueidis.NewLuaScript(`local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then redis.call("PEXPIRE", KEYS[1], ARGV[2]) return 1 end
if not v then redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2]) return 1 end
return 0`)

// eventWatch is the state of WatchEvents' subscription.
type eventWatch struct {
	watching   atomic.Bool // WatchEvents was called
	subscribed atomic.Bool // Redis confirmed the subscription, and it holds
}

func (r *Redis) leaseKey(name string) string { return r.cfg.Prefix + "{stream}:lease:" + name }
func (r *Redis) eventChannel() string        { return r.cfg.Prefix + "{stream}:events" }

// Lease takes or renews the lease name for token, for ttl. held says this
// token holds it now; ok is false when Redis did not answer, or when this
// node watches the events and is not subscribed (yet, or again after an
// outage): it would not hear the holder's, so it polls alone. Counted as
// lock operations.
func (r *Redis) Lease(name, token string, ttl time.Duration) (held, ok bool) {
	c := r.live()
	if c == nil || (r.events.watching.Load() && !r.events.subscribed.Load()) {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	n, err := holdLease.Exec(ctx, c, []string{r.leaseKey(name)}, []string{token, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
	if !r.result(opLock, err) {
		return false, false
	}
	return n == 1, true
}

// ReleaseLease gives up the lease name if token holds it, so that another
// node takes it at its next poll rather than when it expires.
func (r *Redis) ReleaseLease(name, token string) {
	if c := r.live(); c != nil {
		r.unlock(c, r.leaseKey(name), token)
	}
}

// PublishEvent sends msg to every node's WatchEvents; it reports whether
// Redis took it. Counted as set operations.
func (r *Redis) PublishEvent(msg []byte) bool {
	c := r.live()
	if c == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	err := c.Do(ctx, c.B().Publish().Channel(r.eventChannel()).Message(rueidis.BinaryString(msg)).Build()).Error()
	return r.result(opSet, err)
}

// WatchEvents calls fn with every message PublishEvent sent (this node's
// own included), from one goroutine, until Close. While Redis is down or
// the subscription breaks it subscribes again every Backoff; what was
// published meanwhile is not seen (the node polls alone then).
func (r *Redis) WatchEvents(fn func(msg []byte)) {
	ctx, cancel := context.WithCancel(context.Background())
	r.events.watching.Store(true)
	hooked := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		r.events.subscribed.Store(s.Kind == "subscribe")
	})
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		<-r.closed
		cancel()
	}()
	go func() {
		defer r.wg.Done()
		for ctx.Err() == nil {
			if c := r.live(); c != nil {
				c.Receive(hooked, c.B().Subscribe().Channel(r.eventChannel()).Build(), func(m rueidis.PubSubMessage) {
					fn([]byte(m.Message))
				})
				r.events.subscribed.Store(false)
			}
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.Backoff):
			}
		}
	}()
}

// The newest-page questions clients asked, shared between the nodes: each
// node adds the ones its clients asked to a sorted set per chain
// (<prefix>{stream}:variants:<CHAIN>, scored by the time asked, Unix
// milliseconds), and the polling node refreshes them with each new head,
// whichever node they were asked of.

func (r *Redis) variantsKey(chain string) string { return r.cfg.Prefix + "{stream}:variants:" + chain }

// ShareVariants adds keys, asked of this node at at, to chain's record,
// and drops from it what was asked before at-keep and all but the newest
// max. It reports whether Redis took them. Counted as set operations.
func (r *Redis) ShareVariants(chain string, keys []string, at time.Time, keep time.Duration, max int) bool {
	c := r.live()
	if c == nil || len(keys) == 0 {
		return false
	}
	k := r.variantsKey(chain)
	add := c.B().Zadd().Key(k).ScoreMember()
	for _, key := range keys {
		add = add.ScoreMember(float64(at.UnixMilli()), key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	for _, res := range c.DoMulti(ctx,
		add.Build(),
		c.B().Zremrangebyscore().Key(k).Min("-inf").Max("("+strconv.FormatInt(at.Add(-keep).UnixMilli(), 10)).Build(),
		c.B().Zremrangebyrank().Key(k).Start(0).Stop(int64(-max-1)).Build(),
		c.B().Pexpire().Key(k).Milliseconds(keep.Milliseconds()).Build(),
	) {
		if !r.result(opSet, res.Error()) {
			return false
		}
	}
	return true
}

// Variants are up to n keys of chain's record asked since since, the most
// recent first; ok is false when Redis did not answer. What they name is
// the caller's to check. Counted as get operations.
func (r *Redis) Variants(chain string, since time.Time, n int) (keys []string, ok bool) {
	c := r.live()
	if c == nil {
		return nil, false
	}
	if n <= 0 {
		return nil, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	keys, err := c.Do(ctx, c.B().Zrange().Key(r.variantsKey(chain)).Min("+inf").Max(strconv.FormatInt(since.UnixMilli(), 10)).
		Byscore().Rev().Limit(0, int64(n)).Build()).AsStrSlice()
	if !r.result(opGet, err) {
		return nil, false
	}
	return keys, true
}
