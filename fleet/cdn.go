package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Behind a CDN (package cdn, docs/cdn.md) one node of the fleet at a time
// sends the purge log to the CDN: it holds a lease (Lease "cdn"), sends
// the records after a cursor kept in Redis, and moves the cursor as the
// CDN acknowledges each. A record is sent only once every live node has
// applied it, as each node reports after every read of the log:
//
//	<prefix>{purges}cdn:cursor   the last record the CDN acknowledged
//	<prefix>{purges}applied      hash: node -> "<last record read> <unix ms>"
//
// A node that dies holding the lease loses nothing: the next holder sends
// from the cursor; a record acknowledged but not yet marked is sent twice,
// which a purge bears.

// cdnLive is how recent a node's report must be for the node to count as
// live: a node that has not read the log for this long (dead, or cut off
// from Redis, and then it serves nothing from Redis) is not waited for.
func (r *Redis) cdnLive() time.Duration { return 10 * r.purgePoll() }

func (r *Redis) cdnNode() string {
	r.cdnOnce.Do(func() { r.cdnToken = strconv.FormatUint(rand.Uint64(), 36) })
	return r.cdnToken
}

// HoldCDNLease takes or renews the lease of sending to the CDN for ttl.
func (r *Redis) HoldCDNLease(ttl time.Duration) bool {
	r.cdnOn.Store(true)
	held, _ := r.Lease("cdn", r.cdnNode(), ttl)
	return held
}

// ReleaseCDNLease gives the lease up (a node closing): another node sends
// at once.
func (r *Redis) ReleaseCDNLease() { r.ReleaseLease("cdn", r.cdnNode()) }

// CDNCursor is the last record the CDN acknowledged (0: none).
func (r *Redis) CDNCursor() (int64, error) {
	c := r.live()
	if c == nil {
		return 0, errors.New("shared tier unreachable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	n, err := c.Do(ctx, c.B().Get().Key(r.purgeKey("cdn:cursor")).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, err
}

// raiseCursor sets the cursor to ARGV[1] unless it is past it already.
var raiseCursor = rueidis.NewLuaScript(`
local v = tonumber(redis.call("GET", KEYS[1]) or "0") or 0
if tonumber(ARGV[1]) > v then redis.call("SET", KEYS[1], ARGV[1]) end
return 0`)

// SetCDNCursor records that the records up to seq are acknowledged.
func (r *Redis) SetCDNCursor(seq int64) error {
	c := r.live()
	if c == nil {
		return errors.New("shared tier unreachable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	return raiseCursor.Exec(ctx, c, []string{r.purgeKey("cdn:cursor")}, []string{strconv.FormatInt(seq, 10)}).Error()
}

// reportApplied tells the fleet how far this node has read the purge
// log, once it sends to a CDN (every node does, when one does).
func (r *Redis) reportApplied(c rueidis.Client) {
	if !r.cdnOn.Load() {
		return
	}
	r.purges.mu.Lock()
	last := r.purges.last
	r.purges.mu.Unlock()
	if last < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	v := strconv.FormatInt(last, 10) + " " + strconv.FormatInt(time.Now().UnixMilli(), 10)
	c.Do(ctx, c.B().Hset().Key(r.purgeKey("applied")).FieldValue().FieldValue(r.cdnNode(), v).Build())
}

// AppliedByAll is the highest record every live node has read (and so
// applied): the lowest of their reports no older than cdnLive. Reports
// much older than that (nodes gone) are removed.
func (r *Redis) AppliedByAll() (int64, error) {
	c := r.live()
	if c == nil {
		return 0, errors.New("shared tier unreachable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	m, err := c.Do(ctx, c.B().Hgetall().Key(r.purgeKey("applied")).Build()).AsStrMap()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, err
	}
	now := time.Now().UnixMilli()
	lowest, found := int64(0), false
	for node, v := range m {
		a, b, _ := strings.Cut(v, " ")
		last, err1 := strconv.ParseInt(a, 10, 64)
		at, err2 := strconv.ParseInt(b, 10, 64)
		age := time.Duration(now-at) * time.Millisecond
		switch {
		case err1 != nil || err2 != nil || age > 100*r.cdnLive():
			c.Do(ctx, c.B().Hdel().Key(r.purgeKey("applied")).Field(node).Build())
			continue
		case age > r.cdnLive():
			continue
		}
		if !found || last < lowest {
			lowest, found = last, true
		}
	}
	if !found {
		return 0, errors.New("no node has reported reading the purge log")
	}
	return lowest, nil
}
