package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"explorer-edge/config"
	"explorer-edge/proxy/route"
	"explorer-edge/sim"
)

func multiTarget(hashes ...string) string {
	return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ",")
}

func fillsTarget(hash string) string {
	return "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hash
}

// withProfile starts explorer-sim with the readings named (sim.ParseProfile).
func withProfile(names string) harnessOpt {
	return func(_ *config.Config, s *sim.Config) {
		p := sim.MustProfile(names)
		s.Profile = &p
	}
}

// crossRecordsOf is the records of a cross-chain answer, each as a map.
func crossRecordsOf(t *testing.T, r resp) []map[string]any {
	t.Helper()
	var env struct {
		Code string           `json:"code"`
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || r.status != 200 || env.Code != "0" {
		t.Fatalf("answer %d %s (%v)", r.status, r.body, err)
	}
	return env.Data
}

// TestCrossIDOtherFiledByHashAsked: under explorer-sim's cross-id-other
// reading (the vendor's example: a record's id is not the hash asked,
// which is in tzTxHash), a batch question costs one upstream call and
// fills the per-hash cache: each of its hashes, asked alone by either
// route, is then a hit. The edge filed records by id only: each batch was
// "unmapped", spent, then fetched again whole (two calls), and nothing
// was cached per hash.
func TestCrossIDOtherFiledByHashAsked(t *testing.T) {
	h := newHarness(t, withProfile("cross-id-other"))
	hashes := h.sim.CrossHashes("TRADE_ZONE", 6) // the fourth is a BatchWithdraw: two records
	before := h.upstreamCalls()
	recs := crossRecordsOf(t, h.get(multiTarget(hashes...)))
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("a batch question of %d hashes cost %d upstream calls, want 1", len(hashes), n)
	}
	if len(recs) < len(hashes) {
		t.Fatalf("%d records for %d hashes", len(recs), len(hashes))
	}
	for _, rec := range recs {
		if id, _ := rec["id"].(string); strings.EqualFold(id, rec["tzTxHash"].(string)) {
			t.Fatalf("the profile is not in force: id %s is tzTxHash", id)
		}
	}
	if n := testutil.ToFloat64(h.m.BatchUnmapped); n != 0 {
		t.Fatalf("batch_unmapped_total %v, want 0", n)
	}
	before = h.upstreamCalls()
	for _, hash := range hashes {
		for _, target := range []string{multiTarget(hash), fillsTarget(hash)} {
			r := h.get(target)
			if cs := r.header["Cache-Status"]; !strings.HasPrefix(cs, "explorer-edge; hit") {
				t.Fatalf("%s after the batch: Cache-Status %q, want a hit", target, cs)
			}
			for _, rec := range crossRecordsOf(t, r) {
				if got, _ := rec["tzTxHash"].(string); !strings.EqualFold(got, hash) {
					t.Fatalf("%s answered a record of %s", target, got)
				}
			}
		}
	}
	if n := h.upstreamCalls() - before; n != 0 {
		t.Fatalf("the hashes asked one by one cost %d upstream calls, want 0", n)
	}
}

// unmappable rewrites every transaction-multi answer of explorer-sim so
// that no field of its records holds a hash asked: an upstream the edge
// cannot file per hash.
func unmappable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/tz/cross/transaction-multi") {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var env map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err == nil {
			if data, ok := env["data"].([]any); ok {
				for i, d := range data {
					if m, ok := d.(map[string]any); ok {
						for _, f := range []string{"id", "tzTxHash", "chainxTxHash"} {
							m[f] = "0x" + strings.Repeat("e", 60) + strconv.Itoa(1000+i)
						}
					}
				}
			}
		}
		body, _ := json.Marshal(env)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		w.Write(body)
	})
}

