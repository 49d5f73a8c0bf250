package sim

import (
	"strings"
	"time"
)

// Genesis is the chain time at which every simulated chain is at its height
// offset; heads advance one block per Config.BlockInterval from there.
var genesis = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Window is how many of the newest blocks block-list reaches, and how many
// top holders position-list reaches (spec: "only the top 10000").
const window = 10000

// Kinds separate the identifier spaces: a block hash never opens as a
// transaction hash, and so on.
const (
	kindBlock uint64 = iota + 1
	kindTx
	kindCross
	kindTZTx
	kindTZBlock
	kindUnknown
	kindUser
	kindContract
	kindValidator
	kindRelayer
	kindBridge
	kindToken
	kindHolder
	kindBlockBody
	kindTxBody
	kindInternal
	kindEpoch
)

// chain is one simulated chain. Everything in it is a function of (key,
// coordinates) and of the head, which is a function of chain time.
type chain struct {
	short    string // canonical upper-case chainShortName
	full     string // chainFullName
	symbol   string // native and fee currency
	key      uint64
	offset   int64 // height at genesis
	tzOffset int64 // TZ height at genesis, for cross-chain records
	tokens   []token
	forks    forks // reorganizations (reorg.go): blocks drawn from other keys
}

func newChain(name string, seed int64) *chain {
	short := strings.ToUpper(strings.TrimSpace(name))
	key := mix(uint64(seed) ^ fnv64(short))
	c := &chain{
		short:    short,
		key:      key,
		offset:   1_000_000 + int64(mix(key^1)%4_000_000),
		tzOffset: 2_000_000 + int64(mix(key^2)%4_000_000),
	}
	switch short {
	case "CHAINX":
		c.full, c.symbol = "ChainX", "CHX"
	case "TRADE_ZONE":
		c.full, c.symbol = "Trade Zone", "TZC"
	default:
		words := strings.Split(strings.ToLower(short), "_")
		for i, w := range words {
			if w != "" {
				words[i] = strings.ToUpper(w[:1]) + w[1:]
			}
		}
		c.full = strings.Join(words, " ")
		c.symbol = short
		if len(c.symbol) > 4 {
			c.symbol = c.symbol[:4]
		}
	}
	c.tokens = newTokens(c)
	return c
}

// head is the newest height at chain time now.
func (c *chain) head(now time.Time, interval time.Duration) int64 {
	h := c.offset + floorDiv(int64(now.Sub(genesis)), int64(interval))
	return max(h, 0)
}

// blockTimeMs is the block time of height h in Unix milliseconds.
func (c *chain) blockTimeMs(h int64, interval time.Duration) int64 {
	return genesis.Add(time.Duration(h-c.offset) * interval).UnixMilli()
}

func (c *chain) addr(kind, i uint64) string { return sealed(c.key, kind, i, 20) }
func (c *chain) hash(kind, i uint64) string { return sealed(c.key, kind, i, 32) }
func (c *chain) blockHash(h int64) string   { return sealed(c.bkey(h), kindBlock, uint64(h), 32) }
func (c *chain) txHash(h int64, i int) string {
	return sealed(c.bkey(h), kindTx, uint64(h)<<16|uint64(i), 32)
}
func (c *chain) user(i uint64) string     { return c.addr(kindUser, i%200_000) }
func (c *chain) contract(i uint64) string { return c.addr(kindContract, i%500) }
func (c *chain) validator(h int64) string { return c.addr(kindValidator, uint64(h)%21) }

// openTx returns the height and index a transaction hash encodes, if it is
// one of this chain's transactions up to head on the branch in force (a
// transaction of a block a reorganization replaced is gone).
func (c *chain) openTx(s string, head int64) (int64, int, bool) {
	for _, k := range c.keys() {
		p, ok := open(k, kindTx, s, 32)
		if !ok {
			continue
		}
		h, i := int64(p>>16), int(p&0xffff)
		if h > head || c.bkey(h) != k || i >= c.body(h).txnCount {
			return 0, 0, false
		}
		return h, i, true
	}
	return 0, 0, false
}

// Transaction classes. A block's transactions are plain transfers, contract
// calls (the ones with internal transactions) and token transfers.
const (
	classTransfer = iota
	classCall
	classToken20
	classToken721
	classToken1155
	classToken10
)

// txCore is the part of a transaction that block totals need; it is cheap so
// a block can sum its fees without building every transaction.
type txCore struct {
	class    int
	gasUsed  uint64
	gasPrice uint64 // wei
	r        rng    // continues the transaction's stream
}

// blockBody holds the per-block values every view of a block shares.
type blockBody struct {
	txnCount int
	baseFee  uint64 // wei
}

func (c *chain) body(h int64) blockBody {
	r := newRng(c.bkey(h), kindBlockBody, uint64(h), 0)
	return blockBody{txnCount: 5 + int(r.n(56)), baseFee: 1e9 + r.n(9e9)}
}

