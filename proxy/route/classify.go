package proxy

import (
	"strconv"
	"strings"

	"github.com/buger/jsonparser"

	"explorer-edge/cache"
)

// These read upstream answers with jsonparser, a zero-copy scanner that
// touches only the fields asked for. They run once per upstream answer,
// never on a hit.

func classifyVolatile(*Proxy, *fetchReq, []byte) cache.Class { return cache.Volatile }

// classifyBlockList: every block list is head. Its blocks, once done, never
// change, but its totalPage and the reachable window (the newest 10000
// blocks) move with every block, also for a page asked at a height, so no
// block-list answer is final. (Its blocks feed chain truth before it is
// classified: reorg.go.)
func classifyBlockList(*Proxy, *fetchReq, []byte) cache.Class { return cache.Head }

// FinalHeight is the highest done block seen on chain (0: none yet).
func (p *Proxy) FinalHeight(chain string) int64 { return p.truth.Final(chain) }

// classifyTransactionList: a block at or below the finalized height whose
// transactions are none pending is final; anything newer is head.
func classifyTransactionList(p *Proxy, f *fetchReq, body []byte) cache.Class {
	if f.height < 0 || f.height > p.FinalHeight(f.chain) {
		return cache.Head
	}
	pending := false
	jsonparser.ArrayEach(body, func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		if state, _ := jsonparser.GetString(b, "state"); state == "pending" {
			pending = true
		}
	}, "data", "[0]", "blockList")
	if pending {
		return cache.Head
	}
	return cache.Final
}

// classifyCross: a cross-chain record with a status is settled; no record
// may still appear (negative).
func classifyCross(_ *Proxy, _ *fetchReq, body []byte) cache.Class {
	n, unsettled := 0, false
	jsonparser.ArrayEach(body, func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		n++
		if s, _ := jsonparser.GetString(b, "status"); s == "" {
			unsettled = true
		}
	}, "data")
	switch {
	case n == 0:
		return cache.Negative
	case unsettled:
		return cache.Head
	}
	return cache.Final
}

// classifyInternal: the page is final only when every hash asked has rows
// in it and every row is at or below the finalized height: then each hash
// is mined in a done block, its internal transactions and so the paging
// over them (totalPage) cannot change. A row above it makes the answer head;
// a hash without rows (not mined yet, no internal transactions, unknown,
// or its rows on other pages) makes it at most negative, since that hash
// may still gain rows.
func classifyInternal(p *Proxy, f *fetchReq, body []byte) cache.Class {
	final := p.FinalHeight(f.chain)
	var seen [maxHashes]bool
	n, newer := 0, false
	each := func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		n++
		h, _ := jsonparser.GetString(b, "height")
		if v, err := strconv.ParseInt(h, 10, 64); err != nil || v > final {
			newer = true
		}
		id, _ := jsonparser.GetString(b, "txId")
		for i, h := range f.hashes {
			if strings.EqualFold(id, h) {
				seen[i] = true
			}
		}
	}
	// The spec names the list both ways; explorer-sim uses transactionList.
	if _, err := jsonparser.ArrayEach(body, each, "data", "[0]", "transactionList"); err != nil {
		jsonparser.ArrayEach(body, each, "data", "[0]", "internalTransactionDetails")
	}
	switch {
	case newer:
		return cache.Head
	case n == 0:
		return cache.Negative
	}
	for i := range f.hashes {
		if !seen[i] {
			return cache.Negative
		}
	}
	return cache.Final
}
