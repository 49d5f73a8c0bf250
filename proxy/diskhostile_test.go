package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/bbolt"

	"explorer-edge/internal/testkit"
)

// The disk tier treated as hostile, end to end (docs/disk.md, The
// directory and what is read back): a crafted record neither crashes the
// edge nor answers for another key, a purge the disk could not take is
// said so and never served after a restart, and a disk.db that cannot be
// opened leaves the node serving without the tier, loudly.

// diskRecord is an entry record of cache/disk (record.go) taken apart
// where a forger would change it.
type diskRecord struct {
	head    []byte // version to the key, included
	flags   byte
	source  byte
	status  uint64
	size    uint64
	etag    []byte
	payload []byte
}

func parseDiskRecord(t *testing.T, rec []byte) diskRecord {
	t.Helper()
	b := rec[:len(rec)-8]
	const headLen = 52
	n, w := binary.Uvarint(b[headLen:])
	i := headLen + w + 8*int(n)
	kl, w := binary.Uvarint(b[i:])
	i += w + int(kl)
	r := diskRecord{head: b[:i], flags: b[i], source: b[i+1]}
	i += 2
	r.status, w = binary.Uvarint(b[i:])
	i += w
	r.size, w = binary.Uvarint(b[i:])
	i += w
	el, w := binary.Uvarint(b[i:])
	i += w
	r.etag = b[i : i+int(el)]
	r.payload = b[i+int(el):]
	return r
}

