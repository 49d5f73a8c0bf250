package sim

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestParamRules checks paging, limits and their error codes and statuses.
func TestParamRules(t *testing.T) {
	// The rules as the sim always had them: a page down from a height
	// (height-down), refusals with 400 (status-400); the vendor's
	// readings are TestProfile*'s.
	today := MustProfile("today")
	s := start(t, Config{Now: newClock().Now, Profile: &today})
	head := s.Head("CHAINX")
	token := s.TokenContracts("CHAINX")[1]
	cross := s.CrossHashes("TRADE_ZONE", 21)
	internal := s.InternalTxHashes("CHAINX", 21)
	const (
		pos   = "/api/v5/chainx/token/position-list?chainShortName=CHAINX"
		blk   = "/api/v5/chainx/block/block-list?chainShortName=CHAINX"
		txl   = "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX"
		multi = "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE"
		fills = "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE"
		itm   = "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX"
	)
	tok := pos + "&tokenContractAddress=" + token
	bad := "0x" + strings.Repeat("g", 64)

	cases := []struct {
		name   string
		query  string
		status int
		code   string
		names  string // the parameter the message must name; for code 0, the list
		items  int    // for code 0: length of the list (-1: not checked)
	}{
		// chainShortName, on every route.
		{"no chain", "/api/v5/chainx/block/block-list", 400, "50014", "chainShortName", 0},
		{"empty chain", "/api/v5/chainx/block/block-list?chainShortName=", 400, "50014", "chainShortName", 0},
		{"unknown chain", "/api/v5/chainx/block/block-list?chainShortName=eth", 400, "50036", "chainShortName", 0},
		{"lower-case chain", "/api/v5/chainx/block/block-list?chainShortName=trade_zone&limit=1", 200, "0", "blockList", 1},
		{"unknown param ignored", blk + "&x=random&limit=2", 200, "0", "blockList", 2},

		// block-list.
		{"blocks default", blk, 200, "0", "blockList", 20},
		{"blocks limit max", blk + "&limit=100", 200, "0", "blockList", 100},
		{"blocks limit over max", blk + "&limit=101", 400, "50036", "limit", 0},
		{"blocks limit zero", blk + "&limit=0", 400, "50036", "limit", 0},
		{"blocks limit malformed", blk + "&limit=ten", 400, "50036", "limit", 0},
		{"blocks limit leading zeros", blk + "&limit=007", 200, "0", "blockList", 7},
		{"blocks page zero", blk + "&page=0", 400, "50036", "page", 0},
		{"blocks page negative", blk + "&page=-1", 400, "50036", "page", 0},
		{"blocks last page", blk + "&page=500", 200, "0", "blockList", 20},
		{"blocks beyond window", blk + "&page=501", 400, "50036", "page", 0},
		{"blocks beyond window limit 100", blk + "&limit=100&page=101", 400, "50036", "page", 0},
		{"blocks partial last page", blk + "&limit=30&page=334", 200, "0", "blockList", 10},
		{"blocks at height", fmt.Sprintf("%s&height=%d&limit=5", blk, head-3), 200, "0", "blockList", 5},
		{"blocks above head", fmt.Sprintf("%s&height=%d", blk, head+1), 200, "0", "blockList", 0},
		{"blocks lowest height", fmt.Sprintf("%s&height=%d", blk, head-9999), 200, "0", "blockList", 1},
		{"blocks below window", fmt.Sprintf("%s&height=%d", blk, head-10000), 400, "50036", "height", 0},
		{"blocks height malformed", blk + "&height=0x10", 400, "50036", "height", 0},
		{"blocks height page beyond", fmt.Sprintf("%s&height=%d&limit=10&page=2", blk, head-9995), 400, "50036", "page", 0},

		// transaction-list.
		{"txs no height", txl, 400, "50014", "height", 0},
		{"txs empty height", txl + "&height=", 400, "50014", "height", 0},
		{"txs height malformed", txl + "&height=12a", 400, "50036", "height", 0},
		{"txs above head", fmt.Sprintf("%s&height=%d", txl, head+1), 200, "0", "blockList", 0},
		{"txs protocol unknown", fmt.Sprintf("%s&height=%d&protocolType=token_777", txl, head), 400, "50036", "protocolType", 0},
		{"txs limit over max", fmt.Sprintf("%s&height=%d&limit=101", txl, head), 400, "50036", "limit", 0},
		{"txs page past the end", fmt.Sprintf("%s&height=%d&page=9", txl, head), 200, "0", "blockList", 0},
		{"txs limit 1", fmt.Sprintf("%s&height=%d&limit=1", txl, head), 200, "0", "blockList", 1},

		// position-list.
		{"positions no token", pos, 400, "50014", "tokenContractAddress", 0},
		{"positions bad token", pos + "&tokenContractAddress=0x1234", 400, "50036", "tokenContractAddress", 0},
		{"positions unknown token", pos + "&tokenContractAddress=0x" + strings.Repeat("ab", 20), 200, "0", "positionList", 0},
		{"positions default", tok, 200, "0", "positionList", 20},
		{"positions upper-case token", pos + "&tokenContractAddress=0x" + strings.ToUpper(token[2:]), 200, "0", "positionList", 20},
		{"positions limit max", tok + "&limit=50", 200, "0", "positionList", 50},
		{"positions limit over max", tok + "&limit=51", 400, "50036", "limit", 0},
		{"positions last page", tok + "&limit=50&page=200", 200, "0", "positionList", 50},
		{"positions beyond window", tok + "&limit=50&page=201", 400, "50036", "page", 0},
		{"positions bad holder", tok + "&holderAddress=xyz", 400, "50036", "holderAddress", 0},
		{"positions unknown holder", tok + "&holderAddress=0x" + strings.Repeat("cd", 20), 200, "0", "positionList", 0},

		// transaction-multi and transaction-fills.
		{"multi no txId", multi, 400, "50014", "txId", 0},
		{"multi txid spelled as in fills", multi + "&txid=" + cross[0], 400, "50014", "txId", 0},
		{"multi 20 hashes", multi + "&txId=" + join(cross[:20]), 200, "0", "", -1},
		{"multi 21 hashes", multi + "&txId=" + join(cross), 400, "50025", "txId", 0},
		{"multi malformed hash", multi + "&txId=" + cross[0] + "," + bad, 400, "50036", "txId", 0},
		{"multi short hash", multi + "&txId=0x1234", 400, "50036", "txId", 0},
		{"multi empty item", multi + "&txId=" + cross[0] + ",", 400, "50036", "txId", 0},
		{"multi unknown", multi + "&txId=" + s.UnknownHash(0) + "," + s.UnknownHash(1), 200, "0", "", 0},
		{"multi duplicate", multi + "&txId=" + cross[0] + "," + cross[0], 200, "0", "", 1},
		{"fills no txid", fills, 400, "50014", "txid", 0},
		{"fills two hashes", fills + "&txid=" + cross[0] + "," + cross[1], 400, "50036", "txid", 0},
		{"fills malformed", fills + "&txid=" + bad, 400, "50036", "txid", 0},
		{"fills one", fills + "&txid=" + cross[0], 200, "0", "", 1},

		// internal-transaction-multi.
		{"internal no txId", itm, 400, "50014", "txId", 0},
		{"internal 21 hashes", itm + "&txId=" + join(internal), 400, "50025", "txId", 0},
		{"internal malformed", itm + "&txId=" + bad, 400, "50036", "txId", 0},
		{"internal limit over max", itm + "&txId=" + internal[0] + "&limit=101", 400, "50036", "limit", 0},
		{"internal unknown", itm + "&txId=" + s.UnknownHash(0), 200, "0", "transactionList", 0},
		{"internal limit 1", itm + "&txId=" + join(internal[:20]) + "&limit=1", 200, "0", "transactionList", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := get(t, s, c.query)
			code, msg, data := a.envelope(t)
			if a.status != c.status || code != c.code {
				t.Fatalf("got %d %s %q, want %d %s", a.status, code, msg, c.status, c.code)
			}
			if c.code != "0" {
				if !strings.Contains(msg, c.names) || len(data) != 0 {
					t.Errorf("msg %q does not name %s, or data %v not empty", msg, c.names, data)
				}
				return
			}
			n := len(data)
			if c.names != "" {
				n = len(list(t, data, c.names))
			}
			if c.items >= 0 && n != c.items {
				t.Errorf("%d items, want %d", n, c.items)
			}
		})
	}
}