// TestCrossUnmappedAskedOnce: an upstream whose records name the hash
// asked in no field the edge knows: each question costs one upstream
// call, is cached whole under its own key (asked again: a hit), and is
// counted (batch_unmapped_total). The call's answer was thrown away and
// the question asked again whole: two calls per question.
//
// A question of one hash is filed under it whatever its record says. A
// question beside it that the item cache answers in part is asked whole
// too: after an answer that could not be filed, the chain's questions are
// asked whole for a while (their parts' call, then the question, was two).
func TestCrossUnmappedAskedOnce(t *testing.T) {
	h := newHarnessWrapped(t, unmappable)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 11)
	one := hashes[10]
	before := h.upstreamCalls()
	crossRecordsOf(t, h.get(multiTarget(one)))
	if r := h.get(fillsTarget(one)); !strings.HasPrefix(r.header["Cache-Status"], "explorer-edge; hit") || h.upstreamCalls()-before != 1 {
		t.Fatalf("one hash asked: its records not filed under it (Cache-Status %q of the other route, %d calls)", r.header["Cache-Status"], h.upstreamCalls()-before)
	}
	for i, q := range [][]string{hashes[:3], hashes[3:6], {one, hashes[6], hashes[7]}, hashes[8:10]} {
		before := h.upstreamCalls()
		first := h.get(multiTarget(q...))
		if recs := crossRecordsOf(t, first); len(recs) < len(q) {
			t.Fatalf("question %d: %d records for %d hashes", i, len(recs), len(q))
		}
		if n := h.upstreamCalls() - before; n != 1 {
			t.Fatalf("question %d cost %d upstream calls, want 1", i, n)
		}
		again := h.get(multiTarget(q...))
		if cs := again.header["Cache-Status"]; !strings.HasPrefix(cs, "explorer-edge; hit") || !bytes.Equal(again.body, first.body) {
			t.Fatalf("question %d asked again: Cache-Status %q, same body %v; want the hit of the first answer", i, cs, bytes.Equal(again.body, first.body))
		}
		if n := h.upstreamCalls() - before; n != 1 {
			t.Fatalf("question %d asked twice cost %d upstream calls, want 1", i, n)
		}
	}
	if n := testutil.ToFloat64(h.m.BatchUnmapped); n < 1 {
		t.Fatalf("batch_unmapped_total %v, want the unmapped answer counted", n)
	}
}

// TestSplitRecordsByHashAsked: records are filed under the hash asked
// whichever field holds it; one naming two hashes asked, or none, files
// nothing; a question of one hash takes every record.
func TestSplitRecordsByHashAsked(t *testing.T) {
	a, b := "0x"+strings.Repeat("a", 64), "0x"+strings.Repeat("b", 64)
	other := "0x" + strings.Repeat("c", 64)
	rec := func(id, tz string) string { return `{"id":"` + id + `","tzTxHash":"` + tz + `","status":"0x1"}` }
	body := func(recs ...string) []byte {
		return []byte(`{"code":"0","msg":"","data":[` + strings.Join(recs, ",") + `]}`)
	}

	got, err := splitRecords(body(rec(other, strings.ToUpper(a[2:3])+a[3:]), rec(b, other)), []string{a, b})
	if err == nil {
		t.Fatalf("a record naming no hash asked was filed: %q", got)
	}
	got, err = splitRecords(body(rec(other, a), rec(b, other), rec(other, a)), []string{a, b})
	if err != nil || strings.Count(string(got[a]), `"id"`) != 2 || strings.Count(string(got[b]), `"id"`) != 1 {
		t.Fatalf("by tzTxHash and by id: %q, %v", got, err)
	}
	if _, err := splitRecords(body(rec(a, b)), []string{a, b}); err == nil {
		t.Fatal("a record naming two hashes asked was filed under one")
	}
	got, err = splitRecords(body(rec(other, other)), []string{a})
	if err != nil || len(got[a]) == 0 {
		t.Fatalf("one hash asked: %q, %v; want its record", got, err)
	}
}

