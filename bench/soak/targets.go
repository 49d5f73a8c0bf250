package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"explorer-edge/sim"
)

// The chain the soak runs on: explorer-sim's clock stands still at frozenAt,
// so every answer is a pure function of (seed, request) and an in-process
// sim.Server with the same seed and clock is the reference.
const (
	frozenAt = "2026-06-01T12:00:00Z"
	simSeed  = 7
)

const (
	routePosition = "position-list"
	routeBlocks   = "block-list"
	routeTxList   = "transaction-list"
	routeMulti    = "transaction-multi"
	routeFills    = "transaction-fills"
	routeInternal = "internal-transaction-multi"
)

var routePaths = map[string]string{
	routePosition: "/api/v5/chainx/token/position-list",
	routeBlocks:   "/api/v5/chainx/block/block-list",
	routeTxList:   "/api/v5/chainx/block/transaction-list",
	routeMulti:    "/api/v5/chainx/tz/cross/transaction-multi",
	routeFills:    "/api/v5/chainx/tz/cross/transaction-fills",
	routeInternal: "/api/v5/chainx/transaction/internal-transaction-multi",
}

// target is one request target of the pool, with what a correct edge may
// answer for it.
type target struct {
	route string
	path  string // request target sent to the edge
	ref   string // request target asked of the reference sim (the edge's
	// normalization of path, where the sim alone would refuse it: a list
	// of more than 20 hashes of which at most 20 are distinct)
	invalid  bool   // the edge must refuse it itself: 400 with wantCode
	wantCode string // invalid only
	hot      bool

	// The reference answer: status, envelope code and exact bytes.
	refStatus int
	refCode   string
	refBody   []byte

	refOnce sync.Once
	refVal  any // refBody decoded, on first need
	refErr  error

	mu    sync.Mutex
	good  [][]byte          // other identity bodies already found equal to refBody
	etags map[string]uint64 // ETag -> hash of the identity body it was sent with
	etag  string            // an ETag sent with a correct 200, for If-None-Match
}

func (t *target) refValue() (any, error) {
	t.refOnce.Do(func() { t.refErr = json.Unmarshal(t.refBody, &t.refVal) })
	return t.refVal, t.refErr
}

// knownGood reports whether body is byte-equal to an answer already found
// correct, so most answers need no JSON decoding.
func (t *target) knownGood(body []byte) bool {
	if bytes.Equal(body, t.refBody) {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.good {
		if bytes.Equal(body, g) {
			return true
		}
	}
	return false
}

func (t *target) addGood(body []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.good) < 4 {
		t.good = append(t.good, bytes.Clone(body))
	}
}

var bodySeed = maphash.MakeSeed()

// noteETag records that etag came with body; false is a strong-validator
// violation: the same ETag came with a different body for this target.
func (t *target) noteETag(etag string, body []byte) bool {
	sum := maphash.Bytes(bodySeed, body)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.etags == nil {
		t.etags = map[string]uint64{}
	}
	if prev, seen := t.etags[etag]; seen && prev != sum {
		return false
	}
	if len(t.etags) < 8 {
		t.etags[etag] = sum
	}
	t.etag = etag
	return true
}

func (t *target) lastETag() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.etag
}

// pool is every target the load draws from.
type pool struct {
	valid   []*target // edge-valid targets (a few answered 400 by the upstream itself)
	hot     []*target // a small subset of valid, asked often
	invalid []*target // the edge answers 400 itself
	byRoute map[string]int
	up400   int // valid at the edge, refused by the sim (page past a low height's window)
}

func newReference() *sim.Server {
	at, err := time.Parse(time.RFC3339, frozenAt)
	if err != nil {
		panic(err)
	}
	return sim.New(sim.Config{Seed: simSeed, Now: func() time.Time { return at }})
}

// ask gets the reference answer for t.
func ask(ref *sim.Server, t *target) error {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, t.ref, nil)
	ref.Handler().ServeHTTP(rec, req)
	t.refStatus, t.refBody = rec.Code, bytes.Clone(rec.Body.Bytes())
	var env struct {
		Code *string `json:"code"`
	}
	if err := json.Unmarshal(t.refBody, &env); err != nil || env.Code == nil {
		return fmt.Errorf("reference answer for %s is no envelope: %.200s", t.ref, t.refBody)
	}
	t.refCode = *env.Code
	return nil
}

