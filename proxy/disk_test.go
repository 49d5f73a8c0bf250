package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/node"
	"explorer-edge/sim"
)

// The disk tier end to end (docs/disk.md): a node with cache.disk_path
// keeps its final answers across a restart, a kill -9 included, and
// nothing a purge or a reorganization removed comes back from it.

// withDisk turns the disk tier on in dir.
func withDisk(dir string) harnessOpt {
	return func(c *config.Config, _ *sim.Config) {
		c.Cache.DiskPath, c.Cache.DiskMaxBytes = dir, 64<<20
	}
}

// finalTargets are n transaction-list pages of done blocks below the
// finalized height: final answers, once the edge knows that height (ask
// the newest block page first).
func finalTargets(h *harness, n int) []string {
	final := h.sim.FinalizedHeight("CHAINX")
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", final-1-int64(i))
	}
	return out
}

const headList = "/api/v5/chainx/block/block-list?chainShortName=chainx"

// restart closes h's edge and starts another on the same configuration
// (the same disk_path), explorer-sim and clock.
func (h *harness) restart() *harness {
	h.t.Helper()
	if err := h.node.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h2 := h.sibling()
	h2.log = h.log
	h2.start()
	return h2
}

// isDiskHit reports whether an answer came from the disk tier.
func isDiskHit(r resp) bool { return strings.Contains(r.header["Cache-Status"], "detail=disk") }

// TestDiskTier: a final answer is written to the disk tier once it is
// decided; a memory hit never reads the disk; after a restart the answer
// is a disk hit ("hit; detail=disk", no upstream call), kept in memory
// and not written back; head answers are never written. Per-hash items
// (transaction-multi) come back from the disk too.
func TestDiskTier(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, withDisk(dir))
	h.get(headList)
	targets := finalTargets(h, 5)
	h.warm(targets...)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(h.sim.CrossHashes("TRADE_ZONE", 3), ",")
	if r := h.get(multi); r.status != 200 || r.code() != "0" {
		t.Fatalf("%s: %d %s", multi, r.status, r.body)
	}
	d := h.node.Disk()
	d.Flush()
	st := d.Stats()
	if st.Writes < int64(len(targets)) || st.Hits+st.Misses == 0 {
		t.Fatalf("after the fills: %+v, want %d final answers written (and the misses asked of the disk)", st, len(targets))
	}
	reads := st.Hits + st.Misses
	for range 3 {
		h.get(targets[0]) // memory hits
	}
	if st := d.Stats(); st.Hits+st.Misses != reads {
		t.Fatalf("memory hits read the disk: %+v", st)
	}

	h = h.restart()
	d = h.node.Disk()
	written := d.Stats().Writes
	before := h.upstreamCalls()
	bodies := map[string][]byte{}
	for _, target := range targets {
		r := h.get(target)
		if r.status != 200 || !isDiskHit(r) {
			t.Fatalf("%s after the restart: %d %q, want a disk hit", target, r.status, r.header["Cache-Status"])
		}
		bodies[target] = r.body
		if r := h.get(target); isMiss(r) || isDiskHit(r) {
			t.Fatalf("%s asked again: %q, want a memory hit", target, r.header["Cache-Status"])
		}
	}
	if r := h.get(multi); r.status != 200 || !isDiskHit(r) {
		t.Errorf("%s after the restart: %q, want its items from the disk", multi, r.header["Cache-Status"])
	}
	if n := h.upstreamCalls() - before; n != 0 {
		t.Errorf("%d upstream calls after the restart, want 0", n)
	}
	for target, body := range bodies {
		if !bytes.Equal(body, h.simGet(target)) {
			t.Errorf("%s from the disk differs from the upstream's answer", target)
		}
	}
	d.Flush()
	if st := d.Stats(); st.Writes != written {
		t.Errorf("disk hits were written back: %d writes, %d before", st.Writes, written)
	}
	h.get(headList) // head: not final, never written
	d.Flush()
	if st := d.Stats(); st.Writes != written {
		t.Errorf("a head answer was written: %d writes, %d before", st.Writes, written)
	}
	t.Logf("%+v", d.Stats())
}

