package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Purges reach the whole fleet through a log in Redis. A node that purges
// appends a record (a sequence number, the time it ran, the request) with
// one script; every node polls the sequence number and applies the records
// it has not seen to its own memory. The log keeps the newest records (up
// to PurgeKeep, for PurgeRetain): a node that missed records the log no
// longer holds, or whose Redis lost the log, cannot know what it missed and
// drops its whole memory cache instead.
//
// Entries in Redis are not rewritten by a purge (except the few a url or a
// hash names, deleted by key): every node judges an entry it reads from
// Redis by the records newer than the entry's answer (proxy/purgelog.go),
// so an entry stored before a purge that selects it is a miss (hard) or
// stale (soft) wherever it is read. When the log drops records for room,
// the floor rises to the newest of them: entries older than it are misses.
//
// Keys share the hash tag {purges}, so the script's keys live in one slot
// of a cluster:
//
//	<prefix>{purges}seq    INCR counter, the last sequence number given
//	<prefix>{purges}log    sorted set, score seq, member "seq at request"
//	<prefix>{purges}floor  unix ns
//	<prefix>{purges}id     who created the log: a Redis that lost its data
//	                       (restarted without persistence) has another one
var publish = rueidis.NewLuaScript(`
redis.call("SET", KEYS[4], ARGV[5], "NX")
local n = redis.call("INCR", KEYS[1])
redis.call("ZADD", KEYS[2], n, n .. " " .. ARGV[1] .. " " .. ARGV[2])
local over = redis.call("ZCARD", KEYS[2]) - tonumber(ARGV[3])
if over > 0 then
  local gone = redis.call("ZRANGE", KEYS[2], over - 1, over - 1)
  local at = string.match(gone[1], "^%d+ (%d+) ")
  local floor = redis.call("GET", KEYS[3])
  if not floor or #at > #floor or (#at == #floor and at > floor) then
    redis.call("SET", KEYS[3], at)
  end
  redis.call("ZREMRANGEBYRANK", KEYS[2], 0, over - 1)
end
redis.call("PEXPIRE", KEYS[2], ARGV[4])
redis.call("PEXPIRE", KEYS[3], ARGV[4])
return n
`)

// purgeWatch is what a node does with the fleet's purges (WatchPurges).
type purgeWatch struct {
	apply func(at int64, request []byte, live bool)
	lost  func()
	floor func(at int64)
}

// purgeState is a node's place in the fleet's purge log.
type purgeState struct {
	mu      sync.Mutex
	watch   *purgeWatch
	started int64          // unix ns the node began watching
	last    int64          // last sequence number applied; -1: none read yet
	id      string         // the log's id when last read
	own     map[int64]bool // records this node published (applied already)
}

func (r *Redis) purgeKey(name string) string { return r.cfg.Prefix + "{purges}" + name }

// PublishPurge appends a purge to the fleet's log and deletes the Redis
// entries of keys (hard) or counts them (soft). request is the purge as
// the nodes will read it; retain is how long records are kept (the
// longest lifetime of an entry). It returns the record's sequence number
// and the entries of keys found in Redis.
func (r *Redis) PublishPurge(at int64, request []byte, keys []string, soft bool, retain time.Duration) (seq int64, found int, err error) {
	c := r.live()
	if c == nil {
		return 0, 0, errors.New("shared tier unreachable")
	}
	ps := &r.purges
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	id := strconv.FormatUint(rand.Uint64(), 36)
	seq, err = publish.Exec(ctx, c, []string{r.purgeKey("seq"), r.purgeKey("log"), r.purgeKey("floor"), r.purgeKey("id")},
		[]string{strconv.FormatInt(at, 10), string(request), strconv.Itoa(r.purgeKeep()), strconv.FormatInt(retain.Milliseconds()+1, 10), id}).AsInt64()
	if !r.result(opSet, err) {
		return 0, 0, err
	}
	if ps.own == nil {
		ps.own = map[int64]bool{}
	}
	ps.own[seq] = true
	if len(keys) == 0 {
		return seq, 0, nil
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		if soft {
			cmds[i] = c.B().Exists().Key(r.entryKey(k)).Build()
		} else {
			cmds[i] = c.B().Del().Key(r.entryKey(k)).Build()
		}
	}
	for _, res := range c.DoMulti(ctx, cmds...) {
		n, err := res.AsInt64()
		if !r.result(opSet, err) {
			return seq, found, err
		}
		found += int(n)
	}
	return seq, found, nil
}

func (r *Redis) purgeKeep() int {
	if r.cfg.PurgeKeep > 0 {
		return r.cfg.PurgeKeep
	}
	return 10_000
}

func (r *Redis) purgePoll() time.Duration {
	if r.cfg.PurgePoll > 0 {
		return r.cfg.PurgePoll
	}
	return 200 * time.Millisecond
}

