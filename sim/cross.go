package sim

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// crossCount is how many cross-chain transfers each chain has. Their hashes
// encode the index k, so CrossHashes(chain, n) is simply k = 0..n-1.
const crossCount = 1 << 20

// crossTx is an element of data in transaction-multi and transaction-fills
// (spec: Cross-chain transaction).
type crossTx struct {
	ID                   string `json:"id"`
	TxType               string `json:"txType"`
	CrossType            string `json:"crossType"`
	Status               string `json:"status"`
	ChainxTxHash         string `json:"chainxTxHash"`
	ChainxBlockHeight    string `json:"chainxBlockHeight"`
	ChainxBlockTime      string `json:"chainxBlockTime"`
	TzTxHash             string `json:"tzTxHash"`
	TzBlockHeight        string `json:"tzBlockHeight"`
	TzBlockTime          string `json:"tzBlockTime"`
	From                 string `json:"from"`
	To                   string `json:"to"`
	SourceAddress        string `json:"sourceAddress"`
	TargetAddress        string `json:"targetAddress"`
	Value                string `json:"value"`
	ValueRaw             string `json:"valueRaw"`
	TokenContractAddress string `json:"tokenContractAddress"`
	TokenType            string `json:"tokenType"`
	TokenID              string `json:"tokenId"`
	TokenName            string `json:"tokenName"`
	TzEventIndex         string `json:"tzEventIndex"`
	TzBlockHash          string `json:"tzBlockHash"`
	BatchDetail          string `json:"batchDetail"`
	UpdateTime           string `json:"updateTime"`
	BlockHeight          string `json:"blockHeight"`
}

func (c *chain) crossHash(k uint64) string { return c.hash(kindCross, k) }

// isBatch: every seventh transfer is a BatchWithdraw, so any run of seven
// consecutive hashes from CrossHashes holds one (k = 3 is the first).
func isBatch(k uint64) bool { return k%7 == 3 }

// crossRecords returns the records of a cross-chain hash (any hex case): none
// for an unknown hash, two for a BatchWithdraw (one per leg, same id,
// different tzEventIndex), one otherwise. Transfers all lie before genesis,
// so they are settled and never change with chain time.
func (c *chain) crossRecords(s string, interval time.Duration) []crossTx {
	k, ok := open(c.key, kindCross, s, 32)
	if !ok || k >= crossCount {
		return nil
	}
	// Every value is drawn from r in the order below: another order would
	// change every transfer.
	r := newRng(c.key, kindCross, k, 1)
	crossType, txType, status := crossKind(k, &r)
	at := c.placeCross(k, txType, &r, interval)
	tk, tokenID := c.crossToken(&r)
	source := c.user(r.next())
	legs := c.crossLegs(&r, tk, source, crossType == "BatchWithdraw")
	batchDetail := ""
	if len(legs) > 1 {
		js, _ := json.Marshal(legs)
		batchDetail = string(js)
	}
	event := r.n(200)
	base := crossTx{
		ID:                   strings.ToLower(s),
		TxType:               txType,
		CrossType:            crossType,
		Status:               status,
		ChainxTxHash:         c.txHash(at.height, int(r.n(uint64(at.txnCount)))),
		ChainxBlockHeight:    itoa(at.height),
		ChainxBlockTime:      itoa(at.chainxTime),
		TzTxHash:             c.hash(kindTZTx, k),
		TzBlockHeight:        itoa(at.tzHeight),
		TzBlockTime:          itoa(at.tzTime),
		From:                 c.addr(kindRelayer, r.n(4)),
		To:                   c.addr(kindBridge, 0),
		SourceAddress:        source,
		TokenContractAddress: tk.address,
		TokenType:            tk.kind,
		TokenID:              tokenID,
		TokenName:            tk.name,
		TzBlockHash:          c.hash(kindTZBlock, uint64(at.tzHeight)),
		BatchDetail:          batchDetail,
		UpdateTime:           itoa(max(at.chainxTime, at.tzTime) + 1000 + int64(r.n(5000))),
		BlockHeight:          at.published,
	}
	out := make([]crossTx, len(legs))
	for i, l := range legs {
		out[i] = base
		out[i].TargetAddress = l.TargetAddress
		out[i].Value = l.Value
		out[i].ValueRaw = l.ValueRaw
		out[i].TzEventIndex = utoa(event + uint64(i))
	}
	return out
}