// TestCrossSettleUpdateTime: under explorer-sim's update-moves reading a
// record's updateTime keeps moving for 5 minutes after its status is set.
// A record updated less than cache.cross_chain_settle (10 minutes) before
// it is asked is head (max-age 1 s, not on disk); once its updateTime is
// that old it is final. A record with a status was final for 24 h at
// once, whatever its updateTime.
func TestCrossSettleUpdateTime(t *testing.T) {
	h := newHarness(t, withProfile("update-moves"), noStale)
	if h.cfg.Cache.CrossChainSettle != 10*time.Minute {
		t.Fatalf("cache.cross_chain_settle default %s", h.cfg.Cache.CrossChainSettle)
	}
	hash := h.sim.CrossHashes("TRADE_ZONE", 1)[0]
	updated := func(r resp) time.Time {
		ms, _ := strconv.ParseInt(crossRecordsOf(t, r)[0]["updateTime"].(string), 10, 64)
		return time.UnixMilli(ms)
	}
	check := func(when string, final bool) {
		t.Helper()
		for _, target := range []string{multiTarget(hash), fillsTarget(hash)} {
			r := h.get(target)
			age := h.clock.Now().Sub(updated(r))
			if got := maxAge(r) > 3600; got != final {
				t.Fatalf("%s, updated %s before: %s max-age %d, want final %v", when, age, target, maxAge(r), final)
			}
		}
	}
	check("just updated", false)
	h.clock.Advance(6 * time.Minute) // the record stopped moving a minute ago
	check("updated a minute ago", false)
	h.clock.Advance(9*time.Minute + time.Second) // 10 minutes and a second since
	check("updated over 10 minutes ago", true)

	// The settle time is the configuration's; 0 trusts the status alone.
	classed := route.ClassifyCrossAt([]byte(`{"data":[{"status":"0x1","updateTime":"`+
		strconv.FormatInt(h.clock.Now().UnixMilli(), 10)+`"}]}`), h.clock.Now(), 0)
	if classed.String() != "final" {
		t.Fatalf("settle 0: %v, want final", classed)
	}
}

// TestPositionListLimit100: position-list takes limit up to
// upstream.position_list_max_limit (100 by default, the vendor's Chinese
// page). An upstream that takes 50 (explorer-sim's default, the English
// page) refuses 100 once: the refusal is cached for the negative time,
// asked twice it is one call; under position-limit-100 it is answered.
// Above the configured maximum the edge refuses by itself.
func TestPositionListLimit100(t *testing.T) {
	h := newHarness(t)
	tok := h.sim.TokenContracts("CHAINX")[0]
	list := "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + tok + "&limit="

	before := h.upstreamCalls()
	for i := range 2 {
		r := h.get(list + "100")
		if r.status != 400 || r.code() != "50036" {
			t.Fatalf("ask %d of limit=100 of an upstream that takes 50: %d %s, want its refusal 400/50036", i, r.status, r.body)
		}
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("limit=100 asked twice of an upstream that refuses it: %d upstream calls, want 1 (the refusal cached)", n)
	}
	before = h.upstreamCalls()
	if r := h.get(list + "101"); r.status != 400 || r.code() != "50036" || !strings.Contains(string(r.body), "limit") {
		t.Fatalf("limit=101: %d %s, want the edge's 400/50036 naming limit", r.status, r.body)
	}
	if n := h.upstreamCalls() - before; n != 0 {
		t.Fatalf("limit=101 reached the upstream (%d calls)", n)
	}

	h.sim.SetProfile(sim.MustProfile("position-limit-100"))
	h.clock.Advance(time.Minute) // past the refusal's negative time
	r := h.get(list + "100")
	var env struct {
		Code string `json:"code"`
		Data []struct {
			Limit        string `json:"limit"`
			PositionList []any  `json:"positionList"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || r.status != 200 || env.Code != "0" || len(env.Data) != 1 || env.Data[0].Limit != "100" {
		t.Fatalf("limit=100 of an upstream that takes 100: %d %s", r.status, r.body)
	}
	if n := len(env.Data[0].PositionList); n != 100 {
		t.Fatalf("limit=100: %d positions, want 100", n)
	}
}

// TestPositionListMaxLimitConfigured: upstream.position_list_max_limit 50
// (an upstream that takes 50) has the edge refuse limit=51 by itself.
func TestPositionListMaxLimitConfigured(t *testing.T) {
	h := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Upstream.PositionListMaxLimit = 50 })
	t.Cleanup(func() { route.SetPositionListMaxLimit(config.Default().Upstream.PositionListMaxLimit) })
	tok := h.sim.TokenContracts("CHAINX")[0]
	list := "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + tok + "&limit="
	before := h.upstreamCalls()
	if r := h.get(list + "51"); r.status != 400 || r.code() != "50036" || !strings.Contains(string(r.body), "limit") {
		t.Fatalf("limit=51 with a maximum of 50: %d %s, want the edge's 400/50036 naming limit", r.status, r.body)
	}
	if r := h.get(list + "50"); r.status != 200 || r.code() != "0" {
		t.Fatalf("limit=50: %d %s", r.status, r.body)
	}
	if n := h.upstreamCalls() - before; n != 1 {
		t.Fatalf("%d upstream calls, want 1 (limit=50 only)", n)
	}
}