// encode makes the record again, with a checksum that holds.
func (r diskRecord) encode() []byte {
	b := append([]byte(nil), r.head...)
	b = append(b, r.flags, r.source)
	b = binary.AppendUvarint(b, r.status)
	b = binary.AppendUvarint(b, r.size)
	b = binary.AppendUvarint(b, uint64(len(r.etag)))
	b = append(b, r.etag...)
	b = append(b, r.payload...)
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

// TestDiskCraftedRecords: records written into disk.db while the node is
// down, each with a checksum that holds: one claiming an identity size of
// 2^40 bytes (it ended the process with "fatal error: runtime: out of
// memory" at the first request for its key), one holding another key's
// answer, one with an empty ETag (asked with Accept-Encoding: gzip it
// ended in a recovered panic and a 500). Each key is then answered right,
// from the upstream, and never from the disk.
func TestDiskCraftedRecords(t *testing.T) {
	for _, c := range []struct {
		name  string
		forge func(t *testing.T, own, other []byte) []byte
	}{
		{"size 2^40", func(t *testing.T, own, _ []byte) []byte {
			r := parseDiskRecord(t, own)
			r.size = 1 << 40
			return r.encode()
		}},
		{"another key's record", func(_ *testing.T, _, other []byte) []byte { return other }},
		{"empty etag", func(t *testing.T, own, _ []byte) []byte {
			r := parseDiskRecord(t, own)
			r.etag = nil
			return r.encode()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			h := newHarness(t, withDisk(dir))
			h.get(headList)
			targets := finalTargets(h, 2)
			h.warm(targets...)
			h.node.Disk().Flush()
			h.node.Close(context.Background())
			db, err := bbolt.Open(filepath.Join(dir, "disk.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bbolt.Tx) error {
				b := tx.Bucket([]byte("e"))
				key, otherKey := diskKey(t, b, targets[0]), diskKey(t, b, targets[1])
				own, other := bytes.Clone(b.Get(key)), bytes.Clone(b.Get(otherKey))
				if r := parseDiskRecord(t, own); r.flags&1 == 0 {
					t.Fatalf("%s is held uncompressed: the forgery wants a gzip payload", targets[0])
				}
				return b.Put(key, c.forge(t, own, other))
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			h2 := h.sibling()
			h2.start()
			for _, enc := range []string{"gzip", "identity"} {
				r := h2.get(targets[0], "Accept-Encoding", enc)
				if r.status != 200 || isDiskHit(r) {
					t.Fatalf("%s (%s) after the forgery: %d %q %s", targets[0], enc, r.status, r.header["Cache-Status"], r.body)
				}
				if enc == "identity" && !bytes.Equal(r.body, h2.simGet(targets[0])) {
					t.Fatalf("%s after the forgery: not the upstream's answer", targets[0])
				}
			}
			if r := h2.get(targets[1]); r.status != 200 || !isDiskHit(r) {
				t.Errorf("%s, untouched: %q, want a disk hit", targets[1], r.header["Cache-Status"])
			}
		})
	}
}

// diskKey is the key in the file of one of finalTargets: the one holding
// its height.
func diskKey(t *testing.T, b *bbolt.Bucket, target string) []byte {
	t.Helper()
	height := target[strings.LastIndex(target, "height="):]
	var found []byte
	b.ForEach(func(k, _ []byte) error {
		if bytes.Contains(k, []byte("transaction-list")) && bytes.HasSuffix(k, []byte(height)) || bytes.Contains(k, []byte(height+"&")) {
			found = bytes.Clone(k)
		}
		return nil
	})
	if found == nil {
		t.Fatalf("%s is not in the file", target)
	}
	return found
}

// diskOpen reads explorer_edge_disk_open from h's metrics.
func diskOpen(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "explorer_edge_disk_open" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no explorer_edge_disk_open")
	return 0
}

// TestDiskPurgeOnImmutableVolume: disk.db and its directory made
// immutable (chattr +i, which stops root too) while the node runs, as a
// volume turned read-only does. POST /purge answers with disk_error and
// logs an ERROR; the purged answer is not served; after a restart on the
// volume writable again it is not served from the disk either (before:
// "disk": n, nothing logged, and every purged answer came back).
func TestDiskPurgeOnImmutableVolume(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("no chattr")
	}
	dir := t.TempDir()
	var logs testkit.LogBuffer
	h := newUpstream(t, nil, withDisk(dir), withPurgeToken)
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	h.start()
	h.get(headList)
	targets := finalTargets(h, 3)
	h.warm(targets...)
	h.node.Disk().Flush()
	db := filepath.Join(dir, "disk.db")
	chattr := func(flag string) error {
		out, err := exec.Command("chattr", flag, db, dir).CombinedOutput()
		if err != nil {
			t.Logf("chattr %s: %v %s", flag, err, out)
		}
		return err
	}
	if chattr("+i") != nil {
		t.Skip("chattr +i not permitted here")
	}
	t.Cleanup(func() { chattr("-i") })
	res := h.purge(`{"url":"` + targets[0] + `"}`)
	if res.DiskError == "" || res.Disk != 1 {
		t.Fatalf("purge on an immutable file: %+v, want disk_error and the entry it selects", res)
	}
	if n := logs.Count(t, "purge did not reach the disk tier"); n != 1 {
		t.Fatalf("%d error lines for the purge, want 1:\n%s", n, logs.String())
	}
	if r := h.get(targets[0]); !isMiss(r) {
		t.Fatalf("the purged answer: %q, want it fetched again", r.header["Cache-Status"])
	}
	h.node.Close(context.Background())
	if err := chattr("-i"); err != nil {
		t.Fatal(err)
	}
	h2 := h.sibling()
	h2.start()
	if r := h2.get(targets[0]); isDiskHit(r) {
		t.Fatalf("the purged answer after a restart: %q, served from the disk", r.header["Cache-Status"])
	}
	t.Logf("purge: %+v; after the restart: %+v", res, h2.node.Disk().Stats())
}

// TestDiskFileUnopenable: a disk.db that cannot be opened (here a
// directory of that name: root opens any file whatever its mode) does not
// stop the node, which serves without the tier, loudly: an ERROR line,
// explorer_edge_disk_open 0, /readyz's reason; the configuration's check
// (-check-config) agrees that the configuration is valid. The directory
// is marked so that the next start begins with an empty file. Before, the
// start failed although -check-config said "config ok".
func TestDiskFileUnopenable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "disk.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	h := newUpstream(t, nil, withDisk(dir))
	if err := h.cfg.Validate(); err != nil {
		t.Fatalf("-check-config refuses it: %v", err)
	}
	h.log = slog.New(slog.NewJSONHandler(&logs, nil))
	h.start()
	if h.node.Disk() != nil {
		t.Fatal("a disk tier on a directory named disk.db")
	}
	h.get(headList)
	targets := finalTargets(h, 2)
	h.warm(targets...)
	if n := logs.Count(t, "disk tier off: its file could not be opened; serving without it"); n != 1 {
		t.Fatalf("%d error lines, want 1:\n%s", n, logs.String())
	}
	if r := h.adminGet("GET", "/readyz", ""); r.status != 200 || !strings.Contains(string(r.body), "disk tier off") {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
	if v := diskOpen(t, h); v != 0 {
		t.Fatalf("explorer_edge_disk_open %v, want 0", v)
	}
	if fi, err := os.Stat(filepath.Join(dir, "disk.db.purges")); err != nil || fi.Size() == 0 {
		t.Fatalf("the directory is not marked for an empty start: %v %v", fi, err)
	}
}

// TestDiskFinalizedHeightSurvivesRestart: the finalized height of each
// chain is kept in the disk tier, so a restarted node classes settled
// answers as final before its first block list: a transaction list below
// it, asked first after the restart, is stored as final (a day's TTL),
// where it was volatile until a block list came.
func TestDiskFinalizedHeightSurvivesRestart(t *testing.T) {
	h := newHarness(t, withDisk(t.TempDir()))
	h.get(headList)
	final := h.p.truth.Final("CHAINX")
	if final <= 0 {
		t.Fatal("no finalized height after a block list")
	}
	h.node.Disk().Flush()
	h = h.restart()
	if got := h.p.truth.Final("CHAINX"); got != final {
		t.Fatalf("finalized height after the restart: %d, want %d", got, final)
	}
	target := finalTargets(h, 1)[0]
	if r := h.get(target); r.status != 200 || !strings.Contains(r.header["Cache-Status"], "ttl=86") {
		t.Fatalf("%s asked first after the restart: %q, want it stored as final", target, r.header["Cache-Status"])
	}
}
