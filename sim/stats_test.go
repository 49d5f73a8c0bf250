package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"explorer-edge/signer"
)

func TestStats(t *testing.T) {
	s := start(t, Config{Auth: true})
	c := client(t, 10*time.Second)
	demo := DemoCredentials()
	now := signer.Timestamp(time.Now())
	cross := s.CrossHashes("TRADE_ZONE", 5)
	internal := s.InternalTxHashes("CHAINX", 3)

	send := func(q string, mutate func(*http.Request)) answer {
		req := signed(t, s, q, demo, now)
		if mutate != nil {
			mutate(req)
		}
		return do(t, c, req)
	}
	send("/api/v5/chainx/block/block-list?chainShortName=CHAINX", nil)
	send("/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=999", nil) // rejected: counted
	send("/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId="+join(cross), nil)
	send("/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+cross[0], nil)
	send("/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId="+join(internal), nil)
	send("/api/v5/chainx/block/block-list?chainShortName=CHAINX", func(r *http.Request) { r.Header.Set(signer.HeaderKey, "stranger") })
	send("/api/v5/chainx/block/block-list?chainShortName=CHAINX", func(r *http.Request) { r.Header.Set("SVC-CLIENT-ID", "x") })
	send("/api/v5/chainx/block/block-list?chainShortName=CHAINX", func(r *http.Request) { r.Header.Add(signer.HeaderKey, "second") })
	get(t, s, "/api/v5/chainx/nope")                                                  // unknown path: not counted
	get(t, s, "/sim/hashes?chainShortName=CHAINX&kind=cross")                         // control endpoint: not counted
	get(t, s, "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=1") // unsigned: 401, no key

	want := Stats{
		RequestsTotal: 9,
		Routes: map[string]int64{"position-list": 0, "block-list": 5, "transaction-list": 1,
			"transaction-multi": 1, "transaction-fills": 1, "internal-transaction-multi": 1},
		Hashes:           map[string]int64{"transaction-multi": 5, "transaction-fills": 1, "internal-transaction-multi": 3},
		AuthFailures:     2,
		APIKeys:          map[string]int64{DemoAPIKey: 7, "stranger": 1},
		ClientSVCHeaders: 2,
	}
	if got := s.Stats(); mustJSON(t, got) != mustJSON(t, want) {
		t.Fatalf("Stats()\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
	// The HTTP view is the same JSON.
	var viaHTTP Stats
	if err := json.Unmarshal(get(t, s, "/sim/stats").body, &viaHTTP); err != nil || mustJSON(t, viaHTTP) != mustJSON(t, want) {
		t.Fatalf("GET /sim/stats = %s (%v)", mustJSON(t, viaHTTP), err)
	}

	req, _ := http.NewRequest("POST", s.URL()+"/sim/stats/reset", nil)
	if a := do(t, c, req); a.status != 200 {
		t.Fatalf("reset: %d", a.status)
	}
	zero := Stats{
		Routes: map[string]int64{"position-list": 0, "block-list": 0, "transaction-list": 0,
			"transaction-multi": 0, "transaction-fills": 0, "internal-transaction-multi": 0},
		Hashes:  map[string]int64{"transaction-multi": 0, "transaction-fills": 0, "internal-transaction-multi": 0},
		APIKeys: map[string]int64{},
	}
	if got := s.Stats(); mustJSON(t, got) != mustJSON(t, zero) {
		t.Fatalf("after reset: %s", mustJSON(t, got))
	}
	if body := string(get(t, s, "/sim/stats").body); !strings.Contains(body, `"api_keys":{}`) || !strings.Contains(body, `"position-list":0`) {
		t.Errorf("zero stats JSON: %s", body)
	}
}

func TestStatsKeyCap(t *testing.T) {
	s := New(Config{})
	r, _ := http.NewRequest("GET", "/api/v5/chainx/block/block-list", nil)
	rt := s.routes[r.URL.Path]
	for i := range maxAPIKeys + 5 {
		r.Header.Set(signer.HeaderKey, fmt.Sprint("key-", i))
		s.stats.record(rt, r)
	}
	st := s.Stats()
	if len(st.APIKeys) != maxAPIKeys+1 || st.APIKeys["other"] != 5 {
		t.Errorf("%d keys, other = %d", len(st.APIKeys), st.APIKeys["other"])
	}
}

func TestHashesEndpoint(t *testing.T) {
	s, _ := startClocked(t)
	decode := func(q string) []string {
		a := get(t, s, q)
		var v struct{ Hashes []string }
		if err := json.Unmarshal(a.body, &v); err != nil || a.status != 200 {
			t.Fatalf("%s: %d %s", q, a.status, a.body)
		}
		return v.Hashes
	}
	if got := decode("/sim/hashes?chainShortName=trade_zone&kind=cross&n=3"); fmt.Sprint(got) != fmt.Sprint(s.CrossHashes("TRADE_ZONE", 3)) {
		t.Errorf("cross: %v", got)
	}
	if got := decode("/sim/hashes?chainShortName=CHAINX&kind=internal&n=4"); fmt.Sprint(got) != fmt.Sprint(s.InternalTxHashes("CHAINX", 4)) {
		t.Errorf("internal: %v", got)
	}
	if got := decode("/sim/hashes?chainShortName=CHAINX&kind=token"); len(got) != 5 {
		t.Errorf("token: %v", got)
	}
	txs := decode("/sim/hashes?chainShortName=CHAINX&kind=tx&n=70")
	if len(txs) != 70 {
		t.Fatalf("tx: %d hashes", len(txs))
	}
	head := s.Head("CHAINX")
	for _, h := range txs {
		height, _, ok := s.chains["CHAINX"].openTx(h, head)
		if !ok || height > head-2 {
			t.Errorf("tx hash %s: height %d, ok %v; want a done block", h, height, ok)
		}
	}
	unknown := decode("/sim/hashes?chainShortName=CHAINX&kind=unknown&n=2")
	if len(unknown) != 2 || unknown[0] != s.UnknownHash(0) || !hashRe.MatchString(unknown[1]) {
		t.Errorf("unknown: %v", unknown)
	}
	for _, q := range []string{"/sim/hashes?chainShortName=CHAINX&kind=nope", "/sim/hashes?chainShortName=CHAINX&kind=tx&n=0", "/sim/hashes?kind=tx"} {
		if a := get(t, s, q); a.status != 400 {
			t.Errorf("%s: %d", q, a.status)
		}
	}
}
