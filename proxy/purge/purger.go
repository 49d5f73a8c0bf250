package purge

import (
	"encoding/json"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"explorer-edge/cache"
	"explorer-edge/cache/disk"
	"explorer-edge/metrics"
	"explorer-edge/proxy/logsample"
)

// Fleet is a shared tier that carries purges (fleet.Redis, fleet/purge.go):
// a purge sent to any node is published in the fleet's purge log; every
// node applies the records of the others to its memory and keeps them all
// in its own Log, which judges every entry it reads from Redis. So an
// entry another node stored in Redis before a purge selecting it is a miss
// (hard) or stale (soft) on every node, without rewriting Redis.
type Fleet interface {
	// PublishPurge appends a purge to the fleet's log and deletes (hard)
	// or counts (soft) the Redis entries of keys.
	PublishPurge(at int64, request []byte, keys []string, soft bool, retain time.Duration) (seq int64, found int, err error)
	// WatchPurges follows the log: apply for the other nodes' purges,
	// lost when records were missed, floor with the fleet's floor at every
	// read (old answers are purged), refused for what Redis held that no
	// node publishes.
	WatchPurges(apply func(seq, at int64, request []byte, live bool), lost func(), floor func(at int64), refused func(reason, why string))
}

// Skew is how far ahead of this node's clock a time read from the fleet's
// purge log (a record's, the floor) may be: the nodes' clocks differ by
// milliseconds under NTP, and auth.max_skew gives clients 30 s. A time
// further ahead is no node's: taken, a floor ten years ahead would make
// every entry older than it (all of them) a miss for ten years, and a
// record would never age out. Such a time is refused, counted in
// shared_rejected_total{reason="purge_floor"} or {reason="purge_record"}.
// One within it costs at most 30 s of misses.
const Skew = 30 * time.Second

// Purger applies purges to this node's memory and disk tier, keeps them in
// its Log to judge answers stored or read after them, and (fleet mode)
// publishes them to the fleet and applies the fleet's. Create it with New.
type Purger struct {
	cache  *cache.Cache
	disk   *disk.Store // nil: no disk tier
	log    Log
	fleet  Fleet // nil on a single node
	m      *metrics.Metrics
	logger *slog.Logger
	o      Options
	// written orders stores with purges: Admit holds it for reading from
	// an answer's verdict until the answer is stored (in memory, and
	// queued for the disk tier: a channel send that never blocks), and a
	// purge takes it once, between logging itself and scanning memory and
	// deleting from the disk (barrier). So an answer is either judged by
	// the purge or stored before the purge looks: a purge that falls
	// between an answer's verdict and its store cannot leave it in memory,
	// nor in the file, where a restart would find it with no log to judge
	// it.
	written sync.RWMutex
	// floors counts the fleet's purge log reads (each hands over the
	// floor first); known: the log has been read to its end once (Known).
	floors atomic.Int64
	known  atomic.Bool
	// applied is told of every purge once this node has applied it
	// (OnApplied): the CDN's sender.
	applied atomic.Pointer[func(sel *Selector, at, seq int64)]
	// reorg is told of every reorganization purge of another node this
	// node has applied (OnFleetReorg): chain truth.
	reorg atomic.Pointer[func(chain string, fork, at int64)]
}

// OnFleetReorg has f told of every reorganization purge (Replaced) of
// another node this node applies from the fleet's log: chain truth takes
// it as reported (truth.Chains.Learn), so this node, seeing the new
// branch later, does not report and purge it again (one reorganization,
// one record of the fleet's log, one CDN purge). Any hard heights purge
// from a height to the top (math.MaxInt64) has that shape: an operator's
// too, which purged the same answers.
func (p *Purger) OnFleetReorg(f func(chain string, fork, at int64)) { p.reorg.Store(&f) }

// OnApplied has f told of every purge this node has applied, its own
// (after it was published to the fleet: seq is its record's number, 0 on
// a single node or when the fleet's log refused it) and, in fleet mode,
// the fleet's: the CDN's sender queues them (package cdn).
func (p *Purger) OnApplied(f func(sel *Selector, at, seq int64)) { p.applied.Store(&f) }

func (p *Purger) tell(sel *Selector, at, seq int64) {
	if f := p.applied.Load(); f != nil {
		(*f)(sel, at, seq)
	}
}

// Options are a Purger's collaborators.
type Options struct {
	Metrics *metrics.Metrics // required
	Logger  *slog.Logger     // required
	Clock   func() time.Time // required
	// Sample says whether a WARN line of a key may go out; nil = always.
	Sample func(logsample.Key) (ok bool, suppressed int64)
	// Chains are the configured chains, upper case, in order: the chain
	// tags.
	Chains []string
	// Disk is the disk tier of final answers (cache/disk): purges apply
	// to it too, before they answer. nil: none.
	Disk *disk.Store
	// InFlight bounds how long an answer can be on its way from the
	// upstream to the cache (retries, the budget's wait, one more
	// timeout), and Retain is the longest an entry may live in Redis or in
	// memory (the longest fresh time plus stale windows): both under the
	// configuration in force.
	InFlight, Retain func() time.Duration
}