// TestPathAndMethod checks the 404 and 405 envelopes.
func TestPathAndMethod(t *testing.T) {
	s, _ := startClocked(t)
	c := client(t, 0)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/api/v5/chainx/block/nope?chainShortName=CHAINX", 404, codeNotFound},
		{"GET", "/", 404, codeNotFound},
		{"POST", "/api/v5/chainx/block/block-list?chainShortName=CHAINX", 405, "50115"},
		{"DELETE", "/api/v5/chainx/tz/cross/transaction-fills", 405, "50115"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL()+tc.path, nil)
		a := do(t, c, req)
		if code, _, _ := a.envelope(t); a.status != tc.status || code != tc.code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, a.status, code, tc.status, tc.code)
		}
	}
	req, _ := http.NewRequest("HEAD", s.URL()+"/api/v5/chainx/block/block-list?chainShortName=CHAINX", nil)
	if a := do(t, c, req); a.status != 200 || len(a.body) != 0 || a.header.Get("Content-Length") == "" {
		t.Errorf("HEAD: %d, %d body bytes, Content-Length %q", a.status, len(a.body), a.header.Get("Content-Length"))
	}
}

// TestPositions checks ranks, the holder filter and time-varying amounts.
func TestPositions(t *testing.T) {
	s, clk := startClocked(t)
	token := s.TokenContracts("CHAINX")[0]
	q := "/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + token
	page := list(t, get(t, s, q+"&limit=50&page=3").ok(t), "positionList")
	var prev float64
	for i, v := range page {
		if r := field(t, v, "rank"); r != fmt.Sprint(101+i) {
			t.Fatalf("item %d has rank %s, want %d", i, r, 101+i)
		}
		var amount float64
		fmt.Sscan(field(t, v, "amount"), &amount)
		if i > 0 && amount > prev {
			t.Fatalf("rank %d holds %v, more than the rank above (%v)", 101+i, amount, prev)
		}
		prev = amount
	}
	holder := field(t, page[7], "holderAddress")
	one := list(t, get(t, s, q+"&holderAddress="+strings.ToUpper(holder[:2])+strings.ToUpper(holder[2:])).ok(t), "positionList")
	if len(one) != 1 || mustJSON(t, one[0]) != mustJSON(t, page[7]) {
		t.Fatalf("holderAddress filter gave %v, want %v", one, page[7])
	}
	// Rank 10001 exists but is not reachable.
	c := s.chains["CHAINX"]
	far := c.holderAddress(&c.tokens[0], 10_001)
	if l := list(t, get(t, s, q+"&holderAddress="+far).ok(t), "positionList"); len(l) != 0 {
		t.Errorf("holder of rank 10001 listed: %v", l)
	}
	// Volatile: an hour of chain time later, amounts moved.
	before := mustJSON(t, page)
	clk.Advance(time.Hour)
	after := mustJSON(t, list(t, get(t, s, q+"&limit=50&page=3").ok(t), "positionList"))
	if before == after {
		t.Error("holder amounts did not change over an hour of chain time")
	}
}
