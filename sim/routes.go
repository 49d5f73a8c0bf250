package sim

import (
	"fmt"
	"strings"
	"time"
)

// Route names, as used by stats, fault targeting and the proxy's metric labels.
const (
	RoutePositionList             = "position-list"
	RouteBlockList                = "block-list"
	RouteTransactionList          = "transaction-list"
	RouteTransactionMulti         = "transaction-multi"
	RouteTransactionFills         = "transaction-fills"
	RouteInternalTransactionMulti = "internal-transaction-multi"
)

// Limits of the routes. The spec leaves internal-transaction-multi's limit
// open; it follows transaction-list.
const (
	maxHashes        = 20
	defaultLimit     = 20
	maxPositionLimit = 50
	maxListLimit     = 100
	// maxPositionLimit100 is position-list's limit under the
	// position-limit-100 reading (the vendor's Chinese page).
	maxPositionLimit100 = 100
)

// codeNoData is the vendor's "no data for this block height" (HTTP 200),
// answered for a height above the head under the nodata-code reading.
const codeNoData = "50040"

// ask is what one request is answered at: the chain time and the profile
// in force, both read once so the answer is consistent.
type ask struct {
	now time.Time
	profileState
}

// noData is the answer to a height above the head: an empty page (nil),
// or the vendor's code 50040 under the nodata-code reading.
func (a ask) noData(height, head int64) *Error {
	if !a.NoDataCode {
		return nil
	}
	v, _ := LookupVendorCode(codeNoData)
	return &Error{v.Status, codeNoData, fmt.Sprintf("No data for this block height: height %d is above the newest block %d", height, head)}
}

// route is one operation of the spec. serve answers with the value of the
// envelope's data; params and auth have been dealt with by then except the
// route's own parameters.
type route struct {
	name      string
	path      string
	hashParam string // the parameter whose hashes stats count; "" for none
	serve     func(s *Server, c *chain, p params, a ask) (any, *Error)
}

// routeTable is the six operations of the spec, in its order.
var routeTable = []route{
	{RoutePositionList, "/api/v5/chainx/token/position-list", "", (*Server).positionList},
	{RouteBlockList, "/api/v5/chainx/block/block-list", "", (*Server).blockList},
	{RouteTransactionList, "/api/v5/chainx/block/transaction-list", "", (*Server).transactionList},
	{RouteTransactionMulti, "/api/v5/chainx/tz/cross/transaction-multi", "txId", (*Server).transactionMulti},
	{RouteTransactionFills, "/api/v5/chainx/tz/cross/transaction-fills", "txid", (*Server).transactionFills},
	{RouteInternalTransactionMulti, "/api/v5/chainx/transaction/internal-transaction-multi", "txId", (*Server).internalTransactionMulti},
}

// chainPage is the paged wrapper of block-list and transaction-list.
type chainPage[T any] struct {
	Page           string `json:"page"`
	Limit          string `json:"limit"`
	TotalPage      string `json:"totalPage"`
	ChainFullName  string `json:"chainFullName"`
	ChainShortName string `json:"chainShortName"`
	BlockList      []T    `json:"blockList"`
}

type positionPage struct {
	Page              string     `json:"page"`
	Limit             string     `json:"limit"`
	TotalPage         string     `json:"totalPage"`
	ChainFullName     string     `json:"chainFullName"`
	ChainShortName    string     `json:"chainShortName"`
	CirculatingSupply string     `json:"circulatingSupply"`
	PositionList      []position `json:"positionList"`
}

type internalPage struct {
	Page            string       `json:"page"`
	Limit           string       `json:"limit"`
	TotalPage       string       `json:"totalPage"`
	TransactionList []internalTx `json:"transactionList"`
}

// windowPage checks that page starts inside a window of n items.
func windowPage(page, limit, n int64) *Error {
	if (page-1)*limit >= n {
		return invalid("page", "page %d with limit %d is beyond the %d reachable items (last page %d)", page, limit, n, max(ceilDiv(n, limit), 1))
	}
	return nil
}

func (s *Server) positionList(c *chain, p params, a ask) (any, *Error) {
	addr, err := p.required("tokenContractAddress")
	if err != nil {
		return nil, err
	}
	if !isHex(addr, 20) {
		return nil, invalid("tokenContractAddress", "%q is not an address (0x and 40 hex digits)", addr)
	}
	holder := p.get("holderAddress")
	if holder != "" && !isHex(holder, 20) {
		return nil, invalid("holderAddress", "%q is not an address (0x and 40 hex digits)", holder)
	}
	maxLimit := int64(maxPositionLimit)
	if a.PositionLimit100 {
		maxLimit = maxPositionLimit100
	}
	page, limit, err := p.page(defaultLimit, maxLimit)
	if err != nil {
		return nil, err
	}
	if err := windowPage(page, limit, window); err != nil {
		return nil, err
	}
	w := positionPage{
		Page: itoa(page), Limit: itoa(limit), TotalPage: "0",
		ChainFullName: c.full, ChainShortName: c.short,
		CirculatingSupply: "0", PositionList: []position{},
	}
	t := c.tokenByAddress(addr)
	if t == nil {
		return []positionPage{w}, nil
	}
	e := epoch(a.now)
	w.CirculatingSupply = c.circulatingSupply(t, e)
	if holder != "" {
		if r := c.holderRank(t, holder); r >= 1 && r <= window {
			w.TotalPage = "1"
			if page == 1 {
				w.PositionList = append(w.PositionList, c.position(t, r, e))
			}
		}
		return []positionPage{w}, nil
	}
	reach := min(t.holders, window)
	w.TotalPage = itoa(ceilDiv(reach, limit))
	for r := (page-1)*limit + 1; r <= min(page*limit, reach); r++ {
		w.PositionList = append(w.PositionList, c.position(t, r, e))
	}
	return []positionPage{w}, nil
}