// crossKind draws the kind of transfer k and whether it succeeded.
func crossKind(k uint64, r *rng) (crossType, txType, status string) {
	crossType, txType = "Withdraw", "ChainXToTZ"
	switch {
	case isBatch(k):
		crossType = "BatchWithdraw"
	case r.n(2) == 0:
		crossType, txType = "Deposit", "TZToChainX"
	}
	status = "0x1"
	if r.n(100) < 7 {
		status = "0x0"
	}
	return crossType, txType, status
}

// crossPlace is where a transfer lies on both chains.
type crossPlace struct {
	height, tzHeight   int64  // its blocks here and on TZ
	txnCount           int    // transactions of its block here
	chainxTime, tzTime int64  // unix ms
	published          string // blockHeight: the height on the chain it left
}

// placeCross places transfer k: the layer-2 side is a real transaction
// of the simulated chain; the other side follows or precedes it on TZ.
func (c *chain) placeCross(k uint64, txType string, r *rng, interval time.Duration) crossPlace {
	h := c.offset - 10 - int64(k/3)
	at := crossPlace{height: h, txnCount: c.body(h).txnCount, chainxTime: c.blockTimeMs(h, interval)}
	at.tzHeight = c.tzOffset - 20 - int64(k/2)
	at.tzTime = at.chainxTime + 2000 + int64(r.n(30_000))
	at.published = itoa(h)
	if txType == "TZToChainX" {
		// A deposit draws its time again, after the draw above: what is
		// drawn later stays as it always was.
		at.tzTime = at.chainxTime - 2000 - int64(r.n(30_000))
		at.published = itoa(at.tzHeight)
	}
	return at
}

// crossToken draws the token a transfer moves: one of the ERC20s, or an
// ERC1155 item with its id.
func (c *chain) crossToken(r *rng) (tk *token, tokenID string) {
	if r.n(5) == 0 {
		return &c.tokens[4], utoa(r.n(200))
	}
	return &c.tokens[r.n(3)], ""
}

// crossLeg is one target of a transfer (an element of batchDetail).
type crossLeg struct {
	TargetAddress string `json:"targetAddress"`
	Value         string `json:"value"`
	ValueRaw      string `json:"valueRaw"`
}

// crossLegs draws a transfer's targets and values: two for a batch, one
// otherwise, most often back to source.
func (c *chain) crossLegs(r *rng, tk *token, source string, batch bool) []crossLeg {
	size := 1
	if batch {
		size = 2
	}
	legs := make([]crossLeg, size)
	for i := range legs {
		target := source
		if batch || r.n(4) == 0 {
			target = c.user(r.next())
		}
		legs[i].TargetAddress = target
		if tk.kind == "ERC1155" {
			n := utoa(1 + r.n(40))
			legs[i].Value, legs[i].ValueRaw = n, n
		} else {
			micro := 1 + r.n(5e10) // display units, 6 digits
			legs[i].Value = dec(micro, 6)
			legs[i].ValueRaw = utoa(micro) + strings.Repeat("0", tk.decimals-6)
		}
	}
	return legs
}

// crossRecords returns the records of a cross-chain hash as the profile in
// force reads them (profile.go): under cross-id-other the hash asked is in
// tzTxHash and id is the hash tzTxHash had (a hash that opens nothing);
// under update-moves updateTime is the chain time of the answer until
// UpdateMoveFor after the profile was set, then that end, fixed.
func (s *Server) crossRecords(c *chain, hash string, a ask) []crossTx {
	out := c.crossRecords(hash, s.cfg.BlockInterval)
	for i := range out {
		x := &out[i]
		if a.CrossIDOther {
			x.ID, x.TzTxHash = x.TzTxHash, x.ID
		}
		if a.UpdateMoves {
			moved := a.since.Add(UpdateMoveFor)
			if a.now.Before(moved) {
				moved = a.now
			}
			if old, _ := strconv.ParseInt(x.UpdateTime, 10, 64); moved.UnixMilli() > old {
				x.UpdateTime = itoa(moved.UnixMilli())
			}
		}
	}
	return out
}
