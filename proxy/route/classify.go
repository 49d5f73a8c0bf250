package route

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/buger/jsonparser"

	"explorer-edge/cache"
)

// Question is what a classifier knows of the question an answer is to:
// its height (-1: none), its hashes, the chain's finalized height when
// the answer arrived, when the question was asked and how long a
// cross-chain record must have been left unchanged to be final
// (cache.cross_chain_settle; 0 or no Asked: its status alone decides).
type Question struct {
	Height int64
	Hashes []string
	Final  int64
	Asked  time.Time
	Settle time.Duration
}

// These read upstream answers with jsonparser, a zero-copy scanner that
// touches only the fields asked for. They run once per upstream answer,
// never on a hit.

func classifyVolatile(Question, []byte) cache.Class { return cache.Volatile }

// blockListWindow is block-list's reachable window (Table's Window): the
// newest blocks the upstream answers.
const blockListWindow = 10000

// classifyBlockList: a block list is head, but for the block at a height
// alone. A page's totalPage and the reachable window (the newest 10000
// blocks) move with every block, also for a page asked at a height under
// the reading that answers the blocks down from it. An answer to height=X
// that is one block, X, on its only page (totalPage 1), done (or, on a
// chain whose blocks carry no state, at or below the finalized height:
// chain_finality_depth) is final: under the vendor's reading (the block at
// that height, docs/explorer-readings.md) that answer never changes. Under
// the other reading only the window's lowest block answers so, and it
// stays the same block. (Its blocks feed chain truth before it is
// classified, and a reorganization purges it by its height: reorg.go.)
// Only in the newest half of the reachable window: the upstream answers
// only the newest 10000 blocks (blockListWindow), so a block below them
// is refused, and the final lifetime of a block list (1 h, routes.go)
// must end before its block leaves the window: 5000 blocks are at least
// 83 minutes at a block a second.
func classifyBlockList(q Question, body []byte) cache.Class {
	if q.Height < 0 || q.Height <= q.Final-blockListWindow/2 {
		return cache.Head
	}
	if tp, _ := jsonparser.GetString(body, "data", "[0]", "totalPage"); tp != "1" {
		return cache.Head
	}
	n, final := 0, false
	jsonparser.ArrayEach(body, func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		n++
		h, _ := jsonparser.GetString(b, "height")
		state, _ := jsonparser.GetString(b, "state")
		v, err := strconv.ParseInt(h, 10, 64)
		final = err == nil && v == q.Height && (state == "done" || state == "" && v <= q.Final)
	}, "data", "[0]", "blockList")
	if n == 1 && final {
		return cache.Final
	}
	return cache.Head
}

// classifyTransactionList: a block at or below the finalized height whose
// transactions are none pending is final; anything newer is head.
func classifyTransactionList(f Question, body []byte) cache.Class {
	if f.Height < 0 || f.Height > f.Final {
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

func classifyCross(q Question, body []byte) cache.Class {
	return ClassifyCrossAt(body, q.Asked, q.Settle)
}

// ClassifyCross is ClassifyCrossAt with no settle time: a record with a
// status is settled.
func ClassifyCross(body []byte) cache.Class { return ClassifyCrossAt(body, time.Time{}, 0) }

// ClassifyCrossAt: a cross-chain record is settled when it has a status
// and, with a settle time, its updateTime (the vendor's "last update time
// of the record", ms) is at least settle before asked; a record updated
// since may still change (the vendor's records keep moving after their
// status: explorer-sim's update-moves), and one with an updateTime that
// does not read as milliseconds is taken as just updated. No record may
// still appear (negative).
func ClassifyCrossAt(body []byte, asked time.Time, settle time.Duration) cache.Class {
	n, unsettled := 0, false
	check := settle > 0 && !asked.IsZero()
	latest := asked.Add(-settle).UnixMilli() // updated at or before it: settled
	jsonparser.ArrayEach(body, func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		n++
		if s, _ := jsonparser.GetString(b, "status"); s == "" {
			unsettled = true
		}
		if !check {
			return
		}
		u, err := jsonparser.GetString(b, "updateTime")
		if errors.Is(err, jsonparser.KeyPathNotFoundError) || (err == nil && u == "") {
			return // not given: the status decides
		}
		if ms, err := strconv.ParseInt(u, 10, 64); err != nil || ms > latest {
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
func classifyInternal(f Question, body []byte) cache.Class {
	final := f.Final
	var seen [MaxHashes]bool
	n, newer := 0, false
	each := func(b []byte, _ jsonparser.ValueType, _ int, _ error) {
		n++
		h, _ := jsonparser.GetString(b, "height")
		if v, err := strconv.ParseInt(h, 10, 64); err != nil || v > final {
			newer = true
		}
		id, _ := jsonparser.GetString(b, "txId")
		for i, h := range f.Hashes {
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
	for i := range f.Hashes {
		if !seen[i] {
			return cache.Negative
		}
	}
	return cache.Final
}