// New makes a purger of c's entries.
func New(c *cache.Cache, o Options) *Purger {
	p := &Purger{cache: c, disk: o.Disk, m: o.Metrics, logger: o.Logger, o: o}
	p.known.Store(true) // a single node: every purge is its own
	return p
}

// Known reports whether this node knows every purge that may select an
// entry of its disk tier: on a single node always; in fleet mode once it
// has read the fleet's purge log to its end. Until then an entry written
// before a restart may have been purged by another node while this one
// was down, and the disk tier is not read.
func (p *Purger) Known() bool { return p.known.Load() }

// Memory applies sel to this node's cache and returns the entries
// affected.
func (p *Purger) Memory(sel *Selector, now time.Time) int {
	if sel.kind == kindURL {
		return p.cache.PurgeKeys(sel.keys, sel.match, sel.soft, now)
	}
	return p.cache.Purge(sel.match, sel.soft, now)
}

// Disk applies sel to the disk tier and returns the entries removed, once
// they are out of the file (disk.Store.Delete: a soft purge removes too,
// an entry on disk has no stale copy). sel must be in the log already:
// entries being admitted meanwhile are judged by it or were queued before
// the Delete (Purger.written). 0 without a disk tier.
//
// The error says the purge could not be written to the file (a full or
// read-only volume, an immutable file): the count is then what it
// selects, hidden in this process and retried by the store, and the next
// start begins with an empty file unless even its mark could not be
// written (the error says which). It is logged here, at ERROR, and put in
// the purge's answer (Result.DiskError) by PurgeAt.
func (p *Purger) Disk(sel *Selector) (int, error) {
	if p.disk == nil {
		return 0, nil
	}
	p.barrier()
	n, err := p.disk.Delete(sel.match)
	if err != nil {
		p.logger.Error("purge did not reach the disk tier", "selector", sel.kind.String(), "value", sel.Describe(),
			"selected", n, "err", err)
	}
	return n, err
}

// barrier waits for every Admit under way to have stored its answer: those
// that had not seen a purge just logged did so before the purge looks.
func (p *Purger) barrier() {
	p.written.Lock()
	//lint:ignore SA2001 a barrier: every Admit that had not seen the purge has stored its answer
	p.written.Unlock()
}

// Purge applies sel to this node, passes it on to the fleet, and counts
// it. The purge is logged first: an answer stored while the cache is
// scanned is judged by it. The error says the fleet was not told.
func (p *Purger) Purge(sel *Selector) (Result, error) {
	return p.PurgeAt(sel, p.o.Clock().UnixNano())
}

// PurgeAt is Purge of the answers older than at (unix ns): a
// reorganization spares the answer that showed it and those stored after
// it.
func (p *Purger) PurgeAt(sel *Selector, at int64) (Result, error) {
	now := p.o.Clock()
	p.log.add(record{at: at, sel: sel}, now.Add(-p.keep()).UnixNano())
	p.barrier()
	res := Result{Selector: sel.kind.String(), Mode: sel.Mode()}
	res.Memory = p.Memory(sel, now)
	var derr error
	if res.Disk, derr = p.Disk(sel); derr != nil {
		res.DiskError = derr.Error()
	}
	p.m.Purges.WithLabelValues(sel.kind.String(), sel.Mode()).Inc()
	if p.fleet == nil {
		p.tell(sel, at, 0)
		return res, nil
	}
	req, _ := json.Marshal(sel.req)
	seq, found, err := p.fleet.PublishPurge(at, req, sel.sharedKeys(), sel.soft, p.o.Retain())
	res.Redis, res.Seq, res.Fleet = found, seq, err == nil
	// Told even when the log refused it (seq 0): the CDN's sender then
	// sends it from this node (docs/cdn.md).
	p.tell(sel, at, seq)
	return res, err
}

// Admit stores what of e, an answer being stored, the purges since since
// (unix ns: when an answer stored now may have left) let in, with store
// (into memory): nothing when a hard purge selected it while its answer
// was on its way, a copy stale from a soft one's time, or e. With toDisk,
// e is also queued for the disk tier when it is final and admitted whole.
// The verdict and the store are one step for purges (Purger.written).
func (p *Purger) Admit(e *cache.Entry, since int64, toDisk bool, store func(*cache.Entry)) {
	p.written.RLock()
	defer p.written.RUnlock()
	drop, from := p.log.verdict(e, since)
	switch {
	case drop:
		return
	case from != 0 && from < e.Fresh:
		store(e.StaleFrom(from))
		return
	}
	store(e)
	if toDisk && p.disk != nil && e.Class == cache.Final {
		p.disk.Put(e)
	}
}

