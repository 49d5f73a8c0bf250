// Package disk keeps final answers (cache.Final: a done block's
// transactions, a finished transfer; they never change) in a file on local
// disk, under the memory cache, so that a lone node restarts warm. Lookup
// order is memory, disk, Redis, upstream.
//
// A Store is bounded by MaxBytes, evicting the entries stored longest ago
// first. Put never blocks: it queues the entry for a writer that commits
// batches; a full queue drops. Get reads synchronously and returns only
// entries that check out (each record carries an xxhash64 of itself) and
// are still usable; a corrupt record is a miss, counted and removed.
//
// # The store: bbolt, measured against Pebble
//
// storebench (a module of its own, so that the store not chosen stays out
// of go.mod) writes 20,000 entries of 1-10 KiB of incompressible bytes
// (about 110 MB, as gzip answers are) under keys like the edge's, in
// batches of 64, and reads random ones back into a reused buffer after a
// reopen, the files in the page cache. Ranges over 2-3 runs on the 2
// shared cores of the development machine (AMD EPYC, Go 1.26, CGO off as
// in the Dockerfile):
//
//	                       bbolt v1.5.0               pebble v2.1.7, no compression
//	Get                    4.7-6.0 us, 576 B, 9 allocs  17.2-18.0 us, 12.6 KB, 3 allocs
//	Get, RunParallel       2.6-6.4 us                  16.0-18.9 us
//	Get, all in cache      -                           8.8-10.4 us, 0 allocs (256 MB block cache)
//	write, no fsync        85-98 us/entry, 59-68 MB/s  127-152 us/entry, 38-46 MB/s
//	write, fsync a batch   170-180 us/entry, 32-34 MB/s 129-154 us/entry, 38-45 MB/s
//	modules added          1                          19
//
// A disk hit is the figure that matters: it is on the request path, where
// writes are in the background at the rate of final fills, far below
// either store's throughput. bbolt reads the value in place from its
// memory map; Pebble reads the value's block from the file into a new
// buffer once the data outgrows its block cache (8 MB by default), as a
// disk tier larger than memory always does, and is slower than bbolt even
// with every block cached. Pebble commits a batch with its fsync faster
// (it appends to its WAL where bbolt writes a B+tree path, the free list
// and a meta page); the writer's batching makes that moot. And: bbolt adds
// one module to go.mod (golang.org/x/sys is required already) where
// Pebble adds 19 (cockroachdb/errors, sentry-go, gogo/protobuf, zstd,
// snappy, ...); a failed commit in bbolt (disk full) rolls back and leaves
// the file as it was, where Pebble's commit pipeline ends the process
// (Logger.Fatalf "fatal commit error"); bbolt has no compression to turn
// off. Against bbolt: one writer at a time (the writer here is the only
// one), and a file that never shrinks (freed pages are reused).
//
// Reproduce with: cd cache/disk/storebench && CGO_ENABLED=0 go test -run '^$' -bench . -benchtime 2s
//
// This package's own BenchmarkGet (the same 20,000 entries; the record
// copied out, its checksum, the entry decoded) takes 8.1-8.9 us, 5.6-6.5
// us in parallel, 7.0 KB and 12 allocations: the copy is the entry's.
//
// # Durability
//
// Every batch is committed with an fsync (bbolt's default), so a kill -9
// or a power loss loses at most what was still queued. A record that is
// corrupt anyway (its checksum fails) is a miss; a file whose structure
// is corrupt (bbolt panics or faults reading it) stops the store: every
// Get misses, writes stop, one error is logged, and the next Open starts
// an empty file.
package disk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"explorer-edge/cache"
)

