package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

func maxAge(r resp) int {
	n, _ := cacheControl(r.header["Cache-Control"])
	return int(n)
}

func noStale(c *config.Config, _ *sim.Config) { c.Cache.StaleWhileRevalidate = config.PerClass{} }

func TestFinalityAwareTTLs(t *testing.T) {
	// A page down from a height (height-down) is what moves; the vendor's
	// block at a height alone is final (TestBlockAtAHeightIsFinal).
	h := newHarness(t, noStale, simProfile("vendor,height-down"))
	list := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	if r := h.get(list); r.status != 200 || maxAge(r) > 1 {
		t.Fatalf("newest block page: %d max-age %d, want head TTL", r.status, maxAge(r))
	}
	final := h.p.truth.Final("CHAINX")
	if final != h.sim.FinalizedHeight("CHAINX") {
		t.Fatalf("edge final height %d, sim's %d", final, h.sim.FinalizedHeight("CHAINX"))
	}
	doneTxs := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", final-1)
	if r := h.get(doneTxs); maxAge(r) != 86400 {
		t.Fatalf("done block's transactions: max-age %d, want final 86400", maxAge(r))
	}
	// Its totalPage and the reachable window move with the head.
	atHeight := fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=5", final-10)
	if r := h.get(atHeight); maxAge(r) != 1 {
		t.Fatalf("block list of done blocks: max-age %d, want head 1", maxAge(r))
	}

	head := h.sim.Head("CHAINX")
	pendingTxs := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", head)
	if r := h.get(pendingTxs); maxAge(r) > 1 {
		t.Fatalf("pending block's transactions: max-age %d, want head TTL", maxAge(r))
	}

	h.clock.Advance(10 * time.Second) // ten blocks later
	before := h.upstreamCalls()
	h.get(list) // the head page is refetched...
	if h.upstreamCalls() != before+1 {
		t.Fatal("head page was not refetched after its TTL")
	}
	before = h.upstreamCalls()
	if r := h.get(doneTxs); !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") || h.upstreamCalls() != before {
		t.Fatalf("done block's transactions were refetched: %q", r.header["Cache-Status"])
	}
	// ...and the block that was pending is done now: refetched once, final.
	r := h.get(pendingTxs)
	if h.upstreamCalls() != before+1 || maxAge(r) != 86400 {
		t.Fatalf("formerly pending block: calls %d, max-age %d; want a refetch and final", h.upstreamCalls()-before, maxAge(r))
	}
}

func TestStaleWhileRevalidateOneRefresh(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=30"
	first := h.get(target)
	h.clock.Advance(1500 * time.Millisecond) // past the 1 s head TTL, within the head's 1 s stale window
	h.sim.ResetStats()
	// The refresh is held until all 100 are answered, however long they
	// take (a 300 ms delay let it land mid-run on a busy machine).
	gate := h.holdUpstream()
	defer gate.release()
	var wg sync.WaitGroup
	var mu sync.Mutex
	stale := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.get(target)
			mu.Lock()
			defer mu.Unlock()
			if strings.Contains(r.header["Cache-Status"], "detail=stale-while-revalidate") && bytes.Equal(r.body, first.body) {
				stale++
			}
		}()
	}
	wg.Wait()
	if stale != 100 {
		t.Fatalf("%d of 100 requests were answered stale at once", stale)
	}
	gate.release()
	// The refresh has landed when the key is a fresh hit: the stale
	// answers carry the same "hit; ttl=" prefix (with a negative ttl and a
	// detail), so waiting on the prefix alone read the count too early.
	testkit.WaitFor(t, "the refresh", func() bool {
		cs := h.get(target).header["Cache-Status"]
		return strings.HasPrefix(cs, "explorer-edge; hit; ttl=") && !strings.Contains(cs, "ttl=-") && !strings.Contains(cs, "detail=")
	})
	if n := h.upstreamCalls(); n != 1 {
		t.Fatalf("100 stale requests made %d upstream calls, want 1", n)
	}
}

