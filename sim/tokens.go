package sim

import (
	"math"
	"strconv"
	"time"
)

// token is one token contract of a chain, with ranked holders.
type token struct {
	index    int
	address  string
	name     string
	symbol   string
	kind     string // ERC20, ERC721, ERC1155
	decimals int    // on-chain decimals (valueRaw of cross-chain records)
	display  int    // fraction digits of holder amounts
	method   string // methodId of a transfer
	scale    uint64 // amount of rank 1, in display units, before the epoch factor
	price    float64
	holders  int64
}

func newTokens(c *chain) []token {
	specs := []token{
		{name: "USD Stable", symbol: "USDS", kind: "ERC20", decimals: 6, display: 6, method: "0xa9059cbb", scale: 2e14, price: 1},
		{name: "Wrapped " + c.symbol, symbol: "W" + c.symbol, kind: "ERC20", decimals: 18, display: 6, method: "0xa9059cbb", scale: 5e12, price: 3.1},
		{name: "Zone Token", symbol: "ZONE", kind: "ERC20", decimals: 18, display: 6, method: "0xa9059cbb", scale: 8e14, price: 0.42},
		{name: "Zone Punks", symbol: "ZPUNK", kind: "ERC721", decimals: 0, display: 0, method: "0x23b872dd", scale: 2e6, price: 150},
		{name: "Zone Items", symbol: "ZITEM", kind: "ERC1155", decimals: 0, display: 0, method: "0xf242432a", scale: 5e7, price: 2.5},
	}
	for i := range specs {
		t := &specs[i]
		t.index = i
		t.address = c.addr(kindToken, uint64(i))
		t.holders = 25_000 + int64(i)*3_000 + int64(mix(c.key^uint64(i))%1000)
	}
	return specs
}

// tokenFor picks the token a transfer of class moves.
func (c *chain) tokenFor(class int, v uint64) *token {
	switch class {
	case classToken721:
		return &c.tokens[3]
	case classToken1155:
		return &c.tokens[4]
	default:
		return &c.tokens[v%3]
	}
}

// tokenByAddress finds a token contract from its address (any hex case).
func (c *chain) tokenByAddress(s string) *token {
	i, ok := open(c.key, kindToken, s, 20)
	if !ok || i >= uint64(len(c.tokens)) {
		return nil
	}
	return &c.tokens[i]
}

// epoch numbers the minutes of chain time: holder amounts move once a minute.
func epoch(now time.Time) int64 { return floorDiv(int64(now.Sub(genesis)), int64(time.Minute)) }

// supplyScale is the epoch's common factor of all holder amounts, 1000 to
// 1049 per mille, so amounts move with time while ranks stay in order.
func (c *chain) supplyScale(t *token, e int64) uint64 {
	return t.scale * (1000 + mix(c.key^kindEpoch^uint64(t.index)<<32^uint64(e))%50) / 1000
}

// holderAmount is the amount held by rank r (from 1) at epoch e. It is
// M/r plus noise no larger than a quarter of the gap to the rank above, so
// amounts never increase with rank.
func (c *chain) holderAmount(t *token, r, e int64) uint64 {
	m := c.supplyScale(t, e)
	base := m / uint64(r)
	if r == 1 {
		return base
	}
	gap := m/uint64(r-1) - base
	rr := newRng(c.key, kindHolder, uint64(t.index)<<32|uint64(r), uint64(e))
	return base + rr.n(gap/4+1)
}

func (c *chain) holderAddress(t *token, r int64) string {
	return c.addr(kindHolder, uint64(t.index)<<32|uint64(r))
}

// holderRank returns the rank of a holder address of t, or 0.
func (c *chain) holderRank(t *token, s string) int64 {
	p, ok := open(c.key, kindHolder, s, 20)
	if !ok || p>>32 != uint64(t.index) {
		return 0
	}
	r := int64(p & 0xffffffff)
	if r < 1 || r > t.holders {
		return 0
	}
	return r
}

// position is an element of positionList (spec: Token position).
type position struct {
	HolderAddress     string `json:"holderAddress"`
	Amount            string `json:"amount"`
	ValueUSD          string `json:"valueUsd"`
	PositionChange24h string `json:"positionChange24h"`
	Rank              string `json:"rank"`
}

func (c *chain) position(t *token, r, e int64) position {
	a := c.holderAmount(t, r, e)
	p := position{
		HolderAddress: c.holderAddress(t, r),
		Amount:        dec(a, t.display),
		ValueUSD:      strconv.FormatFloat(float64(a)/float64(pow10[t.display])*t.price, 'f', 2, 64),
		Rank:          itoa(r),
	}
	// Some holders are younger than a day: the explorer leaves the change
	// empty for them (spec: "may be an empty string").
	if r%17 != 0 {
		p.PositionChange24h = sdec(a, c.holderAmount(t, r, e-24*60), t.display)
	}
	return p
}

// circulatingSupply approximates the sum of all holders' amounts.
func (c *chain) circulatingSupply(t *token, e int64) string {
	m := float64(c.supplyScale(t, e))
	sum := m * (math.Log(float64(t.holders)) + 0.5772156649)
	return dec(uint64(sum), t.display)
}