// Judge is what an entry read from the shared tier or the disk tier is
// worth after the purges this node knows: nil (purged), a stale one
// (soft-purged), or e. e is this caller's own, decoded from Redis or the
// file and tagged: it may be changed.
func (p *Purger) Judge(e *cache.Entry) *cache.Entry {
	if e == nil || !p.log.after(e.Stored) {
		return e // no purge since its answer
	}
	drop, from := p.log.verdict(e, 0)
	switch {
	case drop:
		return nil
	case from != 0 && from < e.Fresh:
		e.Fresh = from
	}
	return e
}

// Purged reports whether a hard purge selected e after its answer was
// fetched: such an entry is not written to the shared tier.
func (p *Purger) Purged(e *cache.Entry) bool {
	if !p.log.after(e.Stored) {
		return false
	}
	drop, _ := p.log.verdict(e, 0)
	return drop
}

// Join starts following the fleet's purges and passes this node's on to
// f.
func (p *Purger) Join(f Fleet) {
	p.fleet = f
	p.known.Store(false)
	f.WatchPurges(p.fleetPurge, p.purgesLost, p.fleetFloor, p.refused)
	if p.floors.Load() > 0 {
		p.known.Store(true) // WatchPurges read the log, to its end, before it returned
	}
}

// fleetFloor takes the fleet's floor (0: none), unless it is from the
// future: then the one taken before stays.
func (p *Purger) fleetFloor(at int64) {
	if p.floors.Add(1) > 1 {
		p.known.Store(true) // the floor comes first in a read: the read before this one is over
	}
	now := p.o.Clock()
	if at > now.Add(Skew).UnixNano() {
		if p.log.refuseFloor(at) {
			p.refused("purge_floor", "from the future: "+time.Unix(0, at).Sub(now).String()+" ahead")
		}
		return
	}
	p.log.sharedFloor(at)
}

// refused counts what the fleet's purge log held that no node publishes,
// and logs it, sampled: whoever can write to Redis can fill the log with
// it.
func (p *Purger) refused(reason, why string) {
	p.m.SharedRejected.WithLabelValues(reason).Inc()
	const msg = "purge state in Redis refused"
	ok, suppressed := true, int64(0)
	if p.o.Sample != nil {
		ok, suppressed = p.o.Sample(logsample.Key{Msg: msg, Code: reason})
	}
	if ok {
		p.logger.Warn(msg, "reason", reason, "why", why, "suppressed", suppressed)
	}
}

// fleetPurge applies a purge another node published at at (unix ns).
// Only entries whose answers are older than the purge are selected: what
// this node fetched since is newer than the purge. Records published
// before this node started (live false) are remembered, not applied.
func (p *Purger) fleetPurge(seq, at int64, request []byte, live bool) {
	now := p.o.Clock()
	if at > now.Add(Skew).UnixNano() {
		p.refused("purge_record", "from the future: "+time.Unix(0, at).Sub(now).String()+" ahead")
		return
	}
	sel, perr := Parse(request, p.o.Chains)
	if perr != nil {
		p.refused("purge_record", "unreadable: "+perr.Msg)
		return
	}
	sel.before = at
	p.log.add(record{at: at, sel: sel}, now.Add(-p.keep()).UnixNano())
	if !live {
		return
	}
	p.barrier()
	n := p.Memory(sel, now)
	d, _ := p.Disk(sel) // an error is logged there
	p.tell(sel, at, seq)
	if f := p.reorg.Load(); f != nil && sel.kind == kindHeights && !sel.soft && sel.to == math.MaxInt64 && sel.classes == 0 {
		(*f)(sel.req.Heights.Chain, sel.from, at)
	}
	p.m.Purges.WithLabelValues(sel.kind.String(), sel.Mode()).Inc()
	p.logger.Info("purge from the fleet", "selector", sel.kind.String(), "value", sel.Describe(), "mode", sel.Mode(),
		"memory", n, "disk", d, "lag", now.Sub(time.Unix(0, at)).String())
}

// purgesLost drops the whole memory cache and disk tier: the fleet purged
// things this node can no longer learn.
func (p *Purger) purgesLost() {
	all := func(*cache.Entry) bool { return true }
	n := p.cache.Purge(all, false, p.o.Clock())
	d := 0
	if p.disk != nil {
		var err error
		if d, err = p.disk.Delete(all); err != nil {
			p.logger.Error("missed purges of the fleet: the disk tier could not be emptied", "selected", d, "err", err)
		}
	}
	p.logger.Warn("missed purges of the fleet; dropped the memory cache and the disk tier", "entries", n, "disk", d)
}

// keep is how long the log keeps a record: long enough to judge any
// answer on its way (InFlight) and, in fleet mode, any entry Redis may
// still hold (Retain).
func (p *Purger) keep() time.Duration {
	if p.fleet != nil {
		return max(p.o.Retain(), p.o.InFlight())
	}
	return p.o.InFlight()
}
