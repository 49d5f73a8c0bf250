package sim

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Field lists of the explorer API's records, in its documented order (the
// schemas of docs/openapi.yaml). Booleans are marked with a trailing "?".
var (
	pagedFields    = []string{"page", "limit", "totalPage"}
	chainFields    = []string{"page", "limit", "totalPage", "chainFullName", "chainShortName"}
	positionFields = []string{"holderAddress", "amount", "valueUsd", "positionChange24h", "rank"}
	blockFields    = []string{"hash", "height", "validator", "blockTime", "txnCount", "blockSize", "mineReward",
		"totalFee", "feeSymbol", "avgFee", "ommerBlock", "gasUsed", "gasLimit", "gasAvgPrice", "state", "burnt"}
	blockTxFields = []string{"txid", "blockHash", "height", "transactionTime", "from", "to", "isFromContract?",
		"isToContract?", "amount", "transactionSymbol", "txfee", "state", "tokenContractAddress", "tokenId", "methodId"}
	crossFields = []string{"id", "txType", "crossType", "status", "chainxTxHash", "chainxBlockHeight",
		"chainxBlockTime", "tzTxHash", "tzBlockHeight", "tzBlockTime", "from", "to", "sourceAddress",
		"targetAddress", "value", "valueRaw", "tokenContractAddress", "tokenType", "tokenId", "tokenName",
		"tzEventIndex", "tzBlockHash", "batchDetail", "updateTime", "blockHeight"}
	internalFields = []string{"txId", "blockHash", "height", "transactionTime", "operation", "from", "to",
		"isFromContract?", "isToContract?", "amount"}
)

// checkFields fails unless obj has exactly the fields, with the JSON types
// the spec gives (strings, and booleans for the names ending in "?"),
// besides the listed extra fields, which are arrays checked by the caller.
func checkFields(t *testing.T, what string, v any, fields []string, arrays ...string) {
	t.Helper()
	obj := object(t, v)
	want := map[string]bool{}
	for _, f := range fields {
		name, isBool := strings.CutSuffix(f, "?")
		want[name] = true
		got, ok := obj[name]
		switch {
		case !ok:
			t.Errorf("%s: field %s missing", what, name)
		case isBool:
			if _, ok := got.(bool); !ok {
				t.Errorf("%s: field %s = %#v, want a JSON boolean", what, name, got)
			}
		default:
			if _, ok := got.(string); !ok {
				t.Errorf("%s: field %s = %#v, want a JSON string", what, name, got)
			}
		}
	}
	for _, a := range arrays {
		want[a] = true
		if _, ok := obj[a].([]any); !ok {
			t.Errorf("%s: field %s = %#v, want an array", what, a, obj[a])
		}
	}
	for name := range obj {
		if !want[name] {
			t.Errorf("%s: field %s is not in the spec", what, name)
		}
	}
}

var (
	hashRe    = regexp.MustCompile(`^0x[0-9a-f]{64}$`)
	addressRe = regexp.MustCompile(`^0x[0-9a-f]{40}$`)
	decimalRe = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
	msRe      = regexp.MustCompile(`^1[0-9]{12}$`)
)

// checkFormats checks the value formats of the fields present in v.
func checkFormats(t *testing.T, what string, v any) {
	t.Helper()
	formats := map[string]*regexp.Regexp{
		"hash": hashRe, "txid": hashRe, "txId": hashRe, "blockHash": hashRe, "id": hashRe,
		"chainxTxHash": hashRe, "tzTxHash": hashRe, "tzBlockHash": hashRe,
		"validator": addressRe, "from": addressRe, "to": addressRe, "holderAddress": addressRe,
		"sourceAddress": addressRe, "targetAddress": addressRe,
		"blockTime": msRe, "transactionTime": msRe, "chainxBlockTime": msRe, "tzBlockTime": msRe, "updateTime": msRe,
		"amount": decimalRe, "txfee": decimalRe, "totalFee": decimalRe, "value": decimalRe, "valueRaw": decimalRe,
		"height": decimalRe, "rank": decimalRe,
	}
	for name, re := range formats {
		if s, ok := object(t, v)[name].(string); ok && !re.MatchString(s) {
			t.Errorf("%s: %s = %q does not match %s", what, name, s, re)
		}
	}
}