func (c *chain) txCore(h int64, i int, b blockBody) txCore {
	r := newRng(c.bkey(h), kindTxBody, uint64(h), uint64(i))
	t := txCore{}
	switch p := r.n(100); {
	case p < 40:
		t.class = classTransfer
	case p < 62:
		t.class = classCall
	case p < 87:
		t.class = classToken20
	case p < 93:
		t.class = classToken721
	case p < 98:
		t.class = classToken1155
	default:
		t.class = classToken10
	}
	switch t.class {
	case classTransfer:
		t.gasUsed = 21000
	case classCall:
		t.gasUsed = 60_000 + r.n(440_000)
	default:
		t.gasUsed = 35_000 + r.n(80_000)
	}
	t.gasPrice = b.baseFee + r.n(2e9)
	t.r = r
	return t
}

// block is an element of blockList in block-list (spec: Block).
type block struct {
	Hash        string `json:"hash"`
	Height      string `json:"height"`
	Validator   string `json:"validator"`
	BlockTime   string `json:"blockTime"`
	TxnCount    string `json:"txnCount"`
	BlockSize   string `json:"blockSize"`
	MineReward  string `json:"mineReward"`
	TotalFee    string `json:"totalFee"`
	FeeSymbol   string `json:"feeSymbol"`
	AvgFee      string `json:"avgFee"`
	OmmerBlock  string `json:"ommerBlock"`
	GasUsed     string `json:"gasUsed"`
	GasLimit    string `json:"gasLimit"`
	GasAvgPrice string `json:"gasAvgPrice"`
	State       string `json:"state"`
	Burnt       string `json:"burnt"`
}

func (c *chain) block(h int64, pending bool, interval time.Duration) block {
	b := c.body(h)
	var fee, gas uint64
	for i := 0; i < b.txnCount; i++ {
		t := c.txCore(h, i, b)
		fee += t.gasUsed * t.gasPrice
		gas += t.gasUsed
	}
	r := newRng(c.bkey(h), kindBlock, uint64(h), 1)
	state, burnt := "done", dec(gas*b.baseFee, 18)
	if pending {
		state, burnt = "pending", ""
	}
	return block{
		Hash:        c.blockHash(h),
		Height:      itoa(h),
		Validator:   c.validator(h),
		BlockTime:   itoa(c.blockTimeMs(h, interval)),
		TxnCount:    itoa(int64(b.txnCount)),
		BlockSize:   utoa(800 + uint64(b.txnCount)*160 + r.n(600)),
		MineReward:  dec(2e17+r.n(5e16), 18),
		TotalFee:    dec(fee, 18),
		FeeSymbol:   c.symbol,
		AvgFee:      dec(fee/uint64(b.txnCount), 18),
		OmmerBlock:  "0",
		GasUsed:     utoa(gas),
		GasLimit:    "30000000",
		GasAvgPrice: dec(fee/gas, 18),
		State:       state,
		Burnt:       burnt,
	}
}

// blockTx is an element of blockList in transaction-list (spec: Block
// transaction).
type blockTx struct {
	TxID                 string `json:"txid"`
	BlockHash            string `json:"blockHash"`
	Height               string `json:"height"`
	TransactionTime      string `json:"transactionTime"`
	From                 string `json:"from"`
	To                   string `json:"to"`
	IsFromContract       bool   `json:"isFromContract"`
	IsToContract         bool   `json:"isToContract"`
	Amount               string `json:"amount"`
	TransactionSymbol    string `json:"transactionSymbol"`
	TxFee                string `json:"txfee"`
	State                string `json:"state"`
	TokenContractAddress string `json:"tokenContractAddress"`
	TokenID              string `json:"tokenId"`
	MethodID             string `json:"methodId"`
}

var callMethods = [...]string{"0x38ed1739", "0x7ff36ab5", "0x095ea7b3", "0xac9650d8", "0xa0712d68", "0x2e1a7d4d"}

// tx builds transaction i of block h. With tokenView set it builds the token
// transfer view of the same transaction (protocolType token_*), else the
// normal view.
func (c *chain) tx(h int64, i int, b blockBody, pending, tokenView bool, interval time.Duration) (blockTx, txCore) {
	t := c.txCore(h, i, b)
	r := t.r
	sender := c.user(r.next())
	state := "success"
	switch p := r.n(100); {
	case pending && p < 50:
		state = "pending"
	case p%10 == 7:
		state = "fail"
	}
	x := blockTx{
		TxID:              c.txHash(h, i),
		BlockHash:         c.blockHash(h),
		Height:            itoa(h),
		TransactionTime:   itoa(c.blockTimeMs(h, interval)),
		From:              sender,
		TransactionSymbol: c.symbol,
		TxFee:             dec(t.gasUsed*t.gasPrice, 18),
		State:             state,
		Amount:            "0",
	}
	recipient := c.user(r.next())
	switch t.class {
	case classTransfer:
		x.To = recipient
		x.Amount = dec(r.n(5e18)+1e12, 18)
	case classCall:
		x.To, x.IsToContract = c.contract(r.next()), true
		x.MethodID = callMethods[r.n(uint64(len(callMethods)))]
		if r.n(3) == 0 {
			x.Amount = dec(r.n(1e18), 18)
		}
	case classToken10:
		// TRC-10 style asset: no contract, the asset is named by its id.
		x.To = recipient
		x.Amount = dec(1+r.n(1e9), 6)
		x.TransactionSymbol = "T10"
		if tokenView {
			x.TokenID = utoa(1_000_001 + r.n(20))
		}
	default:
		c.tokenTransfer(&x, t.class, &r, recipient, tokenView)
	}
	return x, t
}

