package sim

import (
	"encoding/json"
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
	r := newRng(c.key, kindCross, k, 1)
	crossType, txType := "Withdraw", "ChainXToTZ"
	switch {
	case isBatch(k):
		crossType = "BatchWithdraw"
	case r.n(2) == 0:
		crossType, txType = "Deposit", "TZToChainX"
	}
	status := "0x1"
	if r.n(100) < 7 {
		status = "0x0"
	}

	// The layer-2 side is a real transaction of the simulated chain.
	h := c.offset - 10 - int64(k/3)
	b := c.body(h)
	chainxTime := c.blockTimeMs(h, interval)
	tzHeight := c.tzOffset - 20 - int64(k/2)
	tzTime := chainxTime + 2000 + int64(r.n(30_000))
	if txType == "TZToChainX" {
		tzTime = chainxTime - 2000 - int64(r.n(30_000))
	}
	published := itoa(h)
	if txType == "TZToChainX" {
		published = itoa(tzHeight)
	}

	var tk *token
	var tokenID string
	if r.n(5) == 0 {
		tk = &c.tokens[4]
		tokenID = utoa(r.n(200))
	} else {
		tk = &c.tokens[r.n(3)]
	}
	legs := 1
	if crossType == "BatchWithdraw" {
		legs = 2
	}
	source := c.user(r.next())
	type leg struct {
		TargetAddress string `json:"targetAddress"`
		Value         string `json:"value"`
		ValueRaw      string `json:"valueRaw"`
	}
	detail := make([]leg, legs)
	for i := range detail {
		target := source
		if legs > 1 || r.n(4) == 0 {
			target = c.user(r.next())
		}
		detail[i].TargetAddress = target
		if tk.kind == "ERC1155" {
			n := utoa(1 + r.n(40))
			detail[i].Value, detail[i].ValueRaw = n, n
		} else {
			micro := 1 + r.n(5e10) // display units, 6 digits
			detail[i].Value = dec(micro, 6)
			detail[i].ValueRaw = utoa(micro) + strings.Repeat("0", tk.decimals-6)
		}
	}
	batchDetail := ""
	if legs > 1 {
		js, _ := json.Marshal(detail)
		batchDetail = string(js)
	}

	event := r.n(200)
	base := crossTx{
		ID:                   strings.ToLower(s),
		TxType:               txType,
		CrossType:            crossType,
		Status:               status,
		ChainxTxHash:         c.txHash(h, int(r.n(uint64(b.txnCount)))),
		ChainxBlockHeight:    itoa(h),
		ChainxBlockTime:      itoa(chainxTime),
		TzTxHash:             c.hash(kindTZTx, k),
		TzBlockHeight:        itoa(tzHeight),
		TzBlockTime:          itoa(tzTime),
		From:                 c.addr(kindRelayer, r.n(4)),
		To:                   c.addr(kindBridge, 0),
		SourceAddress:        source,
		TokenContractAddress: tk.address,
		TokenType:            tk.kind,
		TokenID:              tokenID,
		TokenName:            tk.name,
		TzBlockHash:          c.hash(kindTZBlock, uint64(tzHeight)),
		BatchDetail:          batchDetail,
		UpdateTime:           itoa(max(chainxTime, tzTime) + 1000 + int64(r.n(5000))),
		BlockHeight:          published,
	}
	out := make([]crossTx, legs)
	for i, l := range detail {
		out[i] = base
		out[i].TargetAddress = l.TargetAddress
		out[i].Value = l.Value
		out[i].ValueRaw = l.ValueRaw
		out[i].TzEventIndex = utoa(event + uint64(i))
	}
	return out
}