// TestShapes checks every route's answer against the spec's field lists.
func TestShapes(t *testing.T) {
	s, _ := startClocked(t)
	head := s.Head("CHAINX")
	token := s.TokenContracts("CHAINX")[0]
	cross := s.CrossHashes("TRADE_ZONE", 14)
	internal := s.InternalTxHashes("chainx", 3)

	cases := []struct {
		name, query string
		wrapper     []string // nil: data is a flat array of items
		listName    string
		item        []string
		minItems    int
	}{
		{"position-list", "/api/v5/chainx/token/position-list?chainShortName=chainx&tokenContractAddress=" + token,
			append(chainFields, "circulatingSupply"), "positionList", positionFields, 20},
		{"block-list", "/api/v5/chainx/block/block-list?chainShortName=chainx", chainFields, "blockList", blockFields, 20},
		{"block-list at height", fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=chainx&height=%d&limit=100", head-50),
			chainFields, "blockList", blockFields, 1}, // the block at it (height-at, the default)
		{"transaction-multi", "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + join(cross),
			nil, "", crossFields, 16},
		{"transaction-fills", "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + cross[0],
			nil, "", crossFields, 1},
		{"internal-transaction-multi", "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=chainx&txId=" + join(internal),
			pagedFields, "transactionList", internalFields, 3},
	}
	for _, p := range []string{"transaction", "internal", "token_20", "token_721", "token_1155", "token_10"} {
		// Enough blocks to meet each kind; transactions of one block are few.
		for h := head - 40; h <= head; h++ {
			cases = append(cases, struct {
				name, query string
				wrapper     []string
				listName    string
				item        []string
				minItems    int
			}{"transaction-list " + p, fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d&protocolType=%s&limit=100", h, p),
				chainFields, "blockList", blockTxFields, 0})
		}
	}
	seen := map[string]int{}
	for _, c := range cases {
		data := get(t, s, c.query).ok(t)
		items := data
		if c.wrapper != nil {
			if len(data) != 1 {
				t.Fatalf("%s: %d data elements, want 1", c.name, len(data))
			}
			checkFields(t, c.name+" wrapper", data[0], c.wrapper, c.listName)
			items = list(t, data, c.listName)
		}
		if len(items) < c.minItems {
			t.Errorf("%s: %d items, want at least %d", c.name, len(items), c.minItems)
		}
		seen[c.name] += len(items)
		for i, it := range items {
			checkFields(t, fmt.Sprintf("%s item %d", c.name, i), it, c.item)
			checkFormats(t, fmt.Sprintf("%s item %d", c.name, i), it)
		}
	}
	for _, p := range []string{"transaction", "internal", "token_20", "token_721", "token_1155", "token_10"} {
		if seen["transaction-list "+p] == 0 {
			t.Errorf("transaction-list %s: no records in 41 blocks", p)
		}
	}
}