// WatchPurges starts following the fleet's purge log: every PurgePoll,
// and at once when the node reconnects to Redis, before it uses Redis
// again. Call it once; Close stops it.
//
// apply takes a record published by another node (or, with live false,
// one published before this node began watching: to be remembered for
// judging entries read from Redis, not applied to a memory that was empty
// then). lost says records this node should have applied are gone: it
// must drop its memory cache. floor says entries whose answers are older
// than at are purged.
func (r *Redis) WatchPurges(apply func(at int64, request []byte, live bool), lost func(), floor func(at int64)) {
	ps := &r.purges
	ps.mu.Lock()
	ps.watch, ps.started, ps.last = &purgeWatch{apply, lost, floor}, time.Now().UnixNano(), -1
	ps.mu.Unlock()
	if c := r.live(); c != nil {
		r.syncPurges(c)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(r.purgePoll())
		defer t.Stop()
		for {
			select {
			case <-r.closed:
				return
			case <-t.C:
			}
			if c := r.live(); c != nil {
				r.syncPurges(c)
			}
		}
	}()
}

// syncPurges applies the records newer than the last one applied. It
// reports whether Redis answered.
func (r *Redis) syncPurges(c rueidis.Client) bool {
	ps := &r.purges
	ps.mu.Lock()
	defer ps.mu.Unlock()
	w := ps.watch
	if w == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	res := c.DoMulti(ctx, c.B().Get().Key(r.purgeKey("seq")).Build(), c.B().Get().Key(r.purgeKey("floor")).Build(),
		c.B().Get().Key(r.purgeKey("id")).Build())
	seq, err := res[0].AsInt64()
	if !r.purgeRead(err) {
		return false
	}
	floor, err := res[1].AsInt64()
	if !r.purgeRead(err) {
		return false
	}
	id, err := res[2].ToString()
	if !r.purgeRead(err) {
		return false
	}
	if floor > 0 {
		w.floor(floor)
	}
	// seq and id are nil before the first purge, or after Redis lost its data.
	switch {
	case ps.last < 0: // first read: everything retained is remembered
	case ps.id != "" && id != ps.id || seq < ps.last:
		r.log.Warn("the purge log is not the one this node followed (Redis lost its data?); dropping the memory cache",
			"seq", seq, "applied", ps.last)
		w.lost()
		ps.last = 0
	case seq == ps.last:
		return true
	}
	ps.id = id
	recs, err := c.Do(ctx, c.B().Zrangebyscore().Key(r.purgeKey("log")).Min("("+strconv.FormatInt(max(ps.last, 0), 10)).Max("+inf").Build()).AsStrSlice()
	if !r.purgeRead(err) {
		return false
	}
	first := true
	for _, rec := range recs {
		n, at, req, ok := parseRecord(rec)
		if !ok {
			r.log.Warn("purge record unreadable; skipped", "record_bytes", len(rec))
			continue
		}
		if first && ps.last >= 0 && n > ps.last+1 {
			r.log.Warn("missed purges the log no longer holds; dropping the memory cache", "applied", ps.last, "oldest_kept", n)
			w.lost()
		}
		first = false
		if !ps.own[n] {
			w.apply(at, req, ps.last >= 0 || at >= ps.started)
		}
		delete(ps.own, n)
	}
	if first && ps.last >= 0 && seq > ps.last {
		r.log.Warn("missed purges the log no longer holds; dropping the memory cache", "applied", ps.last, "seq", seq)
		w.lost()
	}
	for n := range ps.own {
		if n <= seq { // read above, or trimmed before it could be
			delete(ps.own, n)
		}
	}
	ps.last = seq
	return true
}

// purgeRead reports whether a read of the purge log was answered (nil
// included). Only failures are counted in shared_requests_total, as gets:
// the polls would swamp the counts of the cache's own gets.
func (r *Redis) purgeRead(err error) bool {
	if err == nil || rueidis.IsRedisNil(err) {
		return true
	}
	return r.result(opGet, err)
}

// parseRecord splits "seq at request".
func parseRecord(s string) (seq, at int64, req []byte, ok bool) {
	a, rest, ok1 := strings.Cut(s, " ")
	b, req2, ok2 := strings.Cut(rest, " ")
	var err1, err2 error
	seq, err1 = strconv.ParseInt(a, 10, 64)
	at, err2 = strconv.ParseInt(b, 10, 64)
	return seq, at, []byte(req2), ok1 && ok2 && err1 == nil && err2 == nil
}

// catchUpPurges runs on reconnection, before the node uses Redis again:
// purges published while it was cut off are applied first, so it never
// serves an entry the fleet purged meanwhile.
func (r *Redis) catchUpPurges() error {
	c := r.client.Load()
	if c == nil {
		return errors.New("no client")
	}
	if !r.syncPurges(*c) {
		return errors.New("purge log unreadable")
	}
	return nil
}