func TestStaleIfError(t *testing.T) {
	kinds := []struct {
		name   string
		fault  sim.Faults
		detail string
		status int
		code   string
	}{
		{"http500", sim.Faults{HTTP500: 1}, "upstream-error", 502, "50026"},
		{"hang", sim.Faults{Hang: 1}, "timeout", 504, "50004"},
		{"drop", sim.Faults{Drop: 1}, "upstream-error", 502, "50026"},
		{"malformed", sim.Faults{Malformed: 1}, "malformed", 502, "50026"},
		{"truncated", sim.Faults{Truncated: 1}, "malformed", 502, "50026"},
		{"http429", sim.Faults{HTTP429: 1, RetryAfter: 1}, "quota", 503, "50001"},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h := newHarness(t, func(c *config.Config, _ *sim.Config) {
				c.Cache.StaleWhileRevalidate = config.SameForAll(time.Second)
				c.Cache.StaleIfError = time.Minute
				c.Upstream.Timeout = 300 * time.Millisecond
				c.Upstream.Retries = 1
				c.Upstream.BreakerFailures = 100
			})
			target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
			good := h.get(target)
			h.sim.SetFaults(k.fault)
			h.clock.Advance(5 * time.Second) // expired, within stale_if_error
			r := h.get(target)
			if r.status != 200 || !bytes.Equal(r.body, good.body) || !strings.Contains(r.header["Cache-Status"], "detail=stale-if-error-"+k.detail) {
				t.Fatalf("within stale_if_error: %d %q %.80s", r.status, r.header["Cache-Status"], r.body)
			}
			h.clock.Advance(2 * time.Minute) // beyond it
			r = h.get(target)
			if r.status != k.status || r.code() != k.code {
				t.Fatalf("beyond stale_if_error: %d %s, want %d %s", r.status, r.body, k.status, k.code)
			}
			if k.name == "http429" && r.header["Retry-After"] == "" {
				t.Error("503 for a throttled upstream has no Retry-After")
			}
			// Nothing of the failed calls was cached: once the sim is
			// well, the next request is a miss that stores a fresh answer.
			h.sim.ClearFaults()
			testkit.WaitFor(t, "the upstream to be callable", func() bool {
				r = h.get(target)
				return r.status == 200
			})
			if !strings.Contains(r.header["Cache-Status"], "fwd=miss") {
				t.Fatalf("after recovery: %q, want a miss", r.header["Cache-Status"])
			}
		})
	}
}

func crossIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var env struct {
		Code string
		Data []struct {
			ID string `json:"id"`
		}
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Code != "0" {
		t.Fatalf("bad answer %s: %v", body, err)
	}
	var ids []string
	for _, d := range env.Data {
		if len(ids) == 0 || ids[len(ids)-1] != d.ID {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

func TestPerHashBatches(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Cache.BatchWindow = 50 * time.Millisecond })
	hashes := h.sim.CrossHashes("TRADE_ZONE", 40)
	multi := func(hs ...string) string {
		return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hs, ",")
	}
	fills := func(hash string) string {
		return "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hash
	}

	t.Run("17 of 20 cached asks for 3", func(t *testing.T) {
		if r := h.get(multi(hashes[:17]...)); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		h.sim.ResetStats()
		r := h.get(multi(hashes[:20]...))
		st := h.sim.Stats()
		if st.Hashes["transaction-multi"] != 3 || st.RequestsTotal != 1 {
			t.Fatalf("asked the sim for %d hashes in %d calls, want 3 in 1", st.Hashes["transaction-multi"], st.RequestsTotal)
		}
		if !strings.Contains(r.header["Cache-Status"], "fwd=partial") {
			t.Fatalf("Cache-Status %q, want fwd=partial", r.header["Cache-Status"])
		}
		if want := h.simGet(multi(hashes[:20]...)); !bytes.Equal(r.body, want) {
			t.Fatalf("assembled answer differs from the sim's:\n%s\n%s", r.body, want)
		}
	})

	t.Run("fills after multi is a hit", func(t *testing.T) {
		h.sim.ResetStats()
		r := h.get(fills(hashes[5]))
		if h.upstreamCalls() != 0 || !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") {
			t.Fatalf("%q with %d upstream calls", r.header["Cache-Status"], h.upstreamCalls())
		}
		if want := h.simGet(fills(hashes[5])); !bytes.Equal(r.body, want) {
			t.Fatalf("answer differs from the sim's")
		}
	})

	t.Run("20 concurrent single misses are one batch", func(t *testing.T) {
		h.sim.ResetStats()
		var wg sync.WaitGroup
		for _, hash := range hashes[20:40] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := h.get(fills(hash))
				if ids := crossIDs(t, r.body); len(ids) != 1 || ids[0] != hash {
					t.Errorf("fills %s answered %v", hash, ids)
				}
			}()
		}
		wg.Wait()
		st := h.sim.Stats()
		if st.Routes["transaction-multi"] != 1 || st.Routes["transaction-fills"] != 0 || st.Hashes["transaction-multi"] != 20 {
			t.Fatalf("sim saw %v routes, %v hashes; want one 20-hash transaction-multi", st.Routes, st.Hashes)
		}
	})

	t.Run("order, duplicates and empty hashes", func(t *testing.T) {
		unknown := h.sim.UnknownHash(7)
		target := multi(hashes[3], strings.ToUpper(hashes[1][2:]), hashes[3], unknown, hashes[2])
		target = strings.Replace(target, "txId="+hashes[3]+","+strings.ToUpper(hashes[1][2:]), "txId="+hashes[3]+",0x"+strings.ToUpper(hashes[1][2:]), 1)
		r := h.get(target)
		ids := crossIDs(t, r.body)
		if want := []string{hashes[3], hashes[1], hashes[2]}; fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("ids %v, want %v", ids, want)
		}
		h.sim.ResetStats()
		if r := h.get(fills(unknown)); r.code() != "0" || !bytes.Contains(r.body, []byte(`"data":[]`)) || h.upstreamCalls() != 0 {
			t.Fatalf("unknown hash not negatively cached: %s, %d calls", r.body, h.upstreamCalls())
		}
		h.clock.Advance(6 * time.Second) // past the 5 s negative TTL
		h.get(fills(unknown))            // stale now: served, refreshed once in the background
		testkit.WaitFor(t, "the negative entry to be refetched", func() bool { return h.upstreamCalls() == 1 })
	})
}