// TestDiskPurgeSurvivesRestart: every selector removes what it selects
// from the disk tier before the purge answers, so that after a restart
// (no purge log left on a single node) the purged answer is fetched
// again, not served from the disk, while the rest still are.
func TestDiskPurgeSurvivesRestart(t *testing.T) {
	for _, c := range []struct {
		name string
		body func(h *harness, target string, height int64) string
	}{
		{"url", func(_ *harness, target string, _ int64) string { return fmt.Sprintf(`{"url":%q}`, target) }},
		{"heights", func(_ *harness, _ string, height int64) string {
			return fmt.Sprintf(`{"heights":{"chain":"CHAINX","from":%d,"to":%d}}`, height, height)
		}},
		{"url soft", func(_ *harness, target string, _ int64) string { return fmt.Sprintf(`{"url":%q,"soft":true}`, target) }},
		{"route", func(*harness, string, int64) string { return `{"route":"transaction-list","chain":"CHAINX"}` }},
		{"all", func(*harness, string, int64) string { return `{"all":true}` }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, withDisk(t.TempDir()), withPurgeToken)
			h.get(headList)
			targets := finalTargets(h, 3)
			h.warm(targets...)
			h.node.Disk().Flush()
			height := h.sim.FinalizedHeight("CHAINX") - 1 // targets[0]'s
			res := h.purge(c.body(h, targets[0], height))
			if res.Disk < 1 {
				t.Fatalf("purge %s: %+v, want the disk entry counted", c.name, res)
			}
			h = h.restart()
			before := h.upstreamCalls()
			if r := h.get(targets[0]); !isMiss(r) {
				t.Fatalf("the purged %s after a restart: %q, want it fetched again", targets[0], r.header["Cache-Status"])
			}
			kept := c.name != "route" && c.name != "all"
			for _, target := range targets[1:] {
				if r := h.get(target); isDiskHit(r) != kept {
					t.Errorf("%s after the restart: %q (the purge selected it: %v)", target, r.header["Cache-Status"], !kept)
				}
			}
			t.Logf("%s: %+v, %d upstream calls after the restart", c.name, res, h.upstreamCalls()-before)
		})
	}
}

// TestDiskReorgSurvivesRestart: a reorganization deeper than the
// finalized height replaces final answers; its purge removes them from
// the disk tier before it returns, so after a restart every answer of the
// old branch is fetched again and what the edge serves is what the
// upstream says now. (TestReorgDeeperThanThePageIsProbedToItsFork is the
// same reorganization without a restart.)
func TestDiskReorgSurvivesRestart(t *testing.T) {
	const depth = 41
	h := newHarness(t, withDisk(t.TempDir()))
	tx := func(height int64) string {
		return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	}
	for range 60 {
		h.clock.Advance(3 * time.Second)
		h.get(headList)
	}
	head := h.sim.Head("CHAINX")
	var old []string
	for hh := head - depth - 5; hh <= h.p.truth.Final("CHAINX"); hh++ {
		h.get(tx(hh))
		old = append(old, tx(hh))
	}
	d := h.node.Disk()
	d.Flush()
	if d.Stats().Entries < int64(len(old)) {
		t.Fatalf("%d entries on disk, want the %d final transaction lists", d.Stats().Entries, len(old))
	}
	h.sim.SetFaults(sim.Faults{Reorg: depth})
	h.clock.Advance(time.Second + time.Millisecond)
	h.get(headList)
	testkit.WaitFor(t, "the reorg found", func() bool { return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) > 0 })
	h = h.restart() // Close waits for the probes: the purge is over
	deleted := d.Stats().Deleted
	wrong, fromDisk := 0, 0
	for _, target := range old {
		r := h.get(target)
		if isDiskHit(r) {
			fromDisk++
		}
		if !bytes.Equal(r.body, h.simGet(target)) {
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d transaction lists of the replaced branch served after the restart", wrong, len(old))
	}
	t.Logf("%d old answers, %d deleted from the disk by the reorganization, %d still disk hits (below the fork)", len(old), deleted, fromDisk)
}

