package disk

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
)

// TestCraftedRecords writes records whose checksum holds but whose fields
// lie, as whoever can write to disk_path can: each is a miss, counted
// corrupt, never an entry a request would size an allocation by, serve
// under another key, or fail to send. Before the bounds, the record
// claiming 2^40 bytes was returned and the first request for it ended the
// process (fatal error: runtime: out of memory in Inflate).
func TestCraftedRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	zipped := func() *cache.Entry { return final("/k", body(r, 6000, true), time.Now(), 1, 1) }
	plain := func() *cache.Entry { return final("/k", body(r, 600, false), time.Now(), 1, 1) }
	for name, craft := range map[string]func() []byte{
		"size 2^40": func() []byte {
			e := zipped()
			e.Size = 1 << 40
			return encodeEntry(e)
		},
		"size 2^40, trailer agreeing": func() []byte {
			e := zipped()
			e.Size = 1<<40 + int(binary.LittleEndian.Uint32(e.Gzip[len(e.Gzip)-4:]))
			return encodeEntry(e)
		},
		"size above max_response_bytes": func() []byte {
			e := zipped()
			e.Size = 1<<20 + 1
			return encodeEntry(e)
		},
		"size beyond deflate's ratio": func() []byte {
			e := zipped()
			e.Gzip = append([]byte(nil), e.Gzip[:20]...)
			e.Size = 20*gzipMaxRatio + 1
			binary.LittleEndian.PutUint32(e.Gzip[16:], uint32(e.Size))
			return encodeEntry(e)
		},
		"size not the gzip's": func() []byte {
			e := zipped()
			e.Size--
			return encodeEntry(e)
		},
		"empty etag": func() []byte {
			e := zipped()
			e.ETag = nil
			return encodeEntry(e)
		},
		"etag not quoted hex": func() []byte {
			e := zipped()
			e.ETag = []byte(`"zzzzzzzzzzzzzzzz"`)
			return encodeEntry(e)
		},
		"etag of another body": func() []byte {
			e := plain()
			e.ComputeETag([]byte("another body"))
			return encodeEntry(e)
		},
		"another key's record": func() []byte {
			e := plain()
			e.Key = "/other"
			return encodeEntry(e)
		},
		"key of 40 KB": func() []byte {
			e := plain()
			e.Key = "/k" + strings.Repeat("x", 40<<10)
			return encodeEntry(e)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t, Options{MaxBody: 1 << 20})
			if err := s.db.Update(func(tx *bbolt.Tx) error {
				return tx.Bucket(bucketEntries).Put([]byte("/k"), craft())
			}); err != nil {
				t.Fatal(err)
			}
			if got := s.Get("/k", time.Now()); got != nil {
				t.Fatalf("crafted record returned: key %q, size %d, etag %q", got.Key, got.Size, got.ETag)
			}
			if st := s.Stats(); st.Corrupt != 1 {
				t.Fatalf("stats %+v: want it counted corrupt", st)
			}
		})
	}
}

// TestMaxBody: an answer larger than MaxBody is not written (it could not
// be read back), and one within it is.
func TestMaxBody(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	s := open(t, Options{MaxBody: 4096})
	big := final("/big", body(r, 4097, false), time.Now(), 1, 1)
	ok := final("/ok", body(r, 4096, false), time.Now(), 1, 1)
	s.Put(big)
	s.Put(ok)
	s.Flush()
	if s.Get("/big", time.Now()) != nil {
		t.Fatal("an answer above MaxBody was written")
	}
	same(t, s.Get("/ok", time.Now()), ok)
	if st := s.Stats(); st.Drops != 1 || st.Writes != 1 {
		t.Fatalf("stats %+v: want 1 drop, 1 write", st)
	}
}

// TestPlantedSymlinks: disk.db or a mark planted as a symlink to a file
// elsewhere is never followed: Open refuses (the node serves without the
// tier) and the file it points to is left as it was. Before O_NOFOLLOW,
// bbolt opened the target and grew it to the file's size.
func TestPlantedSymlinks(t *testing.T) {
	for _, name := range []string{fileName, purgesMark, brokenMark} {
		t.Run(name, func(t *testing.T) {
			dir, outside := t.TempDir(), filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
			if name == brokenMark {
				// A mark is read with Lstat: there, it starts the file
				// empty, and is removed, never opened.
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			} else if err == nil {
				s.Close()
				t.Fatal("opened through a symlink")
			} else if !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("unclear error: %v", err)
			}
			if b, _ := os.ReadFile(outside); string(b) != "keep" {
				t.Fatalf("the symlink's target changed: %d bytes", len(b))
			}
		})
	}
	t.Run("a directory named disk.db", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, fileName), 0o700)
		if s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20}); err == nil {
			s.Close()
			t.Fatal("opened a directory")
		} else {
			t.Log(err)
		}
	})
}

// TestDirOthersCanWrite: a directory writable by group or others (a
// sticky one too), or owned by another user, is refused: whoever can
// write there can plant disk.db.
func TestDirOthersCanWrite(t *testing.T) {
	for _, mode := range []os.FileMode{0o770, 0o707, 0o777 | os.ModeSticky} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckDir(dir); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Fatalf("mode %s: %v", mode, err)
		}
		if s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20}); err == nil {
			s.Close()
			t.Fatalf("mode %s: opened", mode)
		}
	}
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := CheckDir(dir); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("another user's directory: %v", err)
		}
	}
	if err := CheckDir(t.TempDir()); err != nil {
		t.Fatalf("a private directory: %v", err)
	}
}

