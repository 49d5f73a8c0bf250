package proxy

import (
	"bytes"
	"compress/gzip"
	"explorer-edge/config"
	"explorer-edge/proxy/route"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"explorer-edge/sim"
)

// canonical targets of each route, as the edge sends them upstream.
func (h *harness) targets() map[string]string {
	tok := h.sim.TokenContracts("CHAINX")[0]
	cross := h.sim.CrossHashes("TRADE_ZONE", 3)
	internal := h.sim.InternalTxHashes("CHAINX", 2)
	height := h.sim.FinalizedHeight("CHAINX") - 5
	return map[string]string{
		"position-list":              "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + tok + "&page=1&limit=20",
		"block-list":                 "/api/v5/chainx/block/block-list?chainShortName=CHAINX&page=1&limit=20",
		"transaction-list":           fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&protocolType=transaction&page=1&limit=20", height),
		"transaction-multi":          "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(cross, ","),
		"transaction-fills":          "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + cross[0],
		"internal-transaction-multi": "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + strings.Join(internal, ",") + "&page=1&limit=20",
	}
}

func TestEveryRouteAnswersAsTheSimThenFromCache(t *testing.T) {
	h := newHarness(t)
	targets := h.targets()
	// transaction-multi runs before transaction-fills, which asks one of its
	// hashes: per-hash caching makes that a hit (docs/design.md, per-hash batches).
	for _, name := range route.Names() {
		target := targets[name]
		t.Run(name, func(t *testing.T) {
			want := h.simGet(strings.Replace(target, "txid=", "txId=", 1))
			if name == "transaction-fills" {
				want = h.simGet(target)
			}
			r := h.get(target)
			if r.status != 200 || r.code() != "0" {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
			if !bytes.Equal(r.body, want) {
				t.Fatalf("edge answer differs from the sim's:\nedge %s\nsim  %s", r.body, want)
			}
			wantFirst := "fwd=miss"
			if name == "transaction-fills" {
				wantFirst = "explorer-edge; hit"
			}
			if cs := r.header["Cache-Status"]; !strings.Contains(cs, wantFirst) {
				t.Fatalf("first answer Cache-Status = %q, want %q", cs, wantFirst)
			}
			before := h.upstreamCalls()
			r2 := h.get(target)
			if !bytes.Equal(r2.body, want) {
				t.Fatalf("cached answer differs")
			}
			if cs := r2.header["Cache-Status"]; !strings.HasPrefix(cs, "explorer-edge; hit; ttl=") {
				t.Fatalf("second answer Cache-Status = %q, want hit", cs)
			}
			if h.upstreamCalls() != before {
				t.Fatalf("hit went upstream")
			}
			for _, k := range []string{"Age", "Etag", "Cache-Control"} {
				if r2.header[k] == "" {
					t.Errorf("header %s missing on hit: %v", k, r2.header)
				}
			}
		})
	}
}

func TestBadInputs(t *testing.T) {
	h := newHarness(t)
	tok := h.sim.TokenContracts("CHAINX")[0]
	hash := h.sim.CrossHashes("TRADE_ZONE", 1)[0]
	var many []string
	for i := 0; i < 21; i++ {
		many = append(many, h.sim.UnknownHash(i))
	}
	cases := []struct {
		target string
		status int
		code   string
		names  string // the parameter the message must name
	}{
		{"/api/v5/chainx/block/block-list", 400, "50014", "chainShortName"},
		{"/api/v5/chainx/block/block-list?chainShortName=", 400, "50014", "chainShortName"},
		{"/api/v5/chainx/block/block-list?chainShortName=%20%20", 400, "50014", "chainShortName"},
		{"/api/v5/chainx/block/block-list?chainShortName=nochain", 400, "50036", "chainShortName"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=101", 400, "50036", "limit"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=0", 400, "50036", "limit"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=ten", 400, "50036", "limit"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=-1", 400, "50036", "limit"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&page=0", 400, "50036", "page"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&page=501&limit=20", 400, "50036", "page"},
		{"/api/v5/chainx/block/block-list?chainShortName=chainx&height=12a", 400, "50036", "height"},
		{"/api/v5/chainx/block/transaction-list?chainShortName=chainx", 400, "50014", "height"},
		{"/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=5&protocolType=nft", 400, "50036", "protocolType"},
		{"/api/v5/chainx/token/position-list?chainShortName=chainx", 400, "50014", "tokenContractAddress"},
		{"/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=0x12", 400, "50036", "tokenContractAddress"},
		{"/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + tok + "&holderAddress=xyz", 400, "50036", "holderAddress"},
		{"/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + tok + "&limit=101", 400, "50036", "limit"},
		{"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE", 400, "50014", "txId"},
		{"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=0xzz", 400, "50036", "txId"},
		{"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + hash + ",,", 400, "50036", "txId"},
		{"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(many, ","), 200, "50025", "txId"}, // the vendor's status
		{"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txId=" + hash, 400, "50014", "txid"},
		{"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hash[:20], 400, "50036", "txid"},
		{"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + strings.Join(many, ","), 200, "50025", "txId"},
		{"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + hash + "&limit=101", 400, "50036", "limit"},
		{"/api/v5/chainx/block/nothing?chainShortName=chainx", 404, "404", ""},
		{"/", 404, "404", ""},
	}
	for _, c := range cases {
		r := h.get(c.target)
		if r.status != c.status || r.code() != c.code {
			t.Errorf("%s: got %d %s (%s), want %d %s", c.target, r.status, r.code(), r.body, c.status, c.code)
			continue
		}
		if !strings.Contains(string(r.body), c.names) || !strings.HasSuffix(string(r.body), `"data":[]}`) {
			t.Errorf("%s: envelope %s does not name %q", c.target, r.body, c.names)
		}
	}
	if r := h.do("POST", "/api/v5/chainx/block/block-list?chainShortName=chainx"); r.status != 405 || r.code() != "50115" {
		t.Errorf("POST: %d %s", r.status, r.body)
	}
	if n := h.upstreamCalls(); n != 0 {
		t.Errorf("bad inputs reached the upstream %d times", n)
	}
}

func TestEquivalentSpellingsAreOneKey(t *testing.T) {
	h := newHarness(t)
	tok := h.sim.TokenContracts("CHAINX")[0]
	hashes := h.sim.CrossHashes("TRADE_ZONE", 2)
	groups := [][]string{
		{
			"/api/v5/chainx/block/block-list?chainShortName=chainx",
			"/api/v5/chainx/block/block-list?chainShortName=CHAINX&page=1&limit=20",
			"/api/v5/chainx/block/block-list?limit=020&page=01&chainShortName=ChainX",
			"/api/v5/chainx/block/block-list?chainShortName=%20chainx%20&x=random",
			"/api/v5/chainx/block/block-list?chainShortName=chainx&utm=1&limit=20",
		},
		{
			"/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + tok,
			"/api/v5/chainx/token/position-list?tokenContractAddress=" + strings.ToUpper(tok[2:]) + "&chainShortName=CHAINX&limit=20",
			"/api/v5/chainx/token/position-list?tokenContractAddress=0X" + strings.ToUpper(tok[2:]) + "&chainShortName=chainx&page=1",
		},
		{
			"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + hashes[0] + "," + hashes[1],
			"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + strings.ToUpper(hashes[0][2:]) + "%2C" + hashes[1] + "," + hashes[0],
		},
	}
	for i, g := range groups {
		h.sim.ResetStats()
		var first []byte
		for _, target := range g {
			if strings.Contains(target, "0X") || strings.Contains(target, "=ABC") {
				target = strings.Replace(target, "txId="+strings.ToUpper(hashes[0][2:]), "txId=0x"+strings.ToUpper(hashes[0][2:]), 1)
			}
			target = strings.Replace(target, "tokenContractAddress="+strings.ToUpper(tok[2:]), "tokenContractAddress=0x"+strings.ToUpper(tok[2:]), 1)
			target = strings.Replace(target, "txId="+strings.ToUpper(hashes[0][2:]), "txId=0x"+strings.ToUpper(hashes[0][2:]), 1)
			r := h.get(target)
			if r.status != 200 {
				t.Fatalf("group %d %s: %d %s", i, target, r.status, r.body)
			}
			if first == nil {
				first = r.body
			} else if !bytes.Equal(first, r.body) {
				t.Errorf("group %d: %s answered differently", i, target)
			}
		}
		if n := h.upstreamCalls(); n != 1 {
			t.Errorf("group %d: %d spellings cost %d upstream calls, want 1", i, len(g), n)
		}
	}
	for _, target := range h.rec.all() {
		if strings.Contains(target, "random") || strings.Contains(target, "utm") || strings.Contains(target, "x=") {
			t.Errorf("unknown parameter reached the sim: %s", target)
		}
	}
}

func TestConcurrentColdRequestsCostOneCall(t *testing.T) {
	h := newHarness(t, func(_ *config.Config, s *sim.Config) {
		s.Faults = sim.Faults{Latency: 50 * time.Millisecond} // keep the flight open while all arrive
	})
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=50"
	var wg sync.WaitGroup
	bodies := make([][]byte, 200)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.get(target)
			if r.status != 200 {
				t.Errorf("status %d", r.status)
			}
			bodies[i] = r.body
		}()
	}
	wg.Wait()
	if n := h.upstreamCalls(); n != 1 {
		t.Fatalf("200 concurrent cold requests cost %d upstream calls, want 1", n)
	}
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatal("concurrent answers differ")
		}
	}
}

// TestUpstreamErrorEnvelopePassedThroughNotCached: a code outside the
// vendor's table (envelope.VendorCodes) is passed through as it came and
// never cached.
func TestUpstreamErrorEnvelopePassedThroughNotCached(t *testing.T) {
	h := newHarness(t, func(_ *config.Config, s *sim.Config) {
		s.Faults = sim.Faults{Envelope: 1, EnvelopeCode: "59999"}
	})
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	for i := 0; i < 2; i++ {
		r := h.get(target)
		if r.code() != "59999" {
			t.Fatalf("got %d %s, want the upstream's 59999 envelope", r.status, r.body)
		}
	}
	if n := h.upstreamCalls(); n != 2 {
		t.Fatalf("error envelope was cached: %d upstream calls for 2 requests", n)
	}
}

func TestUpstreamSeesOnlyEdgeSignatures(t *testing.T) {
	h := newHarness(t)
	for _, target := range h.targets() {
		r := h.get(target,
			"SVC-ACCESS-KEY", "client-key", "SVC-ACCESS-SIGN", "client-sign",
			"SVC-ACCESS-PASSPHRASE", "client-pass", "SVC-ACCESS-TIMESTAMP", "2020-01-01T00:00:00.000Z",
			"Authorization", "Bearer x", "Cookie", "a=b", "X-Custom", "1")
		if r.status != 200 {
			t.Fatalf("%s: %d %s", target, r.status, r.body)
		}
	}
	st := h.sim.Stats()
	if st.AuthFailures != 0 {
		t.Fatalf("sim rejected %d signatures", st.AuthFailures)
	}
	if len(st.APIKeys) != 1 || st.APIKeys[sim.DemoAPIKey] != st.RequestsTotal {
		t.Fatalf("sim saw keys %v, want only the edge's", st.APIKeys)
	}
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for _, hd := range h.rec.headers {
		for _, k := range []string{"Authorization", "Cookie", "X-Custom"} {
			if hd.Get(k) != "" {
				t.Errorf("client header %s reached the sim", k)
			}
		}
	}
}

func TestConditionalAndGzip(t *testing.T) {
	h := newHarness(t)
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=50"
	r := h.get(target)
	etag := r.header["Etag"]
	if etag == "" {
		t.Fatal("no ETag")
	}
	nm := h.get(target, "If-None-Match", etag)
	if nm.status != 304 || len(nm.body) != 0 {
		t.Fatalf("If-None-Match: %d with %d bytes", nm.status, len(nm.body))
	}
	if other := h.get(target, "If-None-Match", `"other"`); other.status != 200 {
		t.Fatalf("non-matching If-None-Match: %d", other.status)
	}
	gz := h.get(target, "Accept-Encoding", "gzip")
	if gz.header["Content-Encoding"] != "gzip" {
		t.Fatalf("no gzip: %v", gz.header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz.body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, r.body) || len(gz.body) >= len(r.body) {
		t.Fatalf("gzip body does not inflate to the answer (%d vs %d bytes)", len(gz.body), len(r.body))
	}
	head := h.do("HEAD", target)
	if head.status != 200 || len(head.body) != 0 || head.header["Content-Length"] != fmt.Sprint(len(r.body)) {
		t.Fatalf("HEAD: %d, %d bytes, Content-Length %q", head.status, len(head.body), head.header["Content-Length"])
	}
}
