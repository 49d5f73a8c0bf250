package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestSoak runs the whole soak for a few seconds against freshly built
// binaries: the tool keeps working, the edge passes it, and the faults did
// reach the answers.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs them for about 9 s")
	}
	bin := buildBinaries(t)
	// Fleet mode needs redis-server; without it the soak runs one node.
	_, noRedis := exec.LookPath("redis-server")
	var out bytes.Buffer
	res, err := run(t.Context(), options{
		simBin:   filepath.Join(bin, "explorer-sim"),
		edgeBin:  filepath.Join(bin, "explorer-edge"),
		duration: 6 * time.Second,
		rate:     300,
		workers:  8,
		phase:    400 * time.Millisecond,
		targets:  600,
		maxBytes: 16 << 20,
		moving:   true,
		fleet:    noRedis == nil,
		redisBin: "redis-server",
		// The warm-up's 600 misses take about 3 s of this budget.
		upRate:      100,
		upBurst:     300,
		hostile:     true,
		hammerConns: 16,
		hammerRate:  3000,
		traceRatio:  1,
		out:         &out,
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.pass {
		t.Fatalf("soak failed: %s", strings.Join(res.failures, "; "))
	}
	ld := res.load
	if ld.requests.Load() < 500 {
		t.Errorf("only %d requests in the load", ld.requests.Load())
	}
	if n := ld.failures.Load() + ld.envelopes.Load() + ld.staleErr.Load(); n == 0 {
		t.Errorf("no answer showed a fault (no 5xx, no envelope passed through, no stale-if-error)")
	}
	if ld.notModified.Load() == 0 || ld.gzipped.Load() == 0 || ld.status[400].Load() == 0 {
		t.Errorf("some kind of answer never came: 304 %d, gzip %d, 400 %d", ld.notModified.Load(), ld.gzipped.Load(), ld.status[400].Load())
	}
	if len(res.phasesRun) < 10 {
		t.Errorf("only %d fault phases ran", len(res.phasesRun))
	}
	// The new faults reached the edge: the stale hot keys were asked in
	// their phase, and every hostile client was answered.
	if hm := res.hammer; hm.runs.Load() == 0 || hm.c.requests.Load() == 0 {
		t.Errorf("the stale hot keys' phase did not run (%d runs, %d requests)", hm.runs.Load(), hm.c.requests.Load())
	}
	if h := res.hostile; h.idleRefused.Load() == 0 || h.framingOK.Load() == 0 || h.bigOK.Load() == 0 || h.forgedLimited.Load() == 0 || h.spraySent.Load() == 0 {
		t.Errorf("a hostile client was never answered as it should: %d idle refused, %d framing, %d big headers, %d forged limited, %d spray",
			h.idleRefused.Load(), h.framingOK.Load(), h.bigOK.Load(), h.forgedLimited.Load(), h.spraySent.Load())
	}
	if res.redis != nil && res.redis.pauses.Load() == 0 {
		t.Error("Redis was never paused")
	}
	// The moving chain: every target asked at least once (the first round
	// starts within 0.5 s), so answers declared final and newest pages of
	// both chains were judged.
	mv := res.mv
	if mv == nil {
		t.Fatal("the moving chain did not run")
	}
	if mv.requests.Load() < int64(res.mvTargets) || mv.final.Load() == 0 || mv.tips.Load() < 2 {
		t.Errorf("moving chain: %d requests over %d targets, %d declared final, %d newest pages judged",
			mv.requests.Load(), res.mvTargets, mv.final.Load(), mv.tips.Load())
	}
}

// buildBinaries builds explorer-edge and explorer-sim into a temporary
// directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"explorer-edge/cmd/explorer-edge", "explorer-edge/cmd/explorer-sim")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestMovingChainCatchesLongStaleWindow runs the moving-chain phase
// alone, twice at once: against an edge with the shipped stale windows and
// against one whose head answers may be served 30 s stale (the default
// before the per-class windows). Every target is asked twice, 3.5 s apart: more than the
// head's fresh time and stale window together (2 s), so the first edge
// fetches the newest page again, and the second serves the one of 3.5 s
// before, 3 or 4 blocks behind. The phase must pass the first and fail the
// second on the newest page.
func TestMovingChainCatchesLongStaleWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs two pairs for about 7 s")
	}
	bin := buildBinaries(t)
	start := func(name, cache string) *moving {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		m, err := startMoving(t.Context(), movingConfig{
			simBin: filepath.Join(bin, "explorer-sim"), edgeBin: filepath.Join(bin, "explorer-edge"),
			dir: dir, cache: cache, minGap: 3500 * time.Millisecond, maxGap: 3500 * time.Millisecond, t0: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.kill)
		return m
	}
	shipped, long := start("shipped", ""), start("long", "{stale_while_revalidate: 30s}")
	// Two rounds: the first within 0.5 s, the second 3.5 s after it ends
	// (with 2.5 s for a slow first round); a third could not start before 7 s.
	until := time.Now().Add(6500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, m := range []*moving{shipped, long} {
		wg.Go(func() { m.poll(t.Context(), until) })
	}
	wg.Wait()
	report := func(name string, m *moving) string {
		var b strings.Builder
		m.stats.print(&b)
		st := &m.stats
		return fmt.Sprintf("%s: %d requests, %d newest pages, worst lag %d, %d wrong, %d errors, %d reference disagreements\n%s",
			name, st.requests.Load(), st.tips.Load(), st.maxLag, st.wrong.Load(), st.errors.Load(), st.refDisagree.Load(), b.String())
	}
	t.Log(report("shipped", shipped))
	t.Log(report("stale_while_revalidate 30s", long))
	for _, m := range []*moving{shipped, long} {
		if st := &m.stats; st.requests.Load() < 2*int64(len(m.targets)) || st.errors.Load() > 0 || st.refDisagree.Load() > 0 {
			t.Errorf("a pair did not run cleanly: %d requests over %d targets, %d errors, %d reference disagreements",
				st.requests.Load(), len(m.targets), st.errors.Load(), st.refDisagree.Load())
		}
	}
	if n := shipped.stats.wrong.Load(); n > 0 || shipped.stats.maxLag > tipBound {
		t.Errorf("shipped stale windows: %d wrong answers, worst lag %d blocks", n, shipped.stats.maxLag)
	}
	if behind := long.stats.wrongBy["newest page"]; behind == 0 || long.stats.maxLag <= tipBound {
		t.Errorf("a 30 s head stale window went unnoticed: %d newest pages judged behind, worst lag %d blocks", behind, long.stats.maxLag)
	}
}

// TestCheckerCatchesWrongAnswers feeds the checker answers a correct edge
// could not give, so the soak cannot pass by checking nothing.
func TestCheckerCatchesWrongAnswers(t *testing.T) {
	ref := newReference()
	tgt := func(path string) *target {
		x := &target{route: routeBlocks, path: path, ref: path}
		if err := ask(ref, x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	good := tgt(routePaths[routeBlocks] + "?chainShortName=CHAINX&limit=2")
	other := tgt(routePaths[routeBlocks] + "?chainShortName=CHAINX&limit=3")
	invalid := &target{route: routeBlocks, path: routePaths[routeBlocks] + "?limit=2", invalid: true, wantCode: "50014"}
	envelope := func(code string) []byte {
		return []byte(`{"code":"` + code + `","msg":"x","data":[]}`)
	}
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	type answer struct {
		status  int
		headers map[string]string
		body    []byte
	}
	ok200 := map[string]string{"ETag": `"e1"`}
	noStore := map[string]string{"Cache-Control": "no-store"}
	cases := []struct {
		name   string
		t      *target
		sent   sent
		faulty bool // a fault was in force
		a      answer
		wrong  bool
	}{
		{"correct body", good, sent{}, false, answer{200, ok200, good.refBody}, false},
		{"correct body, gzip", good, sent{gzip: true}, false, answer{200, map[string]string{"ETag": `"e1"`, "Content-Encoding": "gzip"}, gz(good.refBody)}, false},
		{"gzip not asked for", good, sent{}, false, answer{200, map[string]string{"ETag": `"e1"`, "Content-Encoding": "gzip"}, gz(good.refBody)}, true},
		{"another target's body", good, sent{}, false, answer{200, ok200, other.refBody}, true},
		{"same ETag, other body", good, sent{}, false, answer{200, ok200, bytes.Replace(good.refBody, []byte(`"CHAINX"`), []byte(`"chainx"`), 1)}, true},
		{"no ETag", good, sent{}, false, answer{200, nil, good.refBody}, true},
		{"304 without If-None-Match", good, sent{}, false, answer{304, map[string]string{"ETag": `"e1"`}, nil}, true},
		{"304 for a bogus tag", good, sent{inm: `"zz"`, bogus: true}, false, answer{304, map[string]string{"ETag": `"zz"`}, nil}, true},
		{"304 matching", good, sent{inm: `"e1"`}, false, answer{304, map[string]string{"ETag": `"e1"`}, nil}, false},
		{"200 although the tag matched", good, sent{inm: `"e1"`}, false, answer{200, ok200, good.refBody}, true},
		{"503 without a fault", good, sent{}, false, answer{503, noStore, envelope("50001")}, true},
		{"503 under a fault", good, sent{}, true, answer{503, noStore, envelope("50001")}, false},
		{"502 with the wrong code", good, sent{}, true, answer{502, noStore, envelope("50001")}, true},
		{"504 without no-store", good, sent{}, true, answer{504, nil, envelope("50004")}, true},
		{"error that is no envelope", good, sent{}, true, answer{502, noStore, []byte(`{"code":"50026","msg":"x"}`)}, true},
		{"429 to the client", good, sent{}, true, answer{429, noStore, envelope("50011")}, true},
		{"400 for a valid request", good, sent{}, false, answer{400, noStore, envelope("50036")}, true},
		{"envelope not injected", good, sent{}, true, answer{200, noStore, []byte(`{"code":"50026","msg":"injected error envelope","data":[]}`)}, true},
		{"invalid, right code", invalid, sent{}, false, answer{400, noStore, envelope("50014")}, false},
		{"invalid, wrong code", invalid, sent{}, false, answer{400, noStore, envelope("50036")}, true},
		{"invalid, answered 200", invalid, sent{}, false, answer{200, ok200, good.refBody}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := newTimeline()
			if c.faulty {
				tl.spans = append(tl.spans, span{from: time.Now().Add(-time.Second), ph: phases[2]})
			}
			ck := &checker{t0: time.Now(), tl: tl}
			// A fresh copy of the target: ETags seen by one case do not leak into another.
			tc := &target{route: c.t.route, path: c.t.path, invalid: c.t.invalid, wantCode: c.t.wantCode,
				refStatus: c.t.refStatus, refCode: c.t.refCode, refBody: c.t.refBody}
			if c.name == "same ETag, other body" {
				tc.noteETag(`"e1"`, good.refBody)
				tc.addGood(bytes.Replace(good.refBody, []byte(`"CHAINX"`), []byte(`"chainx"`), 1))
			}
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			resp.SetStatusCode(c.a.status)
			for k, v := range c.a.headers {
				resp.Header.Set(k, v)
			}
			resp.SetBodyRaw(c.a.body)
			var cnt counts
			now := time.Now()
			ck.check(&cnt, nil, tc, c.sent, resp, now, now)
			if got := cnt.wrong.Load() > 0; got != c.wrong {
				t.Errorf("wrong = %v, want %v (%v)", got, c.wrong, ck.wrongs)
			}
		})
	}
}
