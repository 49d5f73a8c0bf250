package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startProfiled runs an unauthenticated Server on an injected clock with
// the profile named by names.
func startProfiled(t *testing.T, names string) (*Server, *clock) {
	t.Helper()
	c := newClock()
	p := MustProfile(names)
	return start(t, Config{Now: c.Now, Profile: &p}), c
}

func TestParseProfile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Profile
	}{
		{"", MustProfile(DefaultProfile)},
		{"today", Profile{}},
		{"vendor", Profile{HeightAt: true, StatusVendor: true}},
		{"every", Profile{HeightAt: true, CrossIDOther: true, UpdateMoves: true, StateEmpty: true,
			NoDataCode: true, PositionLimit100: true, StatusVendor: true}},
		{"height-at", Profile{HeightAt: true}},
		{"vendor,height-down", Profile{StatusVendor: true}},
		{" Cross-ID-Other , update-moves ", Profile{CrossIDOther: true, UpdateMoves: true}},
		{"state-empty,nodata-code,position-limit-100", Profile{StateEmpty: true, NoDataCode: true, PositionLimit100: true}},
		{"every,today", Profile{}}, // a named profile sets every point, later names win
		{"status-vendor,status-400", Profile{}},
	} {
		got, err := ParseProfile(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseProfile(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		// String names every point and reads back to the same profile.
		back, err := ParseProfile(got.String())
		if err != nil || back != got {
			t.Errorf("ParseProfile(%q.String() = %q) = %+v, %v", tc.in, got.String(), back, err)
		}
	}
	if s := (Profile{}).String(); s != "height-down,cross-id-asked,update-fixed,state-pending-done,nodata-empty,position-limit-50,status-400" {
		t.Errorf("today's profile is %q", s)
	}
	_, err := ParseProfile("vendor,heigth-at,nodata")
	if err == nil || !strings.Contains(err.Error(), `"heigth-at"`) || !strings.Contains(err.Error(), `"nodata"`) {
		t.Errorf("misspelt names: err = %v, want both named", err)
	}
}

// The default is the vendor's documented readings (the edge's fork
// search walks pages that mean the same under either reading of height),
// and both Config and the flag take it from DefaultProfile.
func TestDefaultProfile(t *testing.T) {
	if p := MustProfile(DefaultProfile); p != MustProfile("vendor") {
		t.Errorf("DefaultProfile %q reads %q, want the vendor's", DefaultProfile, p)
	}
	s := New(Config{})
	if s.Profile() != MustProfile(DefaultProfile) {
		t.Errorf("Config{} serves %q, want DefaultProfile", s.Profile())
	}
	p := MustProfile("today")
	if s := New(Config{Profile: &p}); s.Profile() != p {
		t.Errorf("Config.Profile today serves %q", s.Profile())
	}
}

func blockListPath(height int64, extra string) string {
	return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d%s", height, extra)
}

// heights returns the heights of a block-list answer, in its order.
func heights(t *testing.T, a answer) []int64 {
	t.Helper()
	var out []int64
	for _, b := range list(t, a.ok(t), "blockList") {
		h, err := strconv.ParseInt(field(t, b, "height"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

func TestProfileHeight(t *testing.T) {
	down, _ := startProfiled(t, "height-down")
	at, _ := startProfiled(t, "height-at")
	x := down.Head("CHAINX") - 50
	if got := heights(t, get(t, down, blockListPath(x, "&limit=100"))); len(got) != 100 || got[0] != x || got[99] != x-99 {
		t.Errorf("height-down: height=%d&limit=100 answered %d blocks from %v, want 100 from %d down", x, len(got), got[:min(len(got), 1)], x)
	}
	a := get(t, at, blockListPath(x, "&limit=100"))
	if got := heights(t, a); len(got) != 1 || got[0] != x {
		t.Errorf("height-at: height=%d&limit=100 answered %v, want the one block at %d", x, got, x)
	}
	if tp := field(t, a.ok(t)[0], "totalPage"); tp != "1" {
		t.Errorf("height-at: totalPage %s, want 1", tp)
	}
	// The one block is the same block either way.
	hashDown := field(t, list(t, get(t, down, blockListPath(x, "&limit=1")).ok(t), "blockList")[0], "hash")
	hashAt := field(t, list(t, a.ok(t), "blockList")[0], "hash")
	if hashDown != hashAt {
		t.Errorf("block %d: hash %s under height-down, %s under height-at", x, hashDown, hashAt)
	}
	// There is no second page of one block.
	p2 := get(t, at, blockListPath(x, "&page=2"))
	if code, msg, _ := p2.envelope(t); p2.status != 400 || code != codeInvalid || !strings.Contains(msg, "page") {
		t.Errorf("height-at page 2: %d %s %q, want 400 50036 naming page", p2.status, code, msg)
	}
	// Without height, both readings answer the newest blocks.
	for _, s := range []*Server{down, at} {
		head := s.Head("CHAINX")
		if got := heights(t, get(t, s, "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=3")); len(got) != 3 || got[0] != head {
			t.Errorf("%s: newest page %v, want 3 from %d", s.Profile(), got, head)
		}
	}
}

func crossPath(hashes []string) string {
	return "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + join(hashes)
}

func TestProfileCrossID(t *testing.T) {
	asked, _ := startProfiled(t, "cross-id-asked")
	other, _ := startProfiled(t, "cross-id-other")
	hashes := asked.CrossHashes("TRADE_ZONE", 7) // one BatchWithdraw among them
	recsAsked := get(t, asked, crossPath(hashes)).ok(t)
	recsOther := get(t, other, crossPath(hashes)).ok(t)
	if len(recsAsked) != 8 || len(recsOther) != 8 {
		t.Fatalf("%d and %d records for 7 hashes, want 8 (one batch of two)", len(recsAsked), len(recsOther))
	}
	j := 0
	for i, h := range hashes {
		n := 1
		if isBatch(uint64(i)) {
			n = 2
		}
		for range n {
			if id := field(t, recsAsked[j], "id"); id != h {
				t.Errorf("cross-id-asked: record %d id %s, want the hash asked %s", j, id, h)
			}
			id, tz := field(t, recsOther[j], "id"), field(t, recsOther[j], "tzTxHash")
			if id == h || tz != h {
				t.Errorf("cross-id-other: record %d id %s tzTxHash %s, want id other than and tzTxHash equal to %s", j, id, tz, h)
			}
			if !isHex(id, 32) {
				t.Errorf("cross-id-other: id %q is not a hash", id)
			}
			if want := field(t, recsAsked[j], "tzTxHash"); id != want {
				t.Errorf("cross-id-other: id %s, want the tzTxHash of today's record %s", id, want)
			}
			j++
		}
	}
	// The other id opens nothing: asked for it, the explorer knows no record.
	if recs := get(t, other, crossPath([]string{field(t, recsOther[0], "id")})).ok(t); len(recs) != 0 {
		t.Errorf("asking the other id found %d records, want none", len(recs))
	}
	// transaction-fills reads the same way.
	fills := get(t, other, "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+hashes[0]).ok(t)
	if len(fills) != 1 || field(t, fills[0], "tzTxHash") != hashes[0] || field(t, fills[0], "id") == hashes[0] {
		t.Errorf("transaction-fills under cross-id-other: %v", fills)
	}
}

func updateTime(t *testing.T, s *Server, hash string) int64 {
	t.Helper()
	recs := get(t, s, "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+hash).ok(t)
	if len(recs) == 0 {
		t.Fatalf("no record for %s", hash)
	}
	ms, err := strconv.ParseInt(field(t, recs[0], "updateTime"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestProfileUpdateMoves(t *testing.T) {
	fixed, fc := startProfiled(t, "update-fixed")
	moves, mc := startProfiled(t, "update-moves")
	h := fixed.CrossHashes("TRADE_ZONE", 1)[0]
	t0 := mc.Now()

	before := updateTime(t, fixed, h)
	fc.Advance(time.Hour)
	if after := updateTime(t, fixed, h); after != before {
		t.Errorf("update-fixed: updateTime moved from %d to %d", before, after)
	}
	if time.UnixMilli(before).After(t0) {
		t.Errorf("update-fixed: updateTime %d is after the start of chain time", before)
	}

	// While it moves, each answer carries the chain time it is given at;
	// after UpdateMoveFor it stays at the end of that time.
	for _, step := range []struct {
		advance time.Duration
		want    time.Time
	}{
		{0, t0},
		{time.Minute, t0.Add(time.Minute)},
		{2 * time.Minute, t0.Add(3 * time.Minute)},
		{10 * time.Minute, t0.Add(UpdateMoveFor)},
		{time.Hour, t0.Add(UpdateMoveFor)},
	} {
		mc.Advance(step.advance)
		if got := updateTime(t, moves, h); got != step.want.UnixMilli() {
			t.Errorf("update-moves at +%v: updateTime %d, want %d", mc.Now().Sub(t0), got, step.want.UnixMilli())
		}
	}
	// Setting the profile again starts the moving time again.
	moves.SetProfile(MustProfile("update-moves"))
	mc.Advance(time.Minute)
	if got, want := updateTime(t, moves, h), mc.Now().UnixMilli(); got != want {
		t.Errorf("update-moves after SetProfile: updateTime %d, want %d", got, want)
	}
}

func TestProfileStateEmpty(t *testing.T) {
	for _, tc := range []struct {
		profile string
		states  map[string]bool
	}{
		{"state-pending-done", map[string]bool{"pending": true, "done": true}},
		{"state-empty", map[string]bool{"": true}},
	} {
		s, _ := startProfiled(t, tc.profile)
		seen := map[string]bool{}
		for _, b := range list(t, get(t, s, "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=10").ok(t), "blockList") {
			seen[field(t, b, "state")] = true
		}
		if fmt.Sprint(seen) != fmt.Sprint(tc.states) {
			t.Errorf("%s: states of the newest 10 blocks %v, want %v", tc.profile, seen, tc.states)
		}
	}
}

func TestProfileNoData(t *testing.T) {
	empty, _ := startProfiled(t, "nodata-empty")
	code, _ := startProfiled(t, "nodata-code")
	above := empty.Head("CHAINX") + 1000
	for _, path := range []string{
		blockListPath(above, ""),
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d", above),
	} {
		if l := list(t, get(t, empty, path).ok(t), "blockList"); len(l) != 0 {
			t.Errorf("nodata-empty %s: %d items, want an empty list", path, len(l))
		}
		a := get(t, code, path)
		c, msg, data := a.envelope(t)
		if a.status != http.StatusOK || c != "50040" || len(data) != 0 || !strings.Contains(msg, "height") {
			t.Errorf("nodata-code %s: %d %s %q %v, want 200 50040 naming height, no data", path, a.status, c, msg, data)
		}
		// A height that exists is answered as ever.
		below := strings.Replace(path, strconv.FormatInt(above, 10), strconv.FormatInt(code.Head("CHAINX")-5, 10), 1)
		if l := list(t, get(t, code, below).ok(t), "blockList"); len(l) == 0 {
			t.Errorf("nodata-code %s: empty", below)
		}
	}
}

func TestProfilePositionLimit(t *testing.T) {
	fifty, _ := startProfiled(t, "position-limit-50")
	hundred, _ := startProfiled(t, "position-limit-100")
	path := "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + fifty.TokenContracts("CHAINX")[0]
	a := get(t, fifty, path+"&limit=100")
	if code, msg, _ := a.envelope(t); a.status != 400 || code != codeInvalid || !strings.Contains(msg, "limit") {
		t.Errorf("position-limit-50, limit=100: %d %s %q, want 400 50036 naming limit", a.status, code, msg)
	}
	if l := list(t, get(t, fifty, path+"&limit=50").ok(t), "positionList"); len(l) != 50 {
		t.Errorf("position-limit-50, limit=50: %d positions", len(l))
	}
	if l := list(t, get(t, hundred, path+"&limit=100").ok(t), "positionList"); len(l) != 100 {
		t.Errorf("position-limit-100, limit=100: %d positions, want 100", len(l))
	}
	a = get(t, hundred, path+"&limit=101")
	if code, _, _ := a.envelope(t); a.status != 400 || code != codeInvalid {
		t.Errorf("position-limit-100, limit=101: %d %s, want 400 50036", a.status, code)
	}
}

func TestProfileStatusVendor(t *testing.T) {
	plain, _ := startProfiled(t, "status-400")
	vendor, _ := startProfiled(t, "status-vendor")
	hashes := make([]string, 21)
	for i := range hashes {
		hashes[i] = plain.UnknownHash(i)
	}
	for _, tc := range []struct {
		s      *Server
		path   string
		status int
		code   string
	}{
		{plain, crossPath(hashes), 400, codeTooMany},
		{vendor, crossPath(hashes), 200, codeTooMany}, // the vendor's table: 50025 with HTTP 200
		{plain, "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX", 400, codeMissing},
		{vendor, "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX", 400, codeMissing},
		{vendor, "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=x", 400, codeInvalid},
	} {
		a := get(t, tc.s, tc.path)
		if code, _, _ := a.envelope(t); a.status != tc.status || code != tc.code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.s.Profile(), tc.path, a.status, code, tc.status, tc.code)
		}
	}
}

func adminDo(t *testing.T, s *Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	a := do(t, client(t, 10*time.Second), req)
	var v map[string]any
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, a.body)
	}
	return a.status, v
}

func TestProfileAdmin(t *testing.T) {
	s, _ := startClocked(t)
	status, v := adminDo(t, s, "GET", "/sim/profile", "")
	if status != 200 || v["profile"] != MustProfile(DefaultProfile).String() || v["default"] != DefaultProfile {
		t.Fatalf("GET /sim/profile: %d %v", status, v)
	}
	x := s.Head("CHAINX") - 10
	if n := len(heights(t, get(t, s, blockListPath(x, "")))); n != 1 {
		t.Fatalf("default profile (the vendor's, height-at): %d blocks from height %d, want 1", n, x)
	}

	status, v = adminDo(t, s, "POST", "/sim/profile", `{"profile":"vendor,cross-id-other"}`)
	want := Profile{HeightAt: true, StatusVendor: true, CrossIDOther: true}
	if status != 200 || v["profile"] != want.String() || s.Profile() != want {
		t.Fatalf("POST /sim/profile: %d %v; Profile() = %q", status, v, s.Profile())
	}
	if n := len(heights(t, get(t, s, blockListPath(x, "")))); n != 1 {
		t.Errorf("after POST vendor: %d blocks at height %d, want 1", n, x)
	}
	if status, v = adminDo(t, s, "GET", "/sim/profile", ""); v["profile"] != want.String() {
		t.Errorf("GET after POST: %d %v", status, v)
	}

	for _, body := range []string{`{"profile":"vendor,nodata"}`, `{"profil":"vendor"}`, `{}`, `not json`} {
		status, v := adminDo(t, s, "POST", "/sim/profile", body)
		if msg, _ := v["error"].(string); status != 400 || !strings.Contains(msg, "profil") {
			t.Errorf("POST %s: %d %v, want 400 naming the profile", body, status, v)
		}
	}
	if s.Profile() != want {
		t.Errorf("a refused POST changed the profile to %q", s.Profile())
	}

	status, v = adminDo(t, s, "DELETE", "/sim/profile", "")
	if status != 200 || v["profile"] != MustProfile(DefaultProfile).String() || s.Profile() != MustProfile(DefaultProfile) {
		t.Errorf("DELETE /sim/profile: %d %v", status, v)
	}
}