// TestCrossRecords checks the cross-chain record rules: ids in lower case
// whatever the case asked, two records for a BatchWithdraw, batchDetail
// only on batches, tokenId only for ERC1155, order of the hashes asked.
func TestCrossRecords(t *testing.T) {
	s, _ := startClocked(t)
	hashes := s.CrossHashes("TRADE_ZONE", 20)
	asked := make([]string, len(hashes))
	for i := range hashes {
		asked[len(hashes)-1-i] = hashes[i] // reversed
	}
	asked[0] = "0x" + strings.ToUpper(asked[0][2:])
	data := get(t, s, "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=trade_zone&txId="+join(asked)).ok(t)

	var order []string
	perID := map[string][]map[string]any{}
	types := map[string]bool{}
	for _, v := range data {
		r := object(t, v)
		id := r["id"].(string)
		if len(order) == 0 || order[len(order)-1] != id {
			order = append(order, id)
		}
		perID[id] = append(perID[id], r)
		types[r["crossType"].(string)+" "+r["txType"].(string)] = true
		types[r["tokenType"].(string)] = true
		types["status "+r["status"].(string)] = true
		batch := r["crossType"] == "BatchWithdraw"
		if detail := r["batchDetail"].(string); batch != (detail != "") {
			t.Errorf("%s: crossType %s with batchDetail %q", id, r["crossType"], detail)
		} else if batch && !json.Valid([]byte(detail)) {
			t.Errorf("%s: batchDetail is not JSON: %s", id, detail)
		}
		if (r["tokenType"] == "ERC1155") != (r["tokenId"] != "") {
			t.Errorf("%s: tokenType %s with tokenId %q", id, r["tokenType"], r["tokenId"])
		}
	}
	for i, h := range asked {
		if i >= len(order) || order[i] != strings.ToLower(h) {
			t.Fatalf("answer order %v, want the order asked %v", order, asked)
		}
	}
	for id, recs := range perID {
		batch := recs[0]["crossType"] == "BatchWithdraw"
		if batch && (len(recs) != 2 || recs[0]["tzEventIndex"] == recs[1]["tzEventIndex"]) {
			t.Errorf("%s: BatchWithdraw has %d records, want 2 with different tzEventIndex", id, len(recs))
		}
		if !batch && len(recs) != 1 {
			t.Errorf("%s: %d records, want 1", id, len(recs))
		}
	}
	for _, want := range []string{"BatchWithdraw ChainXToTZ", "Withdraw ChainXToTZ", "Deposit TZToChainX", "ERC20", "ERC1155", "status 0x1"} {
		if !types[want] {
			t.Errorf("no %s record among the first 20 hashes (have %v)", want, types)
		}
	}

	// A hash of one chain is unknown on another, and unknown hashes give
	// nothing, even mixed with known ones.
	mixed := []string{s.UnknownHash(1), hashes[0], s.CrossHashes("CHAINX", 1)[0], s.UnknownHash(2)}
	data = get(t, s, "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId="+join(mixed)).ok(t)
	if len(data) != 1 || field(t, data[0], "id") != hashes[0] {
		t.Errorf("mixed known and unknown hashes: %d records, want only %s", len(data), hashes[0])
	}
	if data := get(t, s, "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+s.UnknownHash(3)).ok(t); len(data) != 0 {
		t.Errorf("unknown hash: %d records, want none", len(data))
	}
}

// TestInternalTransactions checks paging over the whole list of asked
// hashes and that hashes without internal transactions contribute nothing.
func TestInternalTransactions(t *testing.T) {
	s, _ := startClocked(t)
	hashes := s.InternalTxHashes("CHAINX", 20)
	if len(hashes) != 20 {
		t.Fatalf("InternalTxHashes gave %d hashes", len(hashes))
	}
	q := "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + join(hashes)
	data := get(t, s, q+"&limit=100").ok(t)
	all := list(t, data, "transactionList")
	if len(all) < 20 {
		t.Fatalf("%d internal transactions for 20 hashes, want at least one each", len(all))
	}
	// Pages of 7 concatenate to the whole list.
	var paged []any
	totalPage := 0
	for page := 1; ; page++ {
		data := get(t, s, fmt.Sprintf("%s&limit=7&page=%d", q, page)).ok(t)
		fmt.Sscan(field(t, data[0], "totalPage"), &totalPage)
		l := list(t, data, "transactionList")
		if len(l) == 0 {
			break
		}
		paged = append(paged, l...)
	}
	if a, b := mustJSON(t, paged), mustJSON(t, all); a != b || totalPage != (len(all)+6)/7 {
		t.Errorf("pages of 7 (totalPage %d) do not add up to the whole list of %d", totalPage, len(all))
	}
	// Hashes without internal transactions, and unknown ones, add nothing.
	head := s.Head("CHAINX")
	var plain []string
	for _, h := range s.TxHashes("CHAINX", head-5) {
		if !slices.Contains(hashes, h) {
			plain = append(plain, h)
		}
	}
	withPlain := append(append([]string{s.UnknownHash(0)}, hashes[:3]...), plain[:min(len(plain), 10)]...)
	a := list(t, get(t, s, "/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&limit=100&txId="+join(withPlain)).ok(t), "transactionList")
	for _, v := range a {
		if id := field(t, v, "txId"); !slices.Contains(hashes[:3], id) && internalCount(s, id) == 0 {
			t.Errorf("record for %s, which has no internal transactions", id)
		}
	}
}

// internalCount is the number of internal transactions of a CHAINX hash.
func internalCount(s *Server, hash string) int {
	c := s.chains["CHAINX"]
	head := s.Head("CHAINX")
	h, i, ok := c.openTx(hash, head)
	if !ok {
		return 0
	}
	b := c.body(h)
	x, core := c.tx(h, i, b, false, false, s.cfg.BlockInterval)
	return len(c.internals(h, i, core, x, s.cfg.BlockInterval))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