// tokenTransfer fills in a transaction of a token contract of class: a
// call to the contract in the normal view, the tokens it moves to
// recipient in the token view.
func (c *chain) tokenTransfer(x *blockTx, class int, r *rng, recipient string, tokenView bool) {
	tk := c.tokenFor(class, r.next())
	x.MethodID = tk.method
	if !tokenView {
		x.To, x.IsToContract = tk.address, true
		return
	}
	x.To = recipient
	x.TransactionSymbol = tk.symbol
	x.TokenContractAddress = tk.address
	switch tk.kind {
	case "ERC20":
		x.Amount = dec(1+r.n(1e12), 6)
	case "ERC721":
		x.Amount = "1"
		x.TokenID = utoa(r.n(10_000))
	default:
		x.Amount = utoa(1 + r.n(50))
		x.TokenID = utoa(r.n(200))
	}
}

// protocolClass maps protocolType to the transaction class a token view
// lists; -1 for transaction and internal.
var protocolClass = map[string]int{
	"transaction": -1,
	"internal":    -1,
	"token_20":    classToken20,
	"token_721":   classToken721,
	"token_1155":  classToken1155,
	"token_10":    classToken10,
}

// blockTxs lists the transactions of block h as protocolType asks.
func (c *chain) blockTxs(h int64, protocol string, pending bool, interval time.Duration) []blockTx {
	b := c.body(h)
	class := protocolClass[protocol]
	var out []blockTx
	for i := 0; i < b.txnCount; i++ {
		switch protocol {
		case "transaction":
			x, _ := c.tx(h, i, b, pending, false, interval)
			out = append(out, x)
		case "internal":
			x, t := c.tx(h, i, b, pending, false, interval)
			for _, in := range c.internals(h, i, t, x, interval) {
				out = append(out, blockTx{
					TxID:              x.TxID,
					BlockHash:         x.BlockHash,
					Height:            x.Height,
					TransactionTime:   x.TransactionTime,
					From:              in.From,
					To:                in.To,
					IsFromContract:    in.IsFromContract,
					IsToContract:      in.IsToContract,
					Amount:            in.Amount,
					TransactionSymbol: c.symbol,
					TxFee:             "0",
					State:             x.State,
				})
			}
		default:
			if c.txCore(h, i, b).class != class {
				continue
			}
			x, _ := c.tx(h, i, b, pending, true, interval)
			out = append(out, x)
		}
	}
	return out
}

// internalTx is an element of transactionList in internal-transaction-multi
// (spec: Internal transaction).
type internalTx struct {
	TxID            string `json:"txId"`
	BlockHash       string `json:"blockHash"`
	Height          string `json:"height"`
	TransactionTime string `json:"transactionTime"`
	Operation       string `json:"operation"`
	From            string `json:"from"`
	To              string `json:"to"`
	IsFromContract  bool   `json:"isFromContract"`
	IsToContract    bool   `json:"isToContract"`
	Amount          string `json:"amount"`
}

var operations = [...]string{"call", "call", "call", "call", "delegatecall", "staticcall", "create", "create2"}

// internals returns the internal transactions of transaction (h, i): only
// contract calls have them, one to four each.
func (c *chain) internals(h int64, i int, t txCore, x blockTx, interval time.Duration) []internalTx {
	if t.class != classCall {
		return nil
	}
	r := newRng(c.bkey(h), kindInternal, uint64(h), uint64(i))
	n := 1 + int(r.n(4))
	out := make([]internalTx, n)
	from := x.To
	for j := range out {
		op := operations[r.n(uint64(len(operations)))]
		to, toContract := c.contract(r.next()), true
		amount := "0"
		if op == "call" && r.n(3) == 0 {
			to, toContract = c.user(r.next()), false
			amount = dec(r.n(2e18), 18)
		}
		out[j] = internalTx{
			TxID:            x.TxID,
			BlockHash:       x.BlockHash,
			Height:          x.Height,
			TransactionTime: x.TransactionTime,
			Operation:       op,
			From:            from,
			To:              to,
			IsFromContract:  true,
			IsToContract:    toContract,
			Amount:          amount,
		}
		if toContract {
			from = to
		}
	}
	return out
}

// hasInternals reports whether transaction (h, i) has internal transactions.
func (c *chain) hasInternals(h int64, i int, b blockBody) bool {
	return c.txCore(h, i, b).class == classCall
}