// Options configure a Store. Zero values are defaults where one is given.
type Options struct {
	// Dir is the directory the store's file (disk.db) lives in. It must
	// exist, be writable, and be the edge's own (CheckDir).
	Dir string
	// MaxBytes bounds what the entries take in the file (Stats.Bytes: each
	// record's bytes with bbolt's element header, a large value rounded up
	// to whole pages); must be > 0. The file takes more by what bbolt
	// keeps free for reuse and its part-filled pages: 1.2-1.35x MaxBytes
	// of disk when full (TestEviction); its length, sparse, runs up to
	// 16 MB ahead (bbolt grows it in steps).
	MaxBytes int64
	// MaxBody bounds the identity size of an entry (upstream.
	// max_response_bytes): a larger one is not written, and a record that
	// claims one is corrupt (a request would allocate that much to
	// inflate it). 0: 8 MiB, the configuration's default.
	MaxBody int
	// QueueLen is how many entries may wait for the writer; past it Put
	// drops. 0: 1024.
	QueueLen int
	// QueueBytes bounds the answers' bytes (an entry's Gzip or Body)
	// waiting for the writer, or being written; past it Put drops. What
	// waits may have left the memory cache meanwhile: this is what the
	// store can hold beyond it. 0: 16 MiB.
	QueueBytes int64
	// BatchLen is the most entries committed at once; 0: 128.
	BatchLen int
	// BatchDelay is the longest an entry waits for its batch to fill; 0: 5ms.
	BatchDelay time.Duration
	// RetryAfter is how long writes stop after a failed commit (disk full,
	// read-only file system) before one is tried again; 0: one minute. A
	// Delete that could not commit is tried again sooner: every
	// min(RetryAfter, 5s).
	RetryAfter time.Duration
	// TagSpace says what the numbers in entries' Tags mean: the route
	// table and the configured chains (purge.Of numbers them by their
	// place), e.g. their names in order. A file written under another
	// TagSpace is emptied at Open: a purge would look for its entries
	// under the wrong numbers.
	TagSpace string
	// Logger receives the one error a failure of writes logs; nil: none.
	Logger  *slog.Logger
	Metrics Metrics
	// Now is the writer's clock: whether an entry is past its lifetime
	// (not written, swept), and when writes stopped by a failure are tried
	// again. The cache's clock (the request core's); nil: time.Now.
	Now func() time.Time

	fail func() error // tests: fails a write transaction when it returns an error
}

// Metrics are hooks the store calls as things happen; Stats is read at
// scrape time for the rest. A nil hook is not called.
type Metrics struct {
	// ReadSeconds observes the time of every Get, hit or miss: a
	// prometheus.Histogram's Observe (explorer_edge_disk_read_seconds).
	ReadSeconds func(seconds float64)
}

// Stats are the store's counters, for explorer_edge_disk_* (the names in
// the comments).
type Stats struct {
	Hits        int64 // hits_total
	Misses      int64 // misses_total: absent, past its lifetime, corrupt, or the store stopped
	Writes      int64 // writes_total: entries committed
	Drops       int64 // drops_total: entries not written (queue full, too large, writes stopped)
	WriteErrors int64 // write_errors_total: commits that failed (disk full, read-only, I/O)
	Evictions   int64 // evictions_total: entries removed, oldest first, to stay within MaxBytes
	Expired     int64 // expired_total: entries removed past their lifetime
	Corrupt     int64 // corrupt_total: records that failed their checksum or did not parse
	Deleted     int64 // deleted_total: entries removed by Delete
	Bytes       int64 // bytes: what the entries held take (Options.MaxBytes)
	Entries     int64 // entries
	// Broken: the file was found corrupt; the store reads and writes
	// nothing until the next Open (open: 0).
	Broken bool
}

// Store is a bounded disk cache of final entries, safe for concurrent use.
type Store struct {
	db         *bbolt.DB
	path       string
	maxBytes   int64
	maxBody    int
	pageSize   int64
	batchLen   int
	batchDelay time.Duration
	retryAfter time.Duration
	log        *slog.Logger
	metrics    Metrics
	now        func() time.Time
	fail       func() error
	tagSpace   string
	started    bool // the writer runs: a corrupt file now stops the store

	queue   chan *cache.Entry
	bad     chan string // keys Get found corrupt or past their lifetime
	flushes chan chan struct{}
	quit    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once

	// queued is the answers' bytes Put and not yet written or dropped,
	// within queueBytes.
	queued     atomic.Int64
	queueBytes int64

	// wmu orders write transactions with the state they change: the
	// totals, failing and retryAt.
	wmu     sync.Mutex
	failing bool
	retryAt time.Time
	// limit is the bound eviction keeps to: MaxBytes, lowered below what
	// the file held when a write failed (the disk is smaller than
	// MaxBytes, or shared and full).
	limit int64
	// pending are the matches of Deletes whose commit failed: Get hides
	// what they select until a commit removes it; the writer tries one
	// (retryPurges) every purgeRetry until one does.
	pending    atomic.Pointer[[]func(*cache.Entry) bool]
	retry      chan struct{} // a Delete failed: the writer starts trying again
	track      chan struct{} // Track was called: the writer writes the heights
	purgeRetry time.Duration
	// marks is the purges mark, held open (files.go).
	marks *os.File
	// finals are the finalized heights kept in the file (Finals, Track).
	finals finals
	// broken: the file's structure is corrupt; nothing is read or written.
	// brokenMarked: its mark was written, so the next Open starts empty.
	broken, brokenMarked atomic.Bool

	hits, misses, writes, drops, writeErrors atomic.Int64
	evictions, expired, corrupt, deleted     atomic.Int64
	bytes, entries                           atomic.Int64
}