// An upstream answer whose record matches no hash asked is never split by
// hash: the request is fetched and cached whole.
func TestUnmappableBatchFallsBackToWholeRequest(t *testing.T) {
	var bogus string
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/transaction-multi") {
				next.ServeHTTP(w, r)
				return
			}
			rec := &bufferedWriter{header: http.Header{}}
			next.ServeHTTP(rec, r)
			body := rec.buf.Bytes()
			// Rewrite the first record's id to a hash nobody asked for.
			if i := bytes.Index(body, []byte(`"id":"`)); i >= 0 {
				body = append(append(append([]byte{}, body[:i+6]...), bogus...), body[i+6+66:]...)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.status)
			w.Write(body)
		})
	}
	h := newHarnessWrapped(t, wrap, func(c *config.Config, _ *sim.Config) {
		c.Cache.StaleWhileRevalidate = config.SameForAll(time.Second)
		c.Cache.StaleIfError = 48 * time.Hour
		c.Upstream.Retries = 0
		c.Upstream.BreakerFailures = 100
	})
	bogus = h.sim.UnknownHash(99)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 2)
	target := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ",")
	r := h.get(target)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if bytes.Contains(r.body, []byte(hashes[0])) && !bytes.Contains(r.body, []byte(bogus)) {
		t.Fatal("served a record under a hash it does not carry")
	}
	if got := counterValue(t, h, "explorer_edge_batch_unmapped_total"); got != 1 {
		t.Fatalf("batch_unmapped_total = %v, want 1", got)
	}
	// No per-hash entry was made from that answer.
	for _, hash := range hashes {
		if e := h.cache.GetString(route.HashKey("TRADE_ZONE", hash)); e != nil {
			t.Fatalf("hash %s of the unmappable answer was cached per hash: %s", hash, e.Body)
		}
	}
	// The whole request is cached.
	before := h.upstreamCalls()
	hit := h.get(target)
	if !strings.HasPrefix(hit.header["Cache-Status"], "explorer-edge; hit") || h.upstreamCalls() != before {
		t.Fatalf("whole request not cached: %q", hit.header["Cache-Status"])
	}
	// Expired and the upstream failing, that whole answer stands in, as
	// any cached answer within stale_if_error does.
	_, ttl, _ := strings.Cut(hit.header["Cache-Status"], "ttl=")
	secs, err := strconv.Atoi(ttl)
	if err != nil {
		t.Fatalf("Cache-Status %q", hit.header["Cache-Status"])
	}
	h.clock.Advance(time.Duration(secs+5) * time.Second)
	h.sim.SetFaults(sim.Faults{HTTP500: 1})
	r = h.get(target)
	if r.status != 200 || !bytes.Equal(r.body, hit.body) || !strings.Contains(r.header["Cache-Status"], "detail=stale-if-error-upstream-error") {
		t.Fatalf("expired, upstream failing: %d %q %.80s", r.status, r.header["Cache-Status"], r.body)
	}
}

type bufferedWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header         { return b.header }
func (b *bufferedWriter) WriteHeader(s int)           { b.status = s }
func (b *bufferedWriter) Write(p []byte) (int, error) { return b.buf.Write(p) }

// counterValue reads one unlabelled metric from the harness's registry.
func counterValue(t testing.TB, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				if c := m.GetCounter(); c != nil {
					sum += c.GetValue()
				} else if g := m.GetGauge(); g != nil {
					sum += g.GetValue()
				}
			}
			return sum
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