// TestPurgeOnImmutableVolume is the purge on a volume that became
// unwritable: disk.db and its directory made immutable (chattr +i, which
// stops root too) after the store opened. The Delete says it did not
// reach the file, the purged entries are not served, the writer retries,
// and a restart on the volume writable again starts empty rather than
// serve them. Before, Delete answered its count alone, the mark could not
// be created in the directory, and the restart served every purged entry.
func TestPurgeOnImmutableVolume(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("no chattr")
	}
	dir := t.TempDir()
	var logs syncBuffer
	s := open(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 10 {
		s.Put(final(fmt.Sprint("/p/", i), []byte(`{}`), time.Now(), 1, int64(i)))
	}
	s.Flush()
	chattr := func(flag string, paths ...string) error {
		out, err := exec.Command("chattr", append([]string{flag}, paths...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	db := filepath.Join(dir, fileName)
	if err := chattr("+i", db, dir); err != nil {
		t.Skipf("chattr +i not permitted here: %v", err)
	}
	t.Cleanup(func() { chattr("-i", db, dir) })
	n, err := s.Delete(func(e *cache.Entry) bool { return e.Tags.Lo < 4 })
	if err == nil {
		t.Fatalf("Delete on an immutable file: %d, no error", n)
	}
	t.Logf("Delete: %d, %v", n, err)
	if n != 4 {
		t.Fatalf("Delete counted %d, want the 4 it selects", n)
	}
	for i := range 4 {
		if s.Get(fmt.Sprint("/p/", i), time.Now()) != nil {
			t.Fatalf("purged entry %d served while the purge is pending", i)
		}
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("nothing logged:\n%s", logs.String())
	}
	s.Close()
	if err := chattr("-i", db, dir); err != nil {
		t.Fatal(err)
	}
	s = open(t, Options{Dir: dir})
	for i := range 10 {
		if s.Get(fmt.Sprint("/p/", i), time.Now()) != nil {
			t.Fatalf("entry %d served after the restart: the file should have started empty", i)
		}
	}
}

// TestPurgeRetried: a Delete that could not commit is tried again by the
// writer, with no other write to carry it, once the disk takes writes
// again; the mark is then taken away and a restart keeps the rest.
func TestPurgeRetried(t *testing.T) {
	dir := t.TempDir()
	var failing atomic.Bool
	s := open(t, Options{Dir: dir, RetryAfter: 20 * time.Millisecond, fail: func() error {
		if failing.Load() {
			return syscall.EROFS
		}
		return nil
	}})
	for i := range 10 {
		s.Put(final(fmt.Sprint("/r/", i), []byte(`{}`), time.Now(), 1, int64(i)))
	}
	s.Flush()
	failing.Store(true)
	if _, err := s.Delete(func(e *cache.Entry) bool { return e.Tags.Lo < 5 }); err == nil {
		t.Fatal("no error from a Delete that could not commit")
	}
	if fi, err := os.Stat(filepath.Join(dir, purgesMark)); err != nil || fi.Size() == 0 {
		t.Fatalf("purge not marked: %v %v", fi, err)
	}
	failing.Store(false)
	testkit.WaitFor(t, "the writer to retry the Delete", func() bool { return s.Stats().Deleted == 5 })
	if fi, err := os.Stat(filepath.Join(dir, purgesMark)); err != nil || fi.Size() != 0 {
		t.Fatalf("mark left after the retry committed: %v %v", fi, err)
	}
	s.Close()
	s = open(t, Options{Dir: dir})
	for i := range 10 {
		if got := s.Get(fmt.Sprint("/r/", i), time.Now()); (got == nil) != (i < 5) {
			t.Fatalf("entry %d after the restart: %v", i, got)
		}
	}
}

// TestFinalsKept: the tracked finalized heights are in the file after a
// restart, never lowered; a forged one (its checksum wrong) is not taken.
func TestFinalsKept(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	var eth, btc atomic.Int64
	eth.Store(1200)
	btc.Store(80)
	s.Track([]string{"ETH", "BTC"}, func(c string) int64 {
		if c == "ETH" {
			return eth.Load()
		}
		return btc.Load()
	})
	s.Flush()
	eth.Store(1300)
	s.Flush()
	if got := s.Finals(); got["ETH"] != 1300 || got["BTC"] != 80 {
		t.Fatalf("finals %v", got)
	}
	s.Close()
	s = open(t, Options{Dir: dir})
	if got := s.Finals(); got["ETH"] != 1300 || got["BTC"] != 80 || len(got) != 2 {
		t.Fatalf("finals after a restart: %v", got)
	}
	s.Track([]string{"ETH"}, func(string) int64 { return 5 }) // lower: not written
	s.Flush()
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		v := finalRecord("BTC", 80)
		v[7] = 0xff // a height of its own, the checksum no longer its
		return tx.Bucket(bucketMeta).Put([]byte("final:BTC"), v)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, Options{Dir: dir})
	if got := s.Finals(); got["ETH"] != 1300 || len(got) != 1 {
		t.Fatalf("finals after a forged one: %v", got)
	}
}