const (
	fileName   = "disk.db"
	brokenMark = "disk.db.corrupt" // left by a store that found its file corrupt
	// legacyUnpurgedMark was left by an older build's Delete that could
	// not commit (now the purges mark, files.go): an Open that finds it
	// starts an empty file still.
	legacyUnpurgedMark = "disk.db.unpurged"
)

var (
	bucketEntries = []byte("e")
	bucketIndex   = []byte("o")
	bucketMeta    = []byte("m")
	keyTotals     = []byte("totals")
	keyTagSpace   = []byte("tagspace")
)

// Open opens (or creates) the store in o.Dir and starts its writer.
func Open(o Options) (*Store, error) {
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("disk cache: max bytes must be > 0, got %d", o.MaxBytes)
	}
	if err := CheckDir(o.Dir); err != nil {
		return nil, err
	}
	s := &Store{
		path:       filepath.Join(o.Dir, fileName),
		maxBytes:   o.MaxBytes,
		maxBody:    cmp(o.MaxBody, 8<<20),
		limit:      o.MaxBytes,
		batchLen:   cmp(o.BatchLen, 128),
		batchDelay: cmp(o.BatchDelay, 5*time.Millisecond),
		retryAfter: cmp(o.RetryAfter, time.Minute),
		log:        o.Logger,
		metrics:    o.Metrics,
		now:        o.Now,
		fail:       o.fail,
		tagSpace:   o.TagSpace,
		queue:      make(chan *cache.Entry, cmp(o.QueueLen, 1024)),
		queueBytes: o.QueueBytes,
		bad:        make(chan string, 64),
		retry:      make(chan struct{}, 1),
		track:      make(chan struct{}, 1),
		flushes:    make(chan chan struct{}),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.queueBytes <= 0 {
		s.queueBytes = 16 << 20
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.purgeRetry = min(s.retryAfter, 5*time.Second)
	if err := s.openMarks(o.Dir); err != nil {
		return nil, err
	}
	err := s.openFile()
	if isCorrupt(err) {
		s.log.Warn("disk cache: the file is corrupt; starting empty", "path", s.path, "err", err)
		if err := removeFile(s.path); err != nil {
			s.marks.Close()
			return nil, fmt.Errorf("disk cache: %w", err)
		}
		s.failing, s.limit = false, s.maxBytes
		s.writeErrors.Store(0)
		s.corrupt.Store(0)
		err = s.openFile()
	}
	if err != nil {
		s.marks.Close()
		return nil, fmt.Errorf("disk cache: open %s: %w", s.path, err)
	}
	s.started = true
	go s.run()
	return s, nil
}

func cmp[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// errPanicked stands for a panic of bbolt reading a corrupt file.
var errPanicked = errors.New("corrupt file structure")

func isCorrupt(err error) bool {
	return errors.Is(err, errPanicked) || errors.Is(err, bolterrors.ErrInvalid) ||
		errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch)
}

// openFile opens the file and reads its totals.
func (s *Store) openFile() error {
	db, err := s.open()
	if err != nil {
		return err
	}
	s.db = db
	s.pageSize = int64(db.Info().PageSize)
	if err := s.load(); err != nil {
		db.Close()
		return err
	}
	return nil
}

// open opens the file with bbolt. A corrupt file can make bbolt panic
// (reading its free list or its buckets): that is an error here.
func (s *Store) open() (db *bbolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %v", errPanicked, r)
		}
	}()
	db, err = bbolt.Open(s.path, 0o600, &bbolt.Options{
		// Never through a symlink planted in the directory, never
		// anything but a regular file (files.go).
		OpenFile: openNoFollow,
		// Another process holding the file is an error, not a wait.
		Timeout: time.Second,
		// The free list is written at every commit rather than rebuilt
		// at open from the pages in use: bbolt rebuilds it in a goroutine
		// of its own, where a corrupt page panics past any recover and
		// ends the process. Read from its page, a corrupt free list
		// panics in Open, which recovers and starts an empty file.
		FreelistType: bbolt.FreelistMapType,
		// Readers block while bbolt maps a grown file again; mapping
		// what the file may grow to at once spares them that. It is
		// address space, not memory.
		InitialMmapSize: int(min(2*s.maxBytes+64<<20, 1<<40)),
	})
	if err != nil {
		return nil, err
	}
	err = db.Update(s.prepare)
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// prepare makes the buckets, emptied when the file's TagSpace is not
// this store's.
func (s *Store) prepare(tx *bbolt.Tx) error {
	if m := tx.Bucket(bucketMeta); m != nil && string(m.Get(keyTagSpace)) != s.tagSpace {
		if k, _ := tx.Bucket(bucketIndex).Cursor().First(); k != nil {
			s.log.Info("disk cache: the entries' tags mean other routes or chains; starting empty",
				"path", s.path, "was", string(m.Get(keyTagSpace)), "now", s.tagSpace)
		}
		for _, b := range [][]byte{bucketEntries, bucketIndex, bucketMeta} {
			if err := tx.DeleteBucket(b); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
	}
	for _, b := range [][]byte{bucketEntries, bucketIndex, bucketMeta} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keyTagSpace, []byte(s.tagSpace))
}