func (s *Server) blockList(c *chain, p params, a ask) (any, *Error) {
	height, err := p.int("height", -1, 0, 1<<47)
	if err != nil {
		return nil, err
	}
	page, limit, err := p.page(defaultLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	head := c.head(a.now, s.cfg.BlockInterval)
	lowest := max(head-window+1, 0)
	w := chainPage[block]{
		Page: itoa(page), Limit: itoa(limit), TotalPage: "0",
		ChainFullName: c.full, ChainShortName: c.short, BlockList: []block{},
	}
	start := head
	if height >= 0 {
		if height > head {
			if err := a.noData(height, head); err != nil {
				return nil, err
			}
			return []chainPage[block]{w}, nil // not produced yet
		}
		if height < lowest {
			return nil, invalid("height", "%d is below the reachable window of the latest %d blocks (lowest %d)", height, window, lowest)
		}
		start = height
	}
	n := start - lowest + 1
	if height >= 0 && a.HeightAt {
		// The block at that height is all there is: one page of one block.
		lowest, n = start, 1
	}
	if err := windowPage(page, limit, n); err != nil {
		return nil, err
	}
	w.TotalPage = itoa(ceilDiv(n, limit))
	top := start - (page-1)*limit
	for h := top; h > top-limit && h >= lowest; h-- {
		b := c.block(h, s.pending(h, head), s.cfg.BlockInterval)
		if a.StateEmpty {
			b.State = ""
		}
		w.BlockList = append(w.BlockList, b)
	}
	return []chainPage[block]{w}, nil
}

func (s *Server) transactionList(c *chain, p params, a ask) (any, *Error) {
	if _, err := p.required("height"); err != nil {
		return nil, err
	}
	height, err := p.int("height", 0, 0, 1<<47)
	if err != nil {
		return nil, err
	}
	protocol := strings.ToLower(p.get("protocolType"))
	if protocol == "" {
		protocol = "transaction"
	}
	if _, ok := protocolClass[protocol]; !ok {
		return nil, invalid("protocolType", "%q is not one of transaction, internal, token_20, token_721, token_1155, token_10", protocol)
	}
	page, limit, err := p.page(defaultLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	head := c.head(a.now, s.cfg.BlockInterval)
	w := chainPage[blockTx]{
		Page: itoa(page), Limit: itoa(limit), TotalPage: "0",
		ChainFullName: c.full, ChainShortName: c.short, BlockList: []blockTx{},
	}
	if height > head {
		if err := a.noData(height, head); err != nil {
			return nil, err
		}
		return []chainPage[blockTx]{w}, nil // not produced yet
	}
	all := c.blockTxs(height, protocol, s.pending(height, head), s.cfg.BlockInterval)
	w.TotalPage = itoa(ceilDiv(int64(len(all)), limit))
	if from := (page - 1) * limit; from < int64(len(all)) {
		w.BlockList = append(w.BlockList, all[from:min(from+limit, int64(len(all)))]...)
	}
	return []chainPage[blockTx]{w}, nil
}

func (s *Server) transactionMulti(c *chain, p params, a ask) (any, *Error) {
	hashes, err := p.hashes("txId", maxHashes)
	if err != nil {
		return nil, err
	}
	out := []crossTx{}
	for _, h := range hashes {
		out = append(out, s.crossRecords(c, h, a)...)
	}
	return out, nil
}

func (s *Server) transactionFills(c *chain, p params, a ask) (any, *Error) {
	h, err := p.required("txid")
	if err != nil {
		return nil, err
	}
	if !isHex(h, 32) {
		return nil, invalid("txid", "%q is not one transaction hash (0x and 64 hex digits)", h)
	}
	out := []crossTx{}
	return append(out, s.crossRecords(c, h, a)...), nil
}

func (s *Server) internalTransactionMulti(c *chain, p params, a ask) (any, *Error) {
	hashes, err := p.hashes("txId", maxHashes)
	if err != nil {
		return nil, err
	}
	page, limit, err := p.page(defaultLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	head := c.head(a.now, s.cfg.BlockInterval)
	var all []internalTx
	for _, hash := range hashes {
		h, i, ok := c.openTx(hash, head)
		if !ok {
			continue
		}
		b := c.body(h)
		x, t := c.tx(h, i, b, s.pending(h, head), false, s.cfg.BlockInterval)
		all = append(all, c.internals(h, i, t, x, s.cfg.BlockInterval)...)
	}
	w := internalPage{
		Page: itoa(page), Limit: itoa(limit),
		TotalPage:       itoa(ceilDiv(int64(len(all)), limit)),
		TransactionList: []internalTx{},
	}
	if from := (page - 1) * limit; from < int64(len(all)) {
		w.TransactionList = append(w.TransactionList, all[from:min(from+limit, int64(len(all)))]...)
	}
	return []internalPage{w}, nil
}

// pending reports whether block h is among the newest PendingDepth blocks.
func (s *Server) pending(h, head int64) bool { return h > head-int64(s.cfg.PendingDepth) }

// chainParam resolves chainShortName, case-insensitively.
func (s *Server) chainParam(p params) (*chain, *Error) {
	name, err := p.required("chainShortName")
	if err != nil {
		return nil, err
	}
	c := s.chains[strings.ToUpper(name)]
	if c == nil {
		return nil, invalid("chainShortName", "%q is not a served chain (%s)", name, strings.Join(s.chainNames(), ", "))
	}
	return c, nil
}

func (s *Server) chainNames() []string {
	out := make([]string, len(s.order))
	for i, c := range s.order {
		out[i] = c.short
	}
	return out
}