// chainInfo is what the generator knows of one chain at the frozen time.
type chainInfo struct {
	name          string
	head, fin     int64
	lowest        int64 // lowest height block-list reaches
	tokens        []string
	holders       []string // holder addresses of the tokens (lower case)
	cross         []string
	internal      []string // tx hashes with internal transactions
	plain         []string // tx hashes of done blocks, most without internals
	pendingTxs    []string // tx hashes of pending blocks
	otherChainX   []string // cross hashes of the other chain
	denseHeights  []int64  // a few heights many targets share
	unknownHashes []string
}

type generator struct {
	r      *rand.Rand
	ref    *sim.Server
	chains []*chainInfo
}

// buildPool makes about n distinct edge-valid targets over the six routes
// (a hot subset among them) and a pool of invalid ones, and asks the
// reference for every answer.
func buildPool(ref *sim.Server, n int) (*pool, error) {
	g := &generator{r: rand.New(rand.NewPCG(simSeed, 2026)), ref: ref}
	names := sim.DefaultChains()
	for ci, name := range names {
		c := &chainInfo{name: name, head: ref.Head(name), fin: ref.FinalizedHeight(name)}
		c.lowest = max(c.head-9999, 0)
		c.tokens = ref.TokenContracts(name)
		c.cross = ref.CrossHashes(name, 1500)
		c.internal = ref.InternalTxHashes(name, 400)
		for _, h := range []int64{c.fin - 3, c.fin - 500, c.fin - 4321} {
			c.plain = append(c.plain, ref.TxHashes(name, h)...)
		}
		for h := c.fin + 1; h <= c.head; h++ {
			c.pendingTxs = append(c.pendingTxs, ref.TxHashes(name, h)...)
		}
		for i := range 6 {
			c.denseHeights = append(c.denseHeights, c.fin-int64(7*i+1))
		}
		for i := range 40 {
			c.unknownHashes = append(c.unknownHashes, ref.UnknownHash(ci*1000+i))
		}
		if len(c.tokens) == 0 || len(c.cross) == 0 || len(c.internal) == 0 || len(c.plain) == 0 {
			return nil, fmt.Errorf("reference chain %s has no content", name)
		}
		g.chains = append(g.chains, c)
	}
	for i, c := range g.chains {
		c.otherChainX = g.chains[(i+1)%len(g.chains)].cross[:200]
		holders, err := g.holdersOf(c)
		if err != nil {
			return nil, err
		}
		c.holders = holders
	}

	p := &pool{byRoute: map[string]int{}}
	seen := map[string]bool{}
	shares := []struct {
		route string
		share float64
		gen   func() *target
	}{
		{routeBlocks, 0.18, g.blockList},
		{routeTxList, 0.22, g.transactionList},
		{routePosition, 0.12, g.positionList},
		{routeMulti, 0.20, g.transactionMulti},
		{routeFills, 0.13, g.transactionFills},
		{routeInternal, 0.15, g.internalMulti},
	}
	for _, s := range shares {
		want := max(int(float64(n)*s.share), 10)
		for tries := 0; p.byRoute[s.route] < want && tries < want*20; tries++ {
			t := s.gen()
			if seen[t.path] {
				continue
			}
			seen[t.path] = true
			if t.ref == "" {
				t.ref = t.path
			}
			if err := ask(ref, t); err != nil {
				return nil, err
			}
			switch {
			case t.refStatus == 200 && t.refCode == "0":
			case t.route == routeBlocks && t.refStatus == 400 && t.refCode == "50036":
				p.up400++
			default:
				return nil, fmt.Errorf("generator bug: reference answers %d/%s for %s: %.200s", t.refStatus, t.refCode, t.ref, t.refBody)
			}
			p.valid = append(p.valid, t)
			p.byRoute[s.route]++
		}
	}
	g.r.Shuffle(len(p.valid), func(i, j int) { p.valid[i], p.valid[j] = p.valid[j], p.valid[i] })
	// The hot subset: small answers of every route, asked far more often,
	// so they are hits, go stale and are refreshed while being asked.
	hotN := max(len(p.valid)/50, 12)
	perRoute := map[string]int{}
	for _, t := range p.valid {
		if len(p.hot) >= hotN {
			break
		}
		if perRoute[t.route] >= hotN/6+1 || t.refStatus != 200 || len(t.refBody) > 16<<10 {
			continue
		}
		t.hot = true
		perRoute[t.route]++
		p.hot = append(p.hot, t)
	}
	p.invalid = g.invalidTargets()
	for _, t := range p.invalid {
		if seen[t.path] {
			return nil, fmt.Errorf("generator bug: invalid target %s is also valid", t.path)
		}
		seen[t.path] = true
		t.ref = t.path
		if err := ask(ref, t); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// holdersOf reads holder addresses from the reference's position lists.
func (g *generator) holdersOf(c *chainInfo) ([]string, error) {
	var out []string
	for i, tok := range c.tokens {
		for _, page := range []int{1, 3 + i, 150} {
			t := &target{ref: fmt.Sprintf("%s?chainShortName=%s&tokenContractAddress=%s&limit=50&page=%d", routePaths[routePosition], c.name, tok, page)}
			if err := ask(g.ref, t); err != nil {
				return nil, err
			}
			var env struct {
				Data []struct {
					PositionList []struct {
						HolderAddress string `json:"holderAddress"`
					} `json:"positionList"`
				} `json:"data"`
			}
			if err := json.Unmarshal(t.refBody, &env); err != nil || len(env.Data) != 1 || len(env.Data[0].PositionList) == 0 {
				return nil, fmt.Errorf("reference position list %s: %.200s", t.ref, t.refBody)
			}
			for j, pos := range env.Data[0].PositionList {
				if j%5 == 0 {
					out = append(out, tok+"|"+pos.HolderAddress)
				}
			}
		}
	}
	return out, nil
}

// ---- spelling variations the edge must normalize ----

func (g *generator) chance(p float64) bool { return g.r.Float64() < p }

func (g *generator) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *generator) chain() *chainInfo { return g.chains[g.r.IntN(len(g.chains))] }

// chainName spells a chain name as clients do: any case, spaces around.
func (g *generator) chainName(c *chainInfo) string {
	switch g.r.IntN(10) {
	case 0:
		return strings.ToLower(c.name)
	case 1:
		return c.name[:1] + strings.ToLower(c.name[1:])
	case 2:
		return "%20" + c.name + "%20"
	}
	return c.name
}

// hex spells a 0x value in another case now and then.
func (g *generator) hex(h string) string {
	switch g.r.IntN(12) {
	case 0:
		return "0x" + strings.ToUpper(h[2:])
	case 1:
		return "0X" + h[2:]
	}
	return h
}

// number spells a decimal with leading zeros now and then.
func (g *generator) number(n int64) string {
	if g.chance(0.05) {
		return "00" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

type kv struct{ k, v string }

// url joins params, sometimes in another order and with a parameter the
// edge drops.
func (g *generator) url(route string, ps []kv) string {
	if g.chance(0.2) {
		g.r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	}
	if g.chance(0.08) {
		ps = append(ps, kv{"utm_source", "soak" + strconv.Itoa(g.r.IntN(1000))})
	}
	return urlOf(route, ps)
}

var limits = []int{0, 0, 1, 5, 10, 20, 50, 100} // 0: not given (20)

func (g *generator) limit(maxLimit int) int {
	for {
		if l := limits[g.r.IntN(len(limits))]; l <= maxLimit {
			return l
		}
	}
}

// paging appends page and limit; page 0 or limit 0 leave them out.
func (g *generator) paging(ps []kv, page, limit int) []kv {
	if page > 1 || (page == 1 && g.chance(0.3)) {
		ps = append(ps, kv{"page", g.number(int64(page))})
	}
	if limit > 0 {
		ps = append(ps, kv{"limit", g.number(int64(limit))})
	}
	return ps
}

// ---- the six routes ----

func (g *generator) blockList() *target {
	c := g.chain()
	ps := []kv{{"chainShortName", g.chainName(c)}}
	switch m := g.r.IntN(20); {
	case m < 6: // the newest pages
		ps = g.paging(ps, 1+g.r.IntN(4), g.limit(100))
	case m < 19: // at a height
		var h int64
		switch x := g.r.IntN(20); {
		case x < 11:
			h = c.head - g.r.Int64N(9000)
		case x < 15:
			h = c.head - g.r.Int64N(6) // pending and just done
		case x < 17:
			h = c.denseHeights[g.r.IntN(len(c.denseHeights))]
		default:
			h = c.head + 1 + g.r.Int64N(5) // not produced yet: empty list
		}
		ps = append(ps, kv{"height", g.number(h)})
		page := 1
		if g.chance(0.2) {
			page = 2 + g.r.IntN(2)
		}
		ps = g.paging(ps, page, g.limit(100))
	default: // valid at the edge; the sim refuses a page past the window below a low height
		h := c.lowest + g.r.Int64N(30)
		n := h - c.lowest + 1
		page := (n+19)/20 + 1 + g.r.Int64N(3)
		ps = append(ps, kv{"height", strconv.FormatInt(h, 10)}, kv{"page", strconv.FormatInt(page, 10)})
	}
	return &target{route: routeBlocks, path: g.url(routeBlocks, ps)}
}

var protocols = []string{"transaction", "internal", "token_20", "token_721", "token_1155", "token_10"}

func (g *generator) transactionList() *target {
	c := g.chain()
	var h int64
	switch x := g.r.IntN(20); {
	case x < 9:
		h = c.fin - g.r.Int64N(5000)
	case x < 12:
		h = c.head - g.r.Int64N(4) // pending blocks and the newest done ones
	case x < 14:
		h = c.head + 1 + g.r.Int64N(3) // not produced yet
	case x < 16:
		h = g.r.Int64N(c.head - 20000) // far below block-list's window: still served
	default:
		h = c.denseHeights[g.r.IntN(len(c.denseHeights))]
	}
	ps := []kv{{"chainShortName", g.chainName(c)}, {"height", g.number(h)}}
	if g.chance(0.6) {
		pt := g.pick(protocols)
		if g.chance(0.2) {
			pt = strings.ToUpper(pt)
		}
		ps = append(ps, kv{"protocolType", pt})
	}
	page := 1
	if g.chance(0.25) {
		page = 2 + g.r.IntN(3) // past the end is an empty list
	}
	ps = g.paging(ps, page, g.limit(100))
	return &target{route: routeTxList, path: g.url(routeTxList, ps)}
}

func (g *generator) positionList() *target {
	c := g.chain()
	tok := g.pick(c.tokens)
	var ps []kv
	switch x := g.r.IntN(20); {
	case x < 14:
		limit := g.limit(50)
		eff := limit
		if eff == 0 {
			eff = 20
		}
		maxPage := (10000 + eff - 1) / eff
		page := 1 + g.r.IntN(8)
		if g.chance(0.4) {
			page = 1 + g.r.IntN(maxPage)
		}
		ps = g.paging([]kv{{"chainShortName", g.chainName(c)}, {"tokenContractAddress", g.hex(tok)}}, page, limit)
	case x < 17: // one holder's position
		var holder string
		for {
			th := strings.SplitN(g.pick(c.holders), "|", 2)
			if th[0] == tok || g.chance(0.2) { // sometimes a holder of another token
				holder = th[1]
				break
			}
		}
		ps = []kv{{"chainShortName", g.chainName(c)}, {"tokenContractAddress", g.hex(tok)}, {"holderAddress", g.hex(holder)}}
		if g.chance(0.2) {
			ps = append(ps, kv{"page", "2"})
		}
	case x < 18: // an address that holds nothing
		ps = []kv{{"chainShortName", g.chainName(c)}, {"tokenContractAddress", tok}, {"holderAddress", g.randomHex(20)}}
	default: // a token that does not exist: code 0, empty list
		ps = g.paging([]kv{{"chainShortName", g.chainName(c)}, {"tokenContractAddress", g.randomHex(20)}}, 1+g.r.IntN(3), g.limit(50))
	}
	return &target{route: routePosition, path: g.url(routePosition, ps)}
}

func (g *generator) randomHex(nbytes int) string {
	const digits = "0123456789abcdef"
	b := []byte("0x")
	for range 2 * nbytes {
		b = append(b, digits[g.r.IntN(16)])
	}
	return string(b)
}

// batchSize is skewed to small batches, up to 20.
func (g *generator) batchSize() int {
	switch x := g.r.IntN(20); {
	case x < 10:
		return 1 + g.r.IntN(3)
	case x < 16:
		return 4 + g.r.IntN(7)
	}
	return 11 + g.r.IntN(10)
}

// hashList spells hashes as a txId value: separators, spaces, case,
// sometimes duplicates (which may make it longer than 20 items). It returns
// the value sent and the canonical value (distinct, lower case) for the
// reference.
func (g *generator) hashList(hashes []string) (sent, canon string) {
	items := slices.Clone(hashes)
	if g.chance(0.1) { // duplicates: the edge answers each hash once, where first asked
		for range 1 + g.r.IntN(4) {
			items = slices.Insert(items, g.r.IntN(len(items)+1), hashes[g.r.IntN(len(hashes))])
		}
	}
	var distinct []string
	for _, h := range items {
		if !slices.Contains(distinct, h) {
			distinct = append(distinct, h)
		}
	}
	sep := ","
	if g.chance(0.1) {
		sep = "%2C"
	}
	for i, h := range items {
		items[i] = g.hex(h)
		if g.chance(0.03) {
			items[i] = "%20" + items[i]
		}
	}
	return strings.Join(items, sep), strings.Join(distinct, ",")
}

func (g *generator) crossItem(c *chainInfo) string {
	switch x := g.r.IntN(20); {
	case x < 16:
		if g.chance(0.3) {
			return c.cross[g.r.IntN(60)] // a popular set: hits across batches
		}
		return g.pick(c.cross)
	case x < 17:
		return g.pick(c.otherChainX) // exists, but on the other chain
	case x < 19:
		return g.pick(c.unknownHashes)
	}
	return g.pick(c.plain) // a transaction, not a cross-chain transfer
}

func (g *generator) transactionMulti() *target {
	c := g.chain()
	var hashes []string
	for range g.batchSize() {
		hashes = append(hashes, g.crossItem(c))
	}
	sent, canon := g.hashList(hashes)
	name := g.chainName(c)
	return &target{
		route: routeMulti,
		path:  g.url(routeMulti, []kv{{"chainShortName", name}, {"txId", sent}}),
		ref:   routePaths[routeMulti] + "?chainShortName=" + c.name + "&txId=" + canon,
	}
}

func (g *generator) transactionFills() *target {
	c := g.chain()
	ps := []kv{{"chainShortName", g.chainName(c)}, {"txid", g.hex(g.crossItem(c))}}
	return &target{route: routeFills, path: g.url(routeFills, ps)}
}

func (g *generator) internalMulti() *target {
	c := g.chain()
	var hashes []string
	for range g.batchSize() {
		var h string
		switch x := g.r.IntN(20); {
		case x < 11:
			if g.chance(0.3) {
				h = c.internal[g.r.IntN(40)]
			} else {
				h = g.pick(c.internal)
			}
		case x < 14:
			h = g.pick(c.plain)
		case x < 16:
			h = g.pick(c.pendingTxs)
		case x < 18:
			h = g.pick(c.unknownHashes)
		default:
			h = g.pick(c.cross)
		}
		hashes = append(hashes, h)
	}
	sent, canon := g.hashList(hashes)
	name := g.chainName(c)
	page, limit := 1, g.limit(100)
	if g.chance(0.2) {
		page = 2 + g.r.IntN(2)
	}
	ps := g.paging([]kv{{"chainShortName", name}, {"txId", sent}}, page, limit)
	refPs := g.pagingExact([]kv{{"chainShortName", c.name}, {"txId", canon}}, ps)
	return &target{
		route: routeInternal,
		path:  g.url(routeInternal, ps),
		ref:   urlOf(routeInternal, refPs),
	}
}

// pagingExact copies page and limit of sent into ps.
func (g *generator) pagingExact(ps, sent []kv) []kv {
	for _, p := range sent {
		if p.k == "page" || p.k == "limit" {
			ps = append(ps, p)
		}
	}
	return ps
}

func urlOf(route string, ps []kv) string {
	var b strings.Builder
	b.WriteString(routePaths[route])
	for i, p := range ps {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(p.k + "=" + p.v)
	}
	return b.String()
}

// ---- requests the edge must refuse, with the exact code ----

func (g *generator) invalidTargets() []*target {
	var out []*target
	seen := map[string]bool{}
	add := func(route, code string, ps ...kv) {
		u := urlOf(route, ps)
		if !seen[u] {
			seen[u] = true
			out = append(out, &target{route: route, path: u, invalid: true, wantCode: code})
		}
	}
	for round := range 6 {
		c := g.chains[round%len(g.chains)]
		ch := kv{"chainShortName", c.name}
		tok := kv{"tokenContractAddress", c.tokens[round%len(c.tokens)]}
		h := kv{"height", strconv.FormatInt(c.fin-int64(round), 10)}
		cross := c.cross[round]
		tx := kv{"txId", cross}
		some := func(n int) string {
			var hs []string
			for i := range n {
				hs = append(hs, c.cross[(round*40+i)%len(c.cross)])
			}
			return strings.Join(hs, ",")
		}
		lim := kv{"limit", strconv.Itoa(1 + round)}

		// 50014: a required parameter missing or empty.
		add(routeBlocks, "50014", lim)
		add(routeBlocks, "50014", kv{"chainShortName", ""}, lim)
		add(routeBlocks, "50014", kv{"chainShortName", "%20%20"}, h)
		add(routeTxList, "50014", ch, lim)
		add(routeTxList, "50014", ch, kv{"height", ""}, lim)
		add(routeTxList, "50014", h)
		add(routePosition, "50014", ch, lim)
		add(routePosition, "50014", tok, lim)
		add(routeMulti, "50014", ch)
		add(routeMulti, "50014", ch, kv{"txId", ""}, kv{"n", strconv.Itoa(round)})
		add(routeMulti, "50014", tx)
		add(routeFills, "50014", ch, kv{"txId", cross}) // txid is the parameter here
		add(routeFills, "50014", kv{"txid", cross})
		add(routeInternal, "50014", ch, lim)
		add(routeInternal, "50014", tx, lim)

		// 50036: malformed or out of range.
		add(routeBlocks, "50036", kv{"chainShortName", "BTC"}, lim)
		add(routeBlocks, "50036", ch, kv{"limit", "0"})
		add(routeBlocks, "50036", ch, kv{"limit", strconv.Itoa(101 + round)})
		add(routeBlocks, "50036", ch, kv{"page", "0"}, lim)
		add(routeBlocks, "50036", ch, kv{"page", "x" + strconv.Itoa(round)})
		add(routeBlocks, "50036", ch, kv{"height", "-" + strconv.Itoa(round+1)})
		add(routeBlocks, "50036", ch, kv{"height", "12a" + strconv.Itoa(round)})
		// Beyond the newest 10000 rows: the spec's window for blocks and
		// holders only; transaction-list and internal pages go upstream.
		add(routeBlocks, "50036", ch, kv{"page", strconv.Itoa(101 + round)}, kv{"limit", "100"})
		add(routeTxList, "50036", ch, h, kv{"protocolType", "token_" + strconv.Itoa(99+round)})
		add(routeTxList, "50036", ch, h, kv{"limit", "1000"})
		add(routeTxList, "50036", kv{"chainShortName", "eth"}, h)
		add(routePosition, "50036", ch, kv{"tokenContractAddress", c.tokens[round%5][:20]})
		add(routePosition, "50036", ch, tok, kv{"holderAddress", "0xzz" + strconv.Itoa(round)})
		// (a limit of 51-100 goes upstream: upstream.position_list_max_limit
		// is 100, and the upstream may refuse it, a cached refusal)
		add(routePosition, "50036", ch, tok, kv{"limit", strconv.Itoa(101 + round)})
		add(routePosition, "50036", ch, tok, kv{"page", strconv.Itoa(201 + round)}, kv{"limit", "50"})
		add(routeMulti, "50036", ch, kv{"txId", cross[:40]})
		add(routeMulti, "50036", ch, kv{"txId", cross + ",0xnothex" + strconv.Itoa(round)})
		add(routeMulti, "50036", ch, kv{"txId", some(2+round) + ","}) // an empty item
		add(routeMulti, "50036", ch, kv{"txId", "0y" + cross[2:]})
		add(routeFills, "50036", ch, kv{"txid", some(2)})
		add(routeFills, "50036", ch, kv{"txid", cross + "0"})
		add(routeFills, "50036", kv{"chainShortName", "TRADEZONE"}, kv{"txid", cross})
		add(routeInternal, "50036", ch, kv{"txId", some(3)}, kv{"limit", "101"})
		add(routeInternal, "50036", ch, kv{"txId", "0x" + strings.Repeat("g", 64)})

		// 50025: more than 20 distinct hashes.
		add(routeMulti, "50025", ch, kv{"txId", some(21 + round)})
		add(routeInternal, "50025", ch, kv{"txId", some(21 + 2*round)})
	}
	return out
}