// Get returns the entry stored under key if it is still usable at now
// (cache.Entry.UsableOnError: within its fresh time or either stale
// window; the caller serves it by StateAt as a memory hit), else nil.
// The entry is new at every call, the caller's own: it may be changed
// (purge.Purger.Judge shortens Fresh). A record that is corrupt or past
// its lifetime is removed by the writer.
func (s *Store) Get(key string, now time.Time) *cache.Entry {
	if h := s.metrics.ReadSeconds; h != nil {
		start := time.Now()
		defer func() { h(time.Since(start).Seconds()) }()
	}
	e := s.get(key, now.UnixNano())
	if e == nil {
		s.misses.Add(1)
		return nil
	}
	s.hits.Add(1)
	return e
}

func (s *Store) get(key string, now int64) *cache.Entry {
	if s.broken.Load() || s.closed.Load() {
		return nil
	}
	rec := s.read(key)
	if rec == nil {
		return nil
	}
	e, err := decodeEntry(rec, s.maxBody)
	if err != nil || e.Key != key || e.Class != cache.Final {
		s.corrupt.Add(1)
		s.remove(key)
		return nil
	}
	if !e.UsableOnError(now) {
		s.remove(key)
		return nil
	}
	if p := s.pending.Load(); p != nil {
		for _, match := range *p {
			if match(e) {
				return nil
			}
		}
	}
	return e
}

// read copies the record under key out of the file, or returns nil.
func (s *Store) read(key string) (rec []byte) {
	err := s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			// bbolt does not keep the key: it may alias the string.
			if v := tx.Bucket(bucketEntries).Get(unsafe.Slice(unsafe.StringData(key), len(key))); v != nil {
				rec = bytes.Clone(v) // append: not zeroed before the copy
			}
			return nil
		})
	})
	if err != nil {
		return nil
	}
	return rec
}

// guard runs fn, turning a panic or a memory fault of bbolt reading a
// corrupt file into errPanicked, after which the store stops (Open, which
// starts an empty file instead, has not started it yet).
func (s *Store) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errPanicked, r)
			if s.started {
				s.stop(err)
			}
		}
	}()
	return fn()
}

