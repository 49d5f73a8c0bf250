package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const blockListPath = "/api/v5/chainx/block/block-list"

// blockListCalls is how many block-list questions explorer-sim received.
func (h *harness) blockListCalls() int64 { return h.sim.Stats().Routes[sim.RouteBlockList] }

// jsonDiff compares two answers field by field and returns the first
// difference ("" when equal).
func jsonDiff(a, b []byte) string {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return "edge answer: " + err.Error()
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return "upstream answer: " + err.Error()
	}
	return diffJSON("", x, y)
}

func diffJSON(at string, x, y any) string {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok || len(xv) != len(yv) {
			return fmt.Sprintf("%s: %v against %v", at, x, y)
		}
		keys := make([]string, 0, len(xv))
		for k := range xv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if d := diffJSON(at+"."+k, xv[k], yv[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		yv, ok := y.([]any)
		if !ok || len(xv) != len(yv) {
			return fmt.Sprintf("%s: %d items against %v", at, len(xv), y)
		}
		for i := range xv {
			if d := diffJSON(at+"["+strconv.Itoa(i)+"]", xv[i], yv[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(x, y) {
		return fmt.Sprintf("%s: %v against %v", at, x, y)
	}
	return ""
}

// blockListQuestions are every (page, limit) with page*limit <= 300.
func blockListQuestions() [][2]int {
	var out [][2]int
	for limit := 1; limit <= 100; limit++ {
		for page := 1; page*limit <= 300; page++ {
			out = append(out, [2]int{page, limit})
		}
	}
	return out
}

// TestBlockListAssembledEqualsUpstream: every block-list page without a
// height, for every (page, limit) with page*limit <= 300, is answered by
// the edge exactly as the upstream answers it at the same head, JSON
// compared field by field, under each explorer-sim profile: at a frozen
// head, and at heads that move between rounds. Those within the newest
// 300 blocks are assembled from the blocks of the three limit=100 pages
// (cache.block_pages; Source blocks, at most 3 calls a head); without
// block items each would be a call of its own.
func TestBlockListAssembledEqualsUpstream(t *testing.T) {
	for _, profile := range []string{"today", "vendor", "every"} {
		t.Run(profile, func(t *testing.T) {
			h := newUpstream(t, nil, withProfile(profile), noStale)
			h.start()
			chain := "CHAINX"
			questions := blockListQuestions()
			for round := 0; round < 3; round++ {
				if round > 0 {
					h.clock.Advance(1500 * time.Millisecond) // a block or two later, past the head's TTL
				}
				edge := make([][]byte, len(questions))
				before := h.blockListCalls()
				for i, q := range questions {
					if round > 0 && i%7 != 0 {
						continue // the moving rounds take a sample
					}
					target := fmt.Sprintf("%s?chainShortName=%s&page=%d&limit=%d", blockListPath, chain, q[0], q[1])
					r := h.get(target)
					if r.status != 200 || r.code() != "0" {
						t.Fatalf("round %d %s: %d %s", round, target, r.status, r.body)
					}
					edge[i] = r.body
					if e := h.cache.GetString(route.Table[route.BlockList].Path + "?chainShortName=" + chain +
						"&page=" + strconv.Itoa(q[0]) + "&limit=" + strconv.Itoa(q[1])); q[1] != 100 && (e == nil || e.Source != cache.SourceBlocks) {
						t.Errorf("round %d page %d limit %d: not assembled from blocks", round, q[0], q[1])
					}
				}
				calls := h.blockListCalls() - before
				t.Logf("%s round %d: %d upstream block-list calls for the questions asked at one head", profile, round, calls)
				if calls > 3 {
					t.Errorf("round %d: %d upstream block-list calls for %d questions at one head; want at most 3 (one per 100 blocks)", round, calls, len(questions))
				}
				for i, q := range questions {
					if edge[i] == nil {
						continue
					}
					target := fmt.Sprintf("%s?chainShortName=%s&page=%d&limit=%d", blockListPath, chain, q[0], q[1])
					if d := jsonDiff(edge[i], h.simGet(target)); d != "" {
						t.Fatalf("round %d page %d limit %d: the edge's answer differs from the upstream's at the same head: %s", round, q[0], q[1], d)
					}
				}
			}
		})
	}
}

// linkRe reads one link of a Link header.
var linkRe = regexp.MustCompile(`<([^>]*)>; rel="([a-z]+)"`)

// links is the Link header of r by relation.
func links(r resp) map[string]string {
	out := map[string]string{}
	for _, m := range linkRe.FindAllStringSubmatch(r.header["Link"], -1) {
		out[m[2]] = m[1]
	}
	return out
}

// heightsOf is the heights a block-list answer shows.
func heightsOf(t *testing.T, body []byte) []int64 {
	t.Helper()
	var env struct {
		Data []struct {
			BlockList []struct {
				Height string `json:"height"`
			} `json:"blockList"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || len(env.Data) != 1 {
		t.Fatalf("not a block list: %s", body)
	}
	var out []int64
	for _, b := range env.Data[0].BlockList {
		v, _ := strconv.ParseInt(b.Height, 10, 64)
		out = append(out, v)
	}
	return out
}

// pageThrough pages 10 pages of 20 from the newest page, a second (a
// block) between pages, following Link or asking page=N; it returns the
// duplicates and gaps seen among the heights.
func pageThrough(t *testing.T, h *harness, follow bool) (dups, gaps int) {
	t.Helper()
	target := blockListPath + "?chainShortName=CHAINX&limit=20"
	seen := map[int64]int{}
	var all []int64
	for page := 1; page <= 10; page++ {
		r := h.get(target)
		if r.status != 200 || r.code() != "0" {
			t.Fatalf("%s: %d %s", target, r.status, r.body)
		}
		for _, v := range heightsOf(t, r.body) {
			seen[v]++
			all = append(all, v)
		}
		h.clock.Advance(time.Second)
		if follow {
			next := links(r)["next"]
			if next == "" {
				t.Fatalf("page %d (%s) has no Link rel=next: %q", page, target, r.header["Link"])
			}
			target = next
		} else {
			target = fmt.Sprintf("%s?chainShortName=CHAINX&page=%d&limit=20", blockListPath, page+1)
		}
	}
	for _, n := range seen {
		dups += n - 1
	}
	sort.Slice(all, func(i, j int) bool { return all[i] > all[j] })
	for i := 1; i < len(all); i++ {
		if d := all[i-1] - all[i]; d > 1 {
			gaps += int(d - 1)
		}
	}
	return dups, gaps
}

// TestBlockListLinkPagesStayPut: a client paging 10 pages of 20 while the
// chain makes a block a second sees every block once following Link
// (pinned pages), and duplicates asking page=N (offset pages: each page
// starts a block lower than the last one ended).
func TestBlockListLinkPagesStayPut(t *testing.T) {
	for _, profile := range []string{"today", "vendor"} {
		t.Run(profile, func(t *testing.T) {
			h := newHarness(t, withProfile(profile))
			dups, gaps := pageThrough(t, h, false)
			t.Logf("offset pages: %d duplicates, %d gaps", dups, gaps)
			if dups == 0 && gaps == 0 {
				t.Errorf("offset pages while the chain moves: no duplicate and no gap; the test does not move the chain")
			}
			dups, gaps = pageThrough(t, h, true)
			t.Logf("pages following Link: %d duplicates, %d gaps", dups, gaps)
			if dups != 0 || gaps != 0 {
				t.Errorf("pages following Link: %d duplicates, %d gaps; want 0 and 0", dups, gaps)
			}
		})
	}
}

// TestBlockListPinnedPagesShared: 200 clients paging 10 pages of 20 from
// the same head, following Link, cost the upstream at most one block-list
// call per 100 blocks for their pages 2-10 (180 blocks: at most 2, and one
// more should the head page age meanwhile), and every client gets the
// same page at each step.
func TestBlockListPinnedPagesShared(t *testing.T) {
	h := newHarness(t, withProfile("vendor"))
	first := h.get(blockListPath + "?chainShortName=CHAINX&limit=20")
	if first.code() != "0" {
		t.Fatalf("first page: %s", first.body)
	}
	next := links(first)["next"]
	if !strings.Contains(next, "head=") {
		t.Fatalf("Link of the first page: %q", first.header["Link"])
	}
	h.clock.Advance(3 * time.Second) // the chain moves on; the pin holds
	before := h.blockListCalls()
	const clients = 200
	var wg sync.WaitGroup
	bodies := make([][]string, clients)
	errs := make(chan string, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := next
			for page := 2; page <= 10; page++ {
				r := h.get(target)
				if r.status != 200 || r.code() != "0" {
					errs <- fmt.Sprintf("client %d page %d: %d %s", c, page, r.status, r.body)
					return
				}
				bodies[c] = append(bodies[c], string(r.body))
				if page < 10 {
					target = links(r)["next"]
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	calls := h.blockListCalls() - before
	t.Logf("200 clients, pages 2-10 of 20 pinned: %d upstream block-list calls for 180 blocks", calls)
	if calls > 3 {
		t.Errorf("%d upstream block-list calls for pages 2-10 of 200 clients; want at most 3", calls)
	}
	for c := 1; c < clients; c++ {
		if !reflect.DeepEqual(bodies[c], bodies[0]) {
			t.Fatalf("client %d saw other pages than client 0", c)
		}
	}
	// The pages are the 180 blocks below the first page, in order.
	top := heightsOf(t, first.body)[0]
	want := top - 20
	for i, b := range bodies[0] {
		for _, v := range heightsOf(t, []byte(b)) {
			if v != want {
				t.Fatalf("page %d shows %d, want %d", i+2, v, want)
			}
			want--
		}
	}
}

// TestBlockListPinRefusedNamingHead: a pin above the newest block, and a
// page of a pin whose blocks have left the upstream's window and were
// never held, are refused with 50036 naming head; a page of the same old
// pin whose blocks are held is still answered. A pinned page of settled
// blocks is final; one of a pin combined with a height is refused.
func TestBlockListPinRefusedNamingHead(t *testing.T) {
	h := newHarness(t, withProfile("vendor"))
	first := h.get(blockListPath + "?chainShortName=CHAINX&limit=20")
	top := heightsOf(t, first.body)[0]
	refused := func(target, param string) {
		t.Helper()
		r := h.get(target)
		if r.status != 400 || r.code() != "50036" || !strings.Contains(string(r.body), "Parameter "+param+" error") {
			t.Errorf("%s: %d %s, want 400 50036 naming %s", target, r.status, r.body, param)
		}
	}
	refused(fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&page=2&limit=20", blockListPath, top+50), "head")
	refused(fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&height=%d", blockListPath, top, top), "head")
	refused(fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&page=%d&limit=20", blockListPath, top, top/20+2), "page")

	pinned := fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&page=2&limit=20", blockListPath, top)
	r := h.get(pinned)
	// Final: block-list's final lifetime (1 h: a block leaves the
	// upstream's window after 10000 blocks), immutable.
	if cc := r.header["Cache-Control"]; r.status != 200 || !strings.HasPrefix(cc, "public, max-age=3600,") || !strings.Contains(cc, "immutable") {
		t.Errorf("a pinned page of settled blocks: %d %q, want final (max-age=3600, immutable)", r.status, cc)
	}
	// 10100 blocks later the pin's heights are below the upstream's
	// window: its page 2 is still answered (held), its page 6 (never
	// held) is refused naming head.
	h.clock.Advance(10100 * time.Second)
	h.cache.Del(pinned) // the answer kept final: asked again from the items
	if r := h.get(pinned); r.status != 200 || !reflect.DeepEqual(heightsOf(t, r.body)[0], top-20) {
		t.Errorf("page 2 of an old pin whose blocks are held: %d %s", r.status, r.body)
	}
	refused(fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&page=6&limit=20", blockListPath, top), "head")
}

// TestBlockListPinnedPagesFollowAReorganization: a reorganization shows
// its new branch in pinned pages at the same heights: page 2 of a pin
// asked again after the edge saw the reorganization holds the upstream's
// blocks now at those heights (no duplicate, no gap, by height).
func TestBlockListPinnedPagesFollowAReorganization(t *testing.T) {
	h := newHarness(t, withProfile("vendor"), noStale)
	first := h.get(blockListPath + "?chainShortName=CHAINX&limit=20")
	top := heightsOf(t, first.body)[0]
	pinned := fmt.Sprintf("%s?chainShortName=CHAINX&head=%d&page=2&limit=20", blockListPath, top)
	before := h.get(pinned)
	h.sim.Reorg(30) // heights top-29 .. top replaced
	h.clock.Advance(1100 * time.Millisecond)
	h.get(blockListPath + "?chainShortName=CHAINX&limit=20") // the edge sees the new branch
	testkit.WaitFor(t, "the reorganization found", func() bool {
		return testutil.ToFloat64(h.m.Reorgs.WithLabelValues("CHAINX")) >= 1
	})
	after := h.get(pinned)
	if after.status != 200 || bytes.Equal(after.body, before.body) {
		t.Fatalf("pinned page 2 after the reorganization: %d, unchanged: %q", after.status, after.header["Cache-Status"])
	}
	// The upstream's blocks at those heights now: its newest 100, by height.
	now := map[int64]string{}
	var env struct {
		Data []struct {
			BlockList []struct{ Height, Hash string } `json:"blockList"`
		} `json:"data"`
	}
	json.Unmarshal(h.simGet(blockListPath+"?chainShortName=CHAINX&limit=100"), &env)
	for _, b := range env.Data[0].BlockList {
		v, _ := strconv.ParseInt(b.Height, 10, 64)
		now[v] = b.Hash
	}
	json.Unmarshal(after.body, &env)
	want := top - 20
	for _, b := range env.Data[0].BlockList {
		v, _ := strconv.ParseInt(b.Height, 10, 64)
		if v != want || b.Hash != now[v] {
			t.Errorf("pinned page 2 shows %d %s, want %d %s", v, b.Hash, want, now[want])
		}
		want--
	}
	if want != top-40 {
		t.Errorf("pinned page 2 ends above %d", want+1)
	}
}

// TestBlockListFromItemsCostsNoCall: after the newest page of 100 was
// had, every variant it covers is answered by BlockListFromItems (what the
// stream's poller can refresh variants with) without an upstream call,
// equal to the upstream's answer; a variant beyond it, or with the head
// page no longer current, is not (nil).
func TestBlockListFromItemsCostsNoCall(t *testing.T) {
	h := newHarness(t, noStale)
	key := func(page, limit int) string {
		return fmt.Sprintf("%s?chainShortName=CHAINX&page=%d&limit=%d", blockListPath, page, limit)
	}
	if r := h.get(key(1, 100)); r.code() != "0" {
		t.Fatalf("the newest 100: %s", r.body)
	}
	before := h.blockListCalls()
	for _, v := range [][2]int{{1, 5}, {1, 10}, {2, 20}, {4, 25}} {
		e := h.p.BlockListFromItems("CHAINX", key(v[0], v[1]))
		if e == nil || e.Source != cache.SourceBlocks {
			t.Fatalf("page %d limit %d: not answered from the items", v[0], v[1])
		}
		var body []byte
		e.WithIdentity(func(b []byte) error { body = bytes.Clone(b); return nil })
		if d := jsonDiff(body, h.simGet(key(v[0], v[1]))); d != "" {
			t.Errorf("page %d limit %d: %s", v[0], v[1], d)
		}
	}
	if n := h.blockListCalls() - before - 4; n != 0 { // the 4 simGets
		t.Errorf("%d upstream calls for variants the newest 100 covers", n)
	}
	if h.p.BlockListFromItems("CHAINX", key(3, 50)) != nil {
		t.Error("a variant beyond the newest 100 answered from the items")
	}
	h.clock.Advance(1100 * time.Millisecond)
	if h.p.BlockListFromItems("CHAINX", key(1, 7)) != nil {
		t.Error("a variant answered from a head page no longer current")
	}
}