// TestDiskCorruptFile: a store file spoiled while the node was down
// (bytes overwritten across it) crashes nothing: every answer is still
// right, from the disk when its record checks out, else from the
// upstream.
func TestDiskCorruptFile(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, path string)
	}{
		{"records", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// A byte inside every other answer's gzip payload: those
			// records fail their checksum.
			n := 0
			for i := 0; ; i += 64 {
				j := bytes.Index(b[i:], []byte{0x1f, 0x8b, 0x08})
				if j < 0 {
					break
				}
				i += j
				if n++; n%2 == 0 && i+40 < len(b) {
					b[i+40] ^= 0x5a
				}
			}
			if n < 10 {
				t.Fatalf("found %d answers in the file", n)
			}
			os.WriteFile(path, b, 0o600)
		}},
		{"garbage", func(t *testing.T, path string) {
			os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 4096), 0o600)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			h := newHarness(t, withDisk(dir))
			h.get(headList)
			targets := finalTargets(h, 40)
			h.warm(targets...)
			h.node.Close(context.Background())
			c.spoil(t, filepath.Join(dir, "disk.db"))
			h2 := h.sibling()
			h2.start()
			hits := 0
			for _, target := range targets {
				r := h2.get(target)
				if r.status != 200 || !bytes.Equal(r.body, h2.simGet(target)) {
					t.Fatalf("%s from a spoiled file: %d %q", target, r.status, r.header["Cache-Status"])
				}
				if isDiskHit(r) {
					hits++
				}
			}
			t.Logf("%d of %d answers from the spoiled file, %+v", hits, len(targets), h2.node.Disk().Stats())
		})
	}
}

// TestDiskWarmRestartAfterKill runs the real binary: it fills 300 final
// answers with the disk tier on, is killed with SIGKILL once the disk
// says it wrote them, and restarts on the same directory; the same 300
// questions then reach the upstream at most 3 times (1%). A url purge
// answered just before the kill holds across it.
func TestDiskWarmRestartAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	n := 300 // DISK_RESTART_N=20000 for the full size (docs/disk.md)
	if v, err := strconv.Atoi(os.Getenv("DISK_RESTART_N")); err == nil && v > 0 {
		n = v
	}
	bin := filepath.Join(t.TempDir(), "explorer-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "explorer-edge/cmd/explorer-edge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	h := newUpstream(t, nil)
	dir := t.TempDir()
	edge := startBinary(t, bin, h.cfg.Upstream.BaseURL, dir)
	edge.get(t, headList)
	targets := finalTargets(h, n)
	for _, target := range targets {
		if status, _ := edge.get(t, target); status != 200 {
			t.Fatalf("%s: %d", target, status)
		}
	}
	testkit.WaitFor(t, "the final answers on disk", func() bool { return edge.metric(t, "explorer_edge_disk_writes_total") >= float64(n) })
	purged := targets[0]
	if status, body := edge.post(t, "/purge", fmt.Sprintf(`{"url":%q}`, purged)); status != 200 || !strings.Contains(body, `"disk":1`) {
		t.Fatalf("purge: %d %s", status, body)
	}
	edge.kill(t)

	edge = startBinary(t, bin, h.cfg.Upstream.BaseURL, dir)
	before := h.upstreamCalls() // the self-check's calls are over once it listens
	for _, target := range targets {
		if status, _ := edge.get(t, target); status != 200 {
			t.Fatalf("%s after the restart: %d", target, status)
		}
	}
	calls := h.upstreamCalls() - before
	hits := edge.metric(t, "explorer_edge_disk_hits_total")
	t.Logf("after SIGKILL and a restart: %d upstream calls for %d questions (%.2f%%), %v disk hits", calls, n, 100*float64(calls)/float64(n), hits)
	if calls < 1 {
		t.Errorf("the purged answer came back from the disk after the kill")
	}
	if calls > int64(n/100) {
		t.Errorf("%d upstream calls for %d questions after the restart, want at most %d (1%%)", calls, n, n/100)
	}
}