// stop marks the file corrupt: this store reads and writes nothing more,
// and the next Open starts an empty file.
func (s *Store) stop(err error) {
	if s.broken.Swap(true) {
		return
	}
	s.log.Error("disk cache: file corrupt; the disk tier is off until restart", "path", s.path, "err", err)
	if f, err := openNoFollow(filepath.Join(filepath.Dir(s.path), brokenMark), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err == nil {
		f.Close()
		s.brokenMarked.Store(true)
	}
}

// remove asks the writer to check key again and remove it if it is still
// corrupt or past its lifetime; when the writer is behind, the next Get
// asks again.
func (s *Store) remove(key string) {
	select {
	case s.bad <- key:
	default:
	}
}

// Put queues e to be written if it is final; it never blocks: when the
// queue is full (QueueLen entries or QueueBytes), e is dropped
// (Stats.Drops). e must not change afterwards (entries never do once
// stored), and its Tags must be set: Delete selects by them.
func (s *Store) Put(e *cache.Entry) {
	if e == nil || e.Class != cache.Final || s.closed.Load() {
		return
	}
	n := payload(e)
	if s.queued.Add(n) > s.queueBytes {
		s.queued.Add(-n)
		s.drops.Add(1)
		return
	}
	select {
	case s.queue <- e:
	default:
		s.queued.Add(-n)
		s.drops.Add(1)
	}
}

// payload is what the queue counts of e: its answer's bytes.
func payload(e *cache.Entry) int64 { return int64(len(e.Gzip) + len(e.Body)) }

// Flush returns once every entry Put before it was committed or dropped.
func (s *Store) Flush() {
	done := make(chan struct{})
	select {
	case s.flushes <- done:
		<-done
	case <-s.done:
	}
}

// Delete removes every entry for which match is true and returns how many
// it removed, once they are gone from the file: what a purge or a
// reorganization calls before it answers. Entries Put before Delete are
// written first, so they are judged too. match gets an entry holding
// Key, Class, Stored, Fresh, both stale windows and Tags, but no body; the
// entry is reused for the next call, so match must not keep it.
//
// Delete reads the index record of every entry (its key and about 100
// bytes, no body), with the writer waiting: 6-7 ms for 20,000 entries
// (BenchmarkDelete). A soft purge removes too: an entry on disk has no
// stale copy, and a miss costs one fetch.
//
// If the commit fails (disk full, read-only, an immutable file), the error
// says so and n is what match selects: the entries stay in the file, but
// Get no longer returns them, the writer tries the removal again every
// min(RetryAfter, 5s) until a commit succeeds, and until one does the
// purges mark (files.go) makes the next Open start empty: a restart never
// serves what a purge selected. The error says too when the mark could
// not be written either (a volume remounted read-only): then only this
// process knows.
func (s *Store) Delete(match func(*cache.Entry) bool) (int, error) {
	s.Flush()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return 0, errors.New("disk cache: closed")
	}
	if s.broken.Load() {
		// Nothing is read from a broken file, and the next Open starts
		// empty if the mark was written.
		if !s.brokenMarked.Load() {
			return 0, fmt.Errorf("disk cache: the file is corrupt and could not be marked: remove %s before a restart", s.path)
		}
		return 0, nil
	}
	var n int
	err := s.commit(func(w *txn) error {
		n = w.deleteMatching(match)
		return nil
	})
	if err == nil {
		return n, nil
	}
	p := s.pending.Load()
	var list []func(*cache.Entry) bool
	if p != nil {
		list = append(list, *p...)
	}
	list = append(list, match)
	s.pending.Store(&list)
	n = s.matching(match)
	select {
	case s.retry <- struct{}{}:
	default:
	}
	if merr := s.markUnpurged(true); merr != nil {
		s.log.Error("disk cache: a purge is not in the file and cannot be marked; a restart would serve what it selects unless the file is removed first",
			"path", s.path, "err", err, "mark_err", merr)
		return n, fmt.Errorf("disk cache: purge not written (%v) and not marked (%v): hidden in this process only, retried; remove %s before a restart", err, merr, s.path)
	}
	return n, fmt.Errorf("disk cache: purge not written (%v): hidden, retried, and a restart starts the file empty until it is written", err)
}

// retryPurges commits what failed Deletes select, if any still wait; it
// reports whether some still do (the commit failed again).
func (s *Store) retryPurges() bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.pending.Load() == nil || s.broken.Load() || s.closed.Load() {
		return false
	}
	return s.commit(func(*txn) error { return nil }) != nil
}

// matching counts the entries match selects, for a Delete that could not
// commit.
func (s *Store) matching(match func(*cache.Entry) bool) int {
	n := 0
	s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			var e cache.Entry
			return tx.Bucket(bucketIndex).ForEach(func(_, v []byte) error {
				if _, err := decodeIndex(v, &e); err == nil && match(&e) {
					n++
				}
				return nil
			})
		})
	})
	return n
}

// Close writes what is queued and closes the file. Put and Get do nothing
// afterwards.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.quit)
		<-s.done
		if s.retryPurges() {
			s.log.Error("disk cache: closing with a purge not in the file; the next start begins empty if the mark was written",
				"path", s.path)
		}
		s.wmu.Lock()
		s.closed.Store(true)
		err = s.db.Close()
		s.marks.Close()
		s.wmu.Unlock()
	})
	return err
}

// Stats returns the counters now.
func (s *Store) Stats() Stats {
	return Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(), Writes: s.writes.Load(),
		Drops: s.drops.Load(), WriteErrors: s.writeErrors.Load(),
		Evictions: s.evictions.Load(), Expired: s.expired.Load(),
		Corrupt: s.corrupt.Load(), Deleted: s.deleted.Load(),
		Bytes: s.bytes.Load(), Entries: s.entries.Load(), Broken: s.broken.Load(),
	}
}
