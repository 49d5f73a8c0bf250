package fleet

import (
	"context"
	"errors"
	"fmt"
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
// Redis by the records newer than the entry's answer (proxy/purge/log.go),
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
//
// What Redis holds about purges is not trusted more than its entries are:
// a node reads the log a page at a time (purgePage records, each cut to
// its size when over MaxPurgeRecord, by one script that also reads the
// counter, the floor and the id, so what it reads is one state of the
// log), refuses what no node can have published and says so through
// WatchPurges' refused (counted in shared_rejected_total{reason}).
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

// readPurges reads one state of the log: the counter, the floor and the
// id, and up to ARGV[2] records numbered after ARGV[1] and at most the
// counter, as score, size, and the record itself ("" when it is over
// ARGV[3] bytes: what no node publishes is not carried). A key of
// another type reads as absent.
//
//	KEYS: seq, floor, id, log   ARGV: after (exclusive), page, max bytes
var readPurges = rueidis.NewLuaScript(`
local function get(k)
  local v = redis.pcall("GET", k)
  if type(v) ~= "string" then return false end
  return v
end
local seq = get(KEYS[1])
local out = {seq, get(KEYS[2]), get(KEYS[3])}
if not seq or #seq > 16 or not string.match(seq, "^%d+$") or tonumber(seq) > 9007199254740992 then return out end
local recs = redis.pcall("ZRANGEBYSCORE", KEYS[4], ARGV[1], seq, "WITHSCORES", "LIMIT", 0, tonumber(ARGV[2]))
if type(recs) ~= "table" or recs.err then return out end
local bound = tonumber(ARGV[3])
for i = 1, #recs, 2 do
  local m = recs[i]
  out[#out + 1] = recs[i + 1]
  out[#out + 1] = #m
  if #m > bound then m = "" end
  out[#out + 1] = m
end
return out
`)

// MaxPurgeRecord bounds a record of the log ("seq at request") a node
// reads or publishes. The longest purge is a url purge of a per-hash
// route with its 20 hashes: its request, the normalized key as JSON, is
// under 1.5 KB; 4 KiB leaves room and keeps a page of records (purgePage)
// under half a megabyte whatever Redis holds.
const MaxPurgeRecord = 4 << 10

// purgePage is how many records one read of the log takes. A node reads
// pages until it has caught up, at most purgeKeep/purgePage+1 of them in
// one poll (a log of the fleet's own is read whole), each bounded by
// Timeout: a log however large cannot make a read time out.
const purgePage = 100

// purgeWatch is what a node does with the fleet's purges (WatchPurges).
type purgeWatch struct {
	apply   func(seq, at int64, request []byte, live bool)
	lost    func()
	floor   func(at int64)
	refused func(reason, why string)
}

// purgeState is a node's place in the fleet's purge log.
type purgeState struct {
	mu      sync.Mutex
	watch   *purgeWatch
	started int64          // unix ns the node began watching
	last    int64          // last sequence number read; -1: none read yet
	id      string         // the log's id when last read
	own     map[int64]bool // records this node published (applied already)
	// The last counter and floor refused as no number: each is said once.
	badSeq, badFloor string
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
	if n := 40 + len(request); n > MaxPurgeRecord {
		return 0, 0, fmt.Errorf("purge record of %d bytes, over %d", n, MaxPurgeRecord)
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
// apply takes a record published by another node, with its number (or, with live false,
// one published before this node began watching: to be remembered for
// judging entries read from Redis, not applied to a memory that was empty
// then). lost says records this node should have applied are gone: it
// must drop its memory cache. floor says entries whose answers are older
// than at are purged: it is called on every read with what Redis holds
// (0: none), which may be less than before. refused says what Redis held
// that no node publishes (reason "purge_seq", "purge_floor" or
// "purge_record"): the node counts it and logs it, sampled.
func (r *Redis) WatchPurges(apply func(seq, at int64, request []byte, live bool), lost func(), floor func(at int64), refused func(reason, why string)) {
	ps := &r.purges
	ps.mu.Lock()
	ps.watch, ps.started, ps.last = &purgeWatch{apply, lost, floor, refused}, time.Now().UnixNano(), -1
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
			if c := r.live(); c != nil && r.syncPurges(c) {
				r.reportApplied(c)
			}
		}
	}()
}

// syncPurges applies the records newer than the last one read, a page at
// a time, each record once. It reports whether Redis answered.
func (r *Redis) syncPurges(c rueidis.Client) bool {
	ps := &r.purges
	ps.mu.Lock()
	defer ps.mu.Unlock()
	w := ps.watch
	if w == nil {
		return true
	}
	initial := ps.last < 0 // records published before the node watched: remembered
	after := "(" + strconv.FormatInt(max(ps.last, 0), 10)
	for page := 0; page <= r.purgeKeep()/purgePage; page++ {
		next, done, ok := r.syncPage(c, w, after, page == 0, initial)
		if !ok || done {
			return ok
		}
		after = next
	}
	return true // the rest at the next poll
}

// syncPage reads one page of the log, after the score after (exclusive),
// and applies it. It returns where the next page starts, and whether the
// log was read to its end.
func (r *Redis) syncPage(c rueidis.Client, w *purgeWatch, after string, first, initial bool) (next string, done, ok bool) {
	ps := &r.purges
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	vals, err := readPurges.Exec(ctx, c, []string{r.purgeKey("seq"), r.purgeKey("floor"), r.purgeKey("id"), r.purgeKey("log")},
		[]string{after, strconv.Itoa(purgePage), strconv.Itoa(MaxPurgeRecord)}).ToArray()
	if err != nil {
		return "", true, r.purgeRead(err)
	}
	if len(vals) < 3 || (len(vals)-3)%3 != 0 {
		return "", true, true // not this script's answer: nothing to apply
	}
	seq := r.purgeNumber(vals[0], "purge_seq", &ps.badSeq, w)
	id, _ := vals[2].ToString()
	if first {
		// Every read says what Redis holds, none included: the node's
		// floor follows it down as well as up.
		r.purgeFloor(vals[1], w)
		// seq and id are nil before the first purge, or after Redis lost its data.
		switch {
		case ps.last < 0: // first read: everything retained is remembered
		case ps.id != "" && id != ps.id || seq < ps.last:
			r.log.Warn("the purge log is not the one this node followed (Redis lost its data?); dropping the memory cache",
				"seq", seq, "applied", ps.last)
			w.lost()
			ps.last, ps.id = 0, id
			return "(0", false, true // this log, from its start
		case seq == ps.last:
			return "", true, true
		}
		ps.id = id
	}
	recs := vals[3:]
	for i := 0; i < len(recs); i += 3 {
		score, _ := recs[i].ToString()
		size, _ := recs[i+1].AsInt64()
		rec, _ := recs[i+2].ToString()
		next = "(" + score
		r.applyRecord(w, score, size, rec, first && i == 0, initial)
	}
	if len(recs)/3 == purgePage {
		return next, false, true
	}
	r.caughtUp(w, seq, first && len(recs) == 0)
	return "", true, true
}

// purgeFloor hands the log's floor to the node: absent is 0; what is no
// number is refused (and said once for each such value).
func (r *Redis) purgeFloor(v rueidis.RedisMessage, w *purgeWatch) {
	ps := &r.purges
	f, err := v.ToString()
	if err != nil {
		w.floor(0)
		return
	}
	if n, err := strconv.ParseInt(f, 10, 64); err == nil {
		w.floor(n)
	} else if f != ps.badFloor {
		ps.badFloor = f
		w.refused("purge_floor", "not a number")
	}
}

// applyRecord applies one record of the log, numbered score and of size
// bytes (rec is "" when it was over MaxPurgeRecord), unless the node
// published it or no node could have. oldest says it is the first record
// a poll reads: it follows the last one read before, unless the log has
// dropped records the node never read.
func (r *Redis) applyRecord(w *purgeWatch, score string, size int64, rec string, oldest, initial bool) {
	ps := &r.purges
	n, err := strconv.ParseInt(score, 10, 64)
	if err != nil || n <= ps.last {
		// A number no publish gives (a fraction), or one read already
		// (a second record under one number): forged.
		w.refused("purge_record", "not a sequence number of its own: "+score)
		return
	}
	if oldest && ps.last >= 0 && n > ps.last+1 {
		r.log.Warn("missed purges the log no longer holds; dropping the memory cache", "applied", ps.last, "oldest_kept", n)
		w.lost()
	}
	ps.last = n
	_, own := ps.own[n]
	delete(ps.own, n)
	switch {
	case size > MaxPurgeRecord:
		w.refused("purge_record", "record of "+strconv.FormatInt(size, 10)+" bytes, over "+strconv.Itoa(MaxPurgeRecord))
		return
	case own:
		return
	}
	m, at, req, ok := parseRecord(rec)
	if !ok || m != n {
		w.refused("purge_record", "unreadable record of "+strconv.Itoa(len(rec))+" bytes")
		return
	}
	w.apply(n, at, req, !initial || at >= ps.started)
}

// caughtUp ends a poll that read the log to its end: every record up to
// seq is read. empty says the poll's first page held no record, so none
// showed whether records after the last one read were dropped.
func (r *Redis) caughtUp(w *purgeWatch, seq int64, empty bool) {
	ps := &r.purges
	if empty && ps.last >= 0 && seq > ps.last {
		r.log.Warn("missed purges the log no longer holds; dropping the memory cache", "applied", ps.last, "seq", seq)
		w.lost()
	}
	ps.last = max(ps.last, seq)
	for n := range ps.own {
		if n <= seq { // read above, or trimmed before it could be
			delete(ps.own, n)
		}
	}
}

// maxPurgeSeq is the largest sequence number a score holds exactly (2^53).
const maxPurgeSeq = 1 << 53

// purgeNumber reads the log's counter: absent is 0, and so is what is no
// number or one no score holds exactly, refused (and said once for each
// such value).
func (r *Redis) purgeNumber(v rueidis.RedisMessage, reason string, bad *string, w *purgeWatch) int64 {
	s, err := v.ToString()
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > maxPurgeSeq {
		if s != *bad {
			*bad = s
			w.refused(reason, "not a number")
		}
		return 0
	}
	return n
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