// binaryEdge is explorer-edge running as its own process.
type binaryEdge struct {
	cmd           *exec.Cmd
	addr, admin   string
	logs          *testkit.LogBuffer
	exited        chan struct{}
	killedByTest  bool
	purgeTokenHdr string
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startBinary runs bin with the disk tier in dir, in front of upstream,
// and waits for /healthz.
func startBinary(t *testing.T, bin, upstream, dir string) *binaryEdge {
	t.Helper()
	e := &binaryEdge{addr: freeAddr(t), admin: freeAddr(t), logs: &testkit.LogBuffer{}, exited: make(chan struct{}),
		purgeTokenHdr: "Bearer " + testPurgeToken}
	cfg := fmt.Sprintf(`listen: %q
admin_listen: %q
upstream:
  base_url: %q
  api_key: %q
  secret_key: %q
  passphrase: %q
  rate: 10000
  burst: 10000
cache:
  max_bytes: 67108864
  disk_path: %q
  disk_max_bytes: 1073741824
admin:
  purge_token: %q
log:
  level: warn
`, e.addr, e.admin, upstream, sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase, dir, testPurgeToken)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cmd = exec.Command(bin, "-config", path)
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.cmd.Wait(); close(e.exited) }()
	t.Cleanup(func() {
		if !e.killedByTest {
			e.cmd.Process.Signal(syscall.SIGTERM)
			<-e.exited
		}
	})
	testkit.WaitFor(t, "explorer-edge serving", func() bool {
		select {
		case <-e.exited:
			t.Fatalf("explorer-edge exited:\n%s", e.logs.String())
		default:
		}
		res, err := http.Get("http://" + e.admin + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	return e
}

func (e *binaryEdge) get(t *testing.T, target string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + e.addr + target)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

func (e *binaryEdge) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+e.admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", e.purgeTokenHdr)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

// metric reads one unlabelled series from the edge's /metrics.
func (e *binaryEdge) metric(t *testing.T, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(b.String())
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// kill ends the process with SIGKILL: nothing of it runs after.
func (e *binaryEdge) kill(t *testing.T) {
	e.killedByTest = true
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.exited
}

// TestDiskFleetPurge: a purge sent to one node of a fleet removes what it
// selects from the disk tier of every node (purge by route: the Redis
// copy stays, judged by tags), and a node that was down while it was sent
// judges its own disk entries by the fleet's purge log when it comes
// back: neither serves the purged answer from its disk, after a restart
// either.
func TestDiskFleetPurge(t *testing.T) {
	rdb := startRedis(t)
	h := newUpstream(t, nil, withPurgeToken, func(c *config.Config, _ *sim.Config) { c.Shared.Timeout = time.Second })
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	edge := func(dir string) *fleetEdge {
		e := &fleetEdge{harness: h.sibling()}
		e.cfg.Shared.RedisAddr = rdb.addr
		e.cfg.Cache.DiskPath, e.cfg.Cache.DiskMaxBytes = dir, 64<<20
		e.shared = e.startNode(NodeOptions{Options: node.Options{Fleet: purgeFleet(nil)}}).Fleet()
		return e
	}
	edges := []*fleetEdge{edge(dirs[0]), edge(dirs[1]), edge(dirs[2])}
	target := finalTarget(h, 3)
	warmAll(t, target, edges...)
	for _, e := range edges {
		e.node.Disk().Flush()
		if e.node.Disk().Stats().Entries == 0 {
			t.Fatal("the final answer is not on every node's disk")
		}
	}
	edges[2].node.Close(context.Background()) // down while the purge is sent
	h.clock.Advance(time.Second)              // a purge selects answers older than itself
	edges[0].purge(`{"route":"transaction-list"}`)
	testkit.WaitFor(t, "the purge on the second node", func() bool {
		return testutil.ToFloat64(edges[1].m.Purges.WithLabelValues("route", "hard")) == 1
	})
	if d := edges[1].node.Disk().Stats().Deleted; d != 1 {
		t.Fatalf("the second node deleted %d disk entries, want 1", d)
	}
	for i, dir := range dirs[1:] {
		edges[1+i].node.Close(context.Background())
		e := edge(dir)
		if r := e.get(target); r.status != 200 || isDiskHit(r) || r.header["Age"] != "0" {
			t.Errorf("node %d restarted after the purge: %q, Age %s; want the answer fetched again", 2+i, r.header["Cache-Status"], r.header["Age"])
		}
	}
}
