package purge

import (
	"math"
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

// Behind a CDN (docs/cdn.md) every answer carries, in the header the CDN
// reads (cdn.tag_header), tags naming what a purge selects it by, so that
// every purge selector and every reorganization is a few tags at the CDN.
// With the prefix p (cdn.tag_prefix, "ee-" by default), chain names in
// lower case:
//
//	p all                      every answer
//	p c-<chain>                the answers of a chain
//	p r-<route>                the answers of a route (route)
//	p r-<route>-<chain>        and of a chain (route with chain)
//	p k-<16 hex>               the answer's key, xxhash64 (url)
//	p h-<chain>-<16 hex>       a hash asked, xxhash64 of it in lower case (hash)
//	p b<L>-<chain>-<n>         height bucket n of size 16^L (heights, reorganizations)
//	p bw-<chain>               heights wider than any bucket
//
// An answer holding heights [lo, hi] is tagged at one level only, the
// smallest L (1 to BucketLevels) at which it lies in at most two buckets
// of 16^L heights: at most two bucket tags. A purge of heights [from, to]
// names, at every level, the buckets [from, to] touches (and bw-): every
// answer holding a height in the range lies in one of them at its own
// level. Finer than 16 heights is not named: a purge of one height purges
// at the CDN the answers of the 16 around it. A level whose buckets would
// be more than MaxBucketTags is replaced by the chain's tag, c-<chain>.
// The largest answer (a per-hash route of 20 hashes) has 27 tags.

// BucketLevels are the sizes of height buckets: 16^1 to 16^8 heights.
const BucketLevels = 8

// MaxBucketTags bounds the buckets a heights purge names at one level.
const MaxBucketTags = 32

// MaxTags and MaxTagLen are the strictest CDN's limits on an answer's
// tags (Cloudflare, Akamai): an answer never has more.
const (
	MaxTags   = 50
	MaxTagLen = 128
)

// Naming is how tags are written: the header, its separator, the prefix
// and the configured chains. One per configuration (cdn.*).
type Naming struct {
	Header []byte // the header the CDN reads, canonical case
	Sep    byte   // ' ' or ','
	Prefix string
	Chains []string // upper case, in order
}

func bucketSize(level int) int64 { return 1 << (4 * level) }

// AppendEntryTags appends e's tags, separated, to b.
func (n *Naming) AppendEntryTags(b []byte, e *cache.Entry) []byte {
	t := &e.Tags
	start := len(b)
	tag := func() []byte {
		if len(b) > start {
			b = append(b, n.Sep)
		}
		return append(b, n.Prefix...)
	}
	b = append(tag(), "all"...)
	routeName, chain := TagNames(t, n.Chains)
	chain = strings.ToLower(chain)
	if chain != "" {
		b = append(append(tag(), "c-"...), chain...)
	}
	if routeName != "" && t.Route != tagPerHash {
		b = append(append(tag(), "r-"...), routeName...)
		if chain != "" {
			b = append(append(append(append(tag(), "r-"...), routeName...), '-'), chain...)
		}
	}
	b = appendHex(append(tag(), "k-"...), xxhash.Sum64String(e.Key))
	if chain != "" {
		for _, h := range t.Hashes {
			b = appendHex(append(append(append(tag(), "h-"...), chain...), '-'), h)
		}
	}
	if t.Lo < t.Hi && chain != "" {
		lo, hi := t.Lo, t.Hi-1
		level := 1
		for ; level <= BucketLevels; level++ {
			if hi/bucketSize(level)-lo/bucketSize(level) <= 1 {
				break
			}
		}
		if level > BucketLevels {
			b = append(append(tag(), "bw-"...), chain...)
		} else {
			for k := lo / bucketSize(level); k <= hi/bucketSize(level); k++ {
				b = n.appendBucket(tag(), level, chain, k)
			}
		}
	}
	return b
}

func (n *Naming) appendBucket(b []byte, level int, chain string, k int64) []byte {
	b = strconv.AppendInt(append(b, 'b'), int64(level), 10)
	b = append(append(append(b, '-'), chain...), '-')
	return strconv.AppendInt(b, k, 10)
}

func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[v>>uint(i)&0xf])
	}
	return b
}

// SelectorTags are the tags that name, at the CDN, every answer sel
// selects (and, tags being coarser than selectors, some more). head is
// the newest height known of a chain (upper case; 0: unknown) and span
// how far above it an open range ("from the fork up") reaches.
func (n *Naming) SelectorTags(sel *Selector, head func(chain string) int64, span int64) []string {
	p := n.Prefix
	r := sel.req
	switch sel.kind {
	case kindURL:
		out := []string{p + "k-" + string(appendHex(nil, xxhash.Sum64String(sel.keys[0])))}
		for _, k := range sel.keys[1:] {
			if rest, ok := strings.CutPrefix(k, "hash|"); ok {
				chain, hash, _ := strings.Cut(rest, "|")
				out = append(out, p+"h-"+strings.ToLower(chain)+"-"+string(appendHex(nil, hashDigest(hash))))
			}
		}
		return out
	case kindHash:
		return []string{p + "h-" + strings.ToLower(r.Chain) + "-" + string(appendHex(nil, sel.hash))}
	case kindRoute:
		if r.Chain != "" {
			return []string{p + "r-" + r.Route + "-" + strings.ToLower(r.Chain)}
		}
		return []string{p + "r-" + r.Route}
	case kindHeights:
		chain := strings.ToLower(r.Heights.Chain)
		from, to := sel.from, sel.to
		if to == math.MaxInt64 || to-from > bucketSize(BucketLevels)*MaxBucketTags {
			to = max(from, head(r.Heights.Chain)) + span
		}
		out := []string{p + "bw-" + chain}
		for level := 1; level <= BucketLevels; level++ {
			lo, hi := from/bucketSize(level), to/bucketSize(level)
			if hi-lo >= MaxBucketTags {
				return []string{p + "c-" + chain}
			}
			for k := lo; k <= hi; k++ {
				out = append(out, string(n.appendBucket([]byte(p), level, chain, k)))
			}
		}
		return out
	}
	return []string{p + "all"}
}
