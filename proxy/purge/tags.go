package purge

import (
	"strconv"
	"strings"

	"github.com/buger/jsonparser"
	"github.com/cespare/xxhash/v2"

	"explorer-edge/cache"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
)

// An entry's tags are what a purge selects it by (cache/tags.go): its
// route, its chain, the hashes it was asked for, and the range of block
// heights it contains. They are read from the key and the body once, when
// the entry is stored: on the miss path, never on a hit.

// tagPerHash is the route tag of per-hash entries (hash|CHAIN|0x..), which
// both per-hash routes answer from.
const tagPerHash = uint8(route.Count) + 1

// routeTag is the route tag of r's whole-key answers.
func routeTag(r *route.Route) uint8 { return uint8(r.ID) + 1 }

// hashDigest is the tag of a hash, in canonical (lower) case.
func hashDigest(h string) uint64 { return xxhash.Sum64String(strings.ToLower(h)) }

// ChainTag is the tag of a canonical (upper-case) chain name among chains
// (the configured ones, in order); 0 if the edge does not serve it.
func ChainTag(chains []string, chain string) uint8 {
	for i, c := range chains {
		if c == chain {
			return uint8(i) + 1
		}
	}
	return 0
}

// Of is e's tags, read from its key and its identity body (which it does
// not keep); chains are the configured ones, in order.
func Of(e *cache.Entry, body []byte, chains []string) cache.Tags {
	var t cache.Tags
	if rest, ok := strings.CutPrefix(e.Key, "hash|"); ok {
		chain, hash, _ := strings.Cut(rest, "|")
		t.Route, t.Chain, t.Hashes = tagPerHash, ChainTag(chains, chain), []uint64{hashDigest(hash)}
		crossHeights(&t, envelope.Wrap(body))
		return t
	}
	path, _, _ := strings.Cut(e.Key, "?")
	r := route.ByPath([]byte(path))
	if r == nil {
		return t
	}
	var q route.Params
	q.ParseKey(r, e.Key)
	t.Route, t.Chain = routeTag(r), ChainTag(chains, string(q.Chain))
	if q.NHashes > 0 {
		t.Hashes = make([]uint64, q.NHashes)
		for i := range q.NHashes {
			t.Hashes[i] = hashDigest(string(q.Hash(i)))
		}
	}
	switch r.ID {
	case route.BlockList:
		rowHeights(&t, body, "height", "data", "[0]", "blockList")
	case route.TransactionList:
		if q.Height >= 0 {
			widen(&t, q.Height)
		}
	case route.InternalTransactionMulti:
		// The spec names the list both ways; explorer-sim uses transactionList.
		if !rowHeights(&t, body, "height", "data", "[0]", "transactionList") {
			rowHeights(&t, body, "height", "data", "[0]", "internalTransactionDetails")
		}
	case route.TransactionMulti, route.TransactionFills:
		crossHeights(&t, body)
	}
	return t
}

// crossHeights widens t by the heights of the cross-chain records in an
// envelope: chainxBlockHeight is the height of the transfer's transaction
// on the chain asked.
func crossHeights(t *cache.Tags, body []byte) {
	rowHeights(t, body, "chainxBlockHeight", "data")
}

// rowHeights widens t by the field of every row of the array at path; it
// reports whether the array is there.
func rowHeights(t *cache.Tags, body []byte, field string, path ...string) bool {
	_, err := jsonparser.ArrayEach(body, func(row []byte, _ jsonparser.ValueType, _ int, _ error) {
		s, err := jsonparser.GetString(row, field)
		if err != nil {
			return
		}
		if h, err := strconv.ParseInt(s, 10, 64); err == nil && h >= 0 {
			widen(t, h)
		}
	}, path...)
	return err == nil
}

// widen makes t's height range hold h.
func widen(t *cache.Tags, h int64) {
	if t.Hi <= t.Lo {
		t.Lo, t.Hi = h, h+1
		return
	}
	t.Lo, t.Hi = min(t.Lo, h), max(t.Hi, h+1)
}

// TagNames names the route ("per-hash" for a hash's entry; "" untagged)
// and the chain of tags t among chains.
func TagNames(t *cache.Tags, chains []string) (routeName, chain string) {
	switch {
	case t.Route == tagPerHash:
		routeName = "per-hash"
	case t.Route > 0 && int(t.Route) <= int(route.Count):
		routeName = route.Table[t.Route-1].Name
	}
	if t.Chain > 0 && int(t.Chain) <= len(chains) {
		chain = chains[t.Chain-1]
	}
	return routeName, chain
}
