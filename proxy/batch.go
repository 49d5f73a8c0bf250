package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/purge"
	"explorer-edge/proxy/reply"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
)

// transaction-multi and transaction-fills return the same records, so they
// are cached per (chain, hash) and answered from the hashes in cache plus
// one upstream call for the rest (docs/design.md, per-hash batches). Misses of concurrent
// requests are gathered for a short window into calls of up to 20 hashes.

// errUnmapped: the upstream answered a record that names no hash asked in
// any field that holds one (recordHashFields); the call's answer is then
// the question's whole answer when it asked the question's hashes and
// only them, else the question is fetched whole (serveBatch).
var errUnmapped = errors.New("batch answer has a record for a hash not asked")

// unmappedError is errUnmapped with the answer that was not filed: the
// upstream's answer to the hashes asked, as they were asked, at sent.
type unmappedError struct {
	body  []byte
	asked []string
	sent  time.Time
}

func (e *unmappedError) Error() string        { return errUnmapped.Error() }
func (e *unmappedError) Is(target error) bool { return target == errUnmapped }

// unmappedHold is how long a chain's per-hash questions are asked whole
// after one of its batch answers could not be filed: an upstream whose
// records name the hash asked in no field known would otherwise have
// every question that shares a call with another one asked twice.
const unmappedHold = 10 * time.Minute

// hashCall is one hash being fetched; requests that miss it wait on done.
type hashCall struct {
	done    chan struct{}
	records []byte // the hash's records, comma-separated JSON objects
	entry   *cache.Entry
	err     error
	// needed: a request waits on it with no copy of the hash that could
	// stand in if the call fails (under batcher.mu, read when it is sent).
	needed bool
}

type batchGroup struct {
	chain  string
	hashes []string
	calls  []*hashCall
	tenant *upstream.Tenant // who opened it pays for the call; who joined pays nothing
}

type batcher struct {
	p      *Proxy
	window atomic.Int64 // nanoseconds
	mu     sync.Mutex
	open   map[string]*batchGroup // by chain: the group still gathering
	flying map[string]*hashCall   // by hash key: fetches under way
	// whole: by chain, until when (ns) its questions are asked whole,
	// after an answer that could not be filed per hash (unmappedHold).
	whole map[string]int64
}

func newBatcher(p *Proxy, window time.Duration) *batcher {
	b := &batcher{p: p, open: map[string]*batchGroup{}, flying: map[string]*hashCall{}, whole: map[string]int64{}}
	b.window.Store(int64(window))
	return b
}

// serveBatch answers a per-hash route from the item cache and the batcher:
// look the hashes up, refresh the stale ones behind, fetch the missing ones,
// and assemble the answer in the order asked. whole is the request's own
// cached answer, if any: only one made by the fallback below has stale
// windows, and it stands in for a failure.
func (p *Proxy) serveBatch(ctx *fasthttp.RequestCtx, s *settings, q *query, whole *cache.Entry, start, now time.Time) {
	chain := string(q.Chain)
	if p.work.batch.wholeOnly(chain, now) {
		a, leader, err := p.load(s, q.request(whole != nil, false))
		p.answer(ctx, s, q, whole, a, leader, err, start)
		return
	}
	parts := p.lookupParts(s, q, now)
	p.refreshParts(s, chain, parts.stale, q.tenant)
	t0 := time.Now()
	err := parts.fetch(p, s, chain)
	if len(parts.need) > 0 { // the wait for the missing hashes' call
		p.noteUpstream(ctx, s, time.Since(t0))
	}
	var unmapped *unmappedError
	if errors.As(err, &unmapped) {
		// Never serve one hash's record for another. The call's answer is
		// this question's whole answer when it asked this question's
		// hashes and only them: cached under the question's own key,
		// not asked again. Else the question is fetched whole, and the
		// chain's questions are asked whole for a while (unmappedHold).
		p.metrics.BatchUnmapped.Inc()
		p.work.batch.holdWhole(chain, now)
		f := q.request(whole != nil, false)
		if len(parts.need) == len(parts.hashes) && sameHashes(unmapped.asked, parts.hashes) {
			a := p.store(s, f, unmapped.sent, upstream.Answer{Status: fasthttp.StatusOK, Code: "0", Body: unmapped.body})
			p.answer(ctx, s, q, whole, a, true, nil, start)
			return
		}
		a, leader, err := p.load(s, f)
		p.answer(ctx, s, q, whole, a, leader, err, start)
		return
	}
	if err != nil && !parts.standIn(err, now.UnixNano()) {
		p.staleOrFail(ctx, s, q, whole, err, start, now)
		return
	}
	result, st := parts.status(err)
	assembled, body := assemble(string(q.Key), parts.items)
	if assembled.Fresh > now.UnixNano() && err == nil {
		assembled.Tags = purge.Of(assembled, body, s.chains)
		p.keep(s, assembled, now)
	} else if st == reply.Partial || st == reply.Miss {
		st.Text = strings.TrimSuffix(st.Text, "; stored") // a part was stale: not kept whole
	}
	p.writeEntry(ctx, s, q, assembled, now, st)
	p.answered(ctx, s, q.Route.ID, result, "0", start)
}

// wholeOnly reports whether chain's per-hash questions are asked whole at
// now (holdWhole).
func (b *batcher) wholeOnly(chain string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.whole[chain]
	if ok && now.UnixNano() >= until {
		delete(b.whole, chain)
		return false
	}
	return ok
}

// holdWhole has chain's per-hash questions asked whole for unmappedHold
// from now.
func (b *batcher) holdWhole(chain string, now time.Time) {
	b.mu.Lock()
	b.whole[chain] = now.Add(unmappedHold).UnixNano()
	b.mu.Unlock()
}

// sameHashes reports whether a and b hold the same hashes, in any order
// (each list has no hash twice).
func sameHashes(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, h := range a {
		if !slices.Contains(b, h) {
			return false
		}
	}
	return true
}

// batchParts is what the item cache, the disk and the shared tier hold of one
// request's hashes, and what the batcher fetched of the rest.
type batchParts struct {
	hashes     []string       // as asked
	items      []*cache.Entry // by position; nil until found or fetched
	need       []int          // positions to fetch
	stale      []string       // hashes served stale, to refresh
	fromCache  int            // items found fresh or stale
	fromDisk   int            // of those, found in the disk tier
	fromShared int            // of those, found in the shared tier
	tenant     *upstream.Tenant
}

// lookupParts finds q's hashes in Ristretto, then the missing ones in the
// disk tier (each hash's final item is written there, as whole answers
// are; the answer assembled from them is not), then the rest in the shared
// tier in one round trip.
func (p *Proxy) lookupParts(s *settings, q *query, now time.Time) *batchParts {
	chain := string(q.Chain)
	b := &batchParts{hashes: make([]string, q.NHashes), items: make([]*cache.Entry, q.NHashes), tenant: q.tenant}
	var shared []string // keys of the hashes not in Ristretto nor on disk
	var sharedIdx []int
	for i := range b.hashes {
		b.hashes[i] = string(q.Hash(i))
		k := route.HashKey(chain, b.hashes[i])
		if b.items[i] = p.cache.GetString(k); b.items[i] == nil && p.tiers.disk != nil {
			if b.items[i] = p.itemFromDisk(s, k, now); b.items[i] != nil {
				b.fromDisk++
			}
		}
		if b.items[i] == nil && p.tiers.shared != nil {
			shared, sharedIdx = append(shared, k), append(sharedIdx, i)
		}
	}
	if len(shared) > 0 {
		for j, e := range p.shared(s).GetMany(shared, now) {
			if e != nil {
				p.keep(s, e, now)
				b.items[sharedIdx[j]] = e
				b.fromShared++
			}
		}
	}
	for i, e := range b.items {
		switch e.StateAt(now.UnixNano()) {
		case cache.Fresh:
			b.fromCache++
		case cache.Stale:
			b.fromCache++
			b.stale = append(b.stale, b.hashes[i])
		default:
			b.need = append(b.need, i)
		}
	}
	return b
}

// itemFromDisk is the disk tier's item under key (a hash's records),
// judged and held to this node's configuration as a whole answer read
// from there is (fromDisk), and kept in memory; nil if none.
func (p *Proxy) itemFromDisk(s *settings, key string, now time.Time) *cache.Entry {
	if !p.purges.Known() {
		return nil
	}
	e := p.admitRead(s, tierDisk, key, p.tiers.disk.Get(key, now)) // checked as a whole answer is (tier.go)
	if e == nil {
		return nil
	}
	if e = p.purges.Judge(e); e != nil {
		p.promote(s, e, now)
	}
	return e
}

// refreshParts fetches stale hashes in the background, once each however
// many requests see them stale.
func (p *Proxy) refreshParts(s *settings, chain string, stale []string, t *upstream.Tenant) {
	if len(stale) == 0 {
		return
	}
	keys := make([]string, len(stale))
	for i, h := range stale {
		keys[i] = route.HashKey(chain, h)
	}
	p.background(keys, func(keys []string) {
		hashes := make([]string, len(keys))
		for i, k := range keys {
			hashes[i] = k[strings.LastIndexByte(k, '|')+1:]
		}
		haveCopy := make([]bool, len(hashes)) // served stale: each has its copy
		for i := range haveCopy {
			haveCopy[i] = true
		}
		p.work.batch.fetch(s, chain, hashes, haveCopy, t)
	})
}

// fetch gets the needed hashes through the batcher; the error is the last
// hash's that failed.
func (b *batchParts) fetch(p *Proxy, s *settings, chain string) error {
	if len(b.need) == 0 {
		return nil
	}
	need := make([]string, len(b.need))
	for j, i := range b.need {
		need[j] = b.hashes[i]
	}
	// Each hash says for itself whether a copy of it can stand in: a stale
	// hash beside it, refreshed apart, cannot (it made the call refuse
	// at once what it would have waited budget_wait for alone).
	now := p.clock().UnixNano()
	haveCopy := make([]bool, len(b.need))
	for j, i := range b.need {
		haveCopy[j] = b.items[i].UsableOnError(now)
	}
	var err error
	for j, c := range p.work.batch.fetch(s, chain, need, haveCopy, b.tenant) {
		if c.err != nil {
			err = c.err
			continue
		}
		b.items[b.need[j]] = c.entry
	}
	return err
}

// standIn reports whether old records of every hash that failed may stand
// in for the failure at now (within stale_if_error, and the failure is the
// upstream's, not its answer to the question).
func (b *batchParts) standIn(err error, now int64) bool {
	var e *envelope.Error
	if errors.As(err, &e) && e.Answered {
		return false
	}
	for _, i := range b.need {
		if !b.items[i].UsableOnError(now) {
			return false
		}
	}
	return true
}

// status is the result and Cache-Status of the assembled answer.
func (b *batchParts) status(err error) (metrics.Result, reply.Status) {
	switch {
	case err != nil:
		return metrics.ResultStaleError, reply.StaleError(err)
	case len(b.need) == 0 && len(b.stale) > 0:
		return metrics.ResultStale, reply.StaleRevalidate
	case len(b.need) == 0 && b.fromShared > 0:
		return metrics.ResultHit, reply.SharedHit // as a whole key's answer from Redis says
	case len(b.need) == 0 && b.fromDisk > 0:
		return metrics.ResultHit, reply.DiskHit
	case len(b.need) == 0:
		return metrics.ResultHit, reply.Hit
	case b.fromCache > 0:
		return metrics.ResultPartial, reply.Partial
	}
	return metrics.ResultMiss, reply.Miss
}

// assemble is the answer made of items in the order asked. It is as old as
// its oldest part, fresh as long as all parts are, may be served stale only
// within every part's windows, and has the least settled part's class. The
// body it was made of comes along, not to be kept.
func assemble(key string, items []*cache.Entry) (*cache.Entry, []byte) {
	body := append(make([]byte, 0, 64+len(items)*1200), `{"code":"0","msg":"","data":[`...)
	first := true
	part := items[0]
	stored, fresh, swr, sie := part.Stored, part.Fresh, part.StaleWhileRevalidate, part.StaleIfError
	class := part.Class
	for _, e := range items {
		if len(e.Body) > 0 {
			if !first {
				body = append(body, ',')
			}
			body = append(body, e.Body...)
			first = false
		}
		stored, fresh = min(stored, e.Stored), min(fresh, e.Fresh)
		swr, sie = min(swr, e.StaleWhileRevalidate), min(sie, e.StaleIfError)
		class = cache.LeastSettled(class, e.Class)
	}
	body = append(body, "]}"...)
	e := cache.NewEntry(key, body, class, time.Unix(0, stored), time.Duration(fresh-stored), time.Duration(swr), time.Duration(sie))
	e.Source = cache.SourceAssembled
	return e, body
}

// fetch returns one call per hash, fetching those not already under way in
// gathered groups, and waits for them. haveCopy[i] tells whether hashes[i]
// has a copy that can stand in if its call fails: a call waits for the
// budget unless every hash it asks has one, whoever opened its group.
func (b *batcher) fetch(s *settings, chain string, hashes []string, haveCopy []bool, t *upstream.Tenant) []*hashCall {
	calls := make([]*hashCall, len(hashes))
	b.mu.Lock()
	for i, h := range hashes {
		k := route.HashKey(chain, h)
		if c, ok := b.flying[k]; ok {
			// Joined: if it is not sent yet, it waits for this request too.
			c.needed = c.needed || !haveCopy[i]
			calls[i] = c
			continue
		}
		c := &hashCall{done: make(chan struct{}), needed: !haveCopy[i]}
		b.flying[k] = c
		calls[i] = c
		g := b.open[chain]
		if g == nil {
			g = &batchGroup{chain: chain, tenant: t}
			b.open[chain] = g
			time.AfterFunc(time.Duration(b.window.Load()), func() { b.dispatch(s, g) })
		}
		g.hashes = append(g.hashes, h)
		g.calls = append(g.calls, c)
		if len(g.hashes) == route.MaxHashes {
			delete(b.open, chain)
			go b.send(s, g)
		}
	}
	b.mu.Unlock()
	for _, c := range calls {
		<-c.done
	}
	return calls
}

// dispatch sends a group when its window closes, unless it filled up and
// left already.
func (b *batcher) dispatch(s *settings, g *batchGroup) {
	b.mu.Lock()
	if b.open[g.chain] != g {
		b.mu.Unlock()
		return
	}
	delete(b.open, g.chain)
	b.mu.Unlock()
	b.send(s, g)
}

// send makes one upstream transaction-multi call for the group and hands
// each hash its records. The call waits for the budget (budget_wait)
// unless no one needs it: every hash it asks has a copy to stand in.
//
// It is the whole-key miss's path (fill) for a group of hashes: the same
// byte gate, upstream fetch, store (keep) and shared tier. Two steps
// differ, on purpose: the flight is the batcher's own (one per hash, in
// flying, so that requests asking overlapping sets share each hash's
// call), and no fleet-wide fetch lock is taken (a lock per hash would
// cost a Redis round trip each, for answers of a few records; a fleet
// may ask a hash twice).
func (b *batcher) send(s *settings, g *batchGroup) {
	p := b.p
	finished := make([]bool, len(g.hashes))
	finish := func(i int, records []byte, e *cache.Entry, err error) {
		if finished[i] {
			return
		}
		finished[i] = true
		c := g.calls[i]
		c.records, c.entry, c.err = records, e, err
		b.mu.Lock()
		delete(b.flying, route.HashKey(g.chain, g.hashes[i]))
		b.mu.Unlock()
		close(c.done)
	}
	// A panic (a bug) answers every hash not yet answered with errPanic:
	// the requests waiting for them must not wait for ever.
	defer func() {
		if v := recover(); v != nil {
			p.panicked("background", v)
			for i := range g.hashes {
				finish(i, nil, nil, errPanic.With(fmt.Errorf("panic: %v", v), 0))
			}
		}
	}()
	ask := b.pending(g, finish)
	if len(ask) == 0 {
		return
	}
	sent := p.clock() // the answer is as old as the question
	records, err := b.call(s, g, ask)
	var unmapped *unmappedError
	if errors.As(err, &unmapped) {
		unmapped.sent = sent
	}
	if err != nil {
		for _, i := range ask {
			finish(i, nil, nil, err)
		}
		return
	}
	now := p.clock()
	for _, i := range ask {
		recs := records[g.hashes[i]]
		finish(i, recs, p.storeItem(s, g.chain, g.hashes[i], recs, sent, now), nil)
	}
}

// pending is the positions of g's hashes still to ask: a refresh that
// another one beat finds its hash fresh again, and finishes it.
func (b *batcher) pending(g *batchGroup, finish func(int, []byte, *cache.Entry, error)) []int {
	now := b.p.clock()
	var ask []int
	for i, h := range g.hashes {
		if e := b.p.cache.GetString(route.HashKey(g.chain, h)); e.StateAt(now.UnixNano()) == cache.Fresh {
			finish(i, e.Body, e, nil)
			continue
		}
		ask = append(ask, i)
	}
	return ask
}

// call asks the upstream for the hashes of g at positions ask, within the
// byte gate, and files the records it answers under each hash.
func (b *batcher) call(s *settings, g *batchGroup, ask []int) (map[string][]byte, error) {
	p := b.p
	r := &route.Table[route.TransactionMulti]
	haveStale := true
	b.mu.Lock()
	for _, i := range ask {
		if g.calls[i].needed {
			haveStale = false
		}
	}
	b.mu.Unlock()
	var key strings.Builder
	key.WriteString(r.Path + "?chainShortName=" + g.chain + "&txId=")
	asked := make([]string, len(ask))
	for j, i := range ask {
		if j > 0 {
			key.WriteByte(',')
		}
		key.WriteString(g.hashes[i])
		asked[j] = g.hashes[i]
	}
	f := &upstream.Request{Route: r, Key: key.String(), Chain: g.chain, Height: -1, HaveStale: haveStale, Tenant: g.tenant}
	w, err := p.up.Reserve(f)
	if err != nil {
		return nil, err
	}
	up, err := p.up.Fetch(f)
	p.up.Release(w, len(up.Body))
	if err == nil && (up.Code != "0" || up.Status != fasthttp.StatusOK) {
		msg, _ := jsonparser.GetString(up.Body, "msg")
		if envelope.UpstreamFailing(up.Status, up.Code) { // 50013 "busy" with 200: a failure, never taken for an answer
			err = envelope.Failure(up.Status, up.Code)
		} else {
			err = &envelope.Error{Status: up.Status, Code: up.Code, Msg: msg, Kind: envelope.KindEnvelope, Answered: true}
		}
	}
	if err != nil {
		return nil, err
	}
	return splitRecords(up.Body, asked)
}

// storeItem stores the records of one hash of chain, asked at sent, as its
// item: classified, tagged, kept here and in the shared tier.
func (p *Proxy) storeItem(s *settings, chain, hash string, recs []byte, sent, now time.Time) *cache.Entry {
	r := &route.Table[route.TransactionMulti]
	class := cache.Negative
	if len(recs) > 0 {
		class = route.ClassifyCrossAt(envelope.Wrap(recs), sent, s.cfg.Cache.CrossChainSettle)
	}
	e := cache.NewItem(route.HashKey(chain, hash), recs, class, sent, p.ttlFor(s, r, class),
		route.ClassWindow(s.cfg.Cache.StaleWhileRevalidate, class), s.cfg.Cache.StaleIfError)
	e.Source = cache.SourceUpstream
	e.Tags = purge.Of(e, recs, s.chains)
	p.keep(s, e, now)
	if p.tiers.shared != nil {
		p.shared(s).Set(e, now)
	}
	return e
}

// recordHashFields are the fields of a cross-chain record that may hold
// the hash it was asked by. The vendor's
// pages call txId "the cross-chain transaction hash (TradeZone side)" and
// answer id "cross-chain transaction hash" and tzTxHash "TZ transaction
// hash"; their example asks one hash and answers a record whose id is
// another (docs/explorer-readings.md). chainxTxHash is the other side's
// (the vendor's xlayerTxHash).
var recordHashFields = []string{"id", "tzTxHash", "chainxTxHash", "xlayerTxHash"}

// splitRecords files the records of a transaction-multi answer under the
// hashes asked: each hash gets its records as comma-separated JSON objects
// (nil: none). A record is filed under the hash asked that one of
// recordHashFields holds; when one hash was asked, every record is its. A
// record that is not an object, or names no hash asked or two, is
// unmapped (*unmappedError, with body), and nothing is filed.
func splitRecords(body []byte, asked []string) (map[string][]byte, error) {
	records := make(map[string][]byte, len(asked))
	for _, h := range asked {
		records[h] = nil
	}
	unmapped := false
	_, err := jsonparser.ArrayEach(body, func(rec []byte, t jsonparser.ValueType, _ int, _ error) {
		h, ok := recordHash(rec, asked, records)
		if !ok || t != jsonparser.Object {
			unmapped = true
			return
		}
		buf := records[h]
		if len(buf) > 0 {
			buf = append(buf, ',')
		}
		records[h] = append(buf, rec...)
	}, "data")
	if unmapped || (err != nil && !errors.Is(err, jsonparser.KeyPathNotFoundError)) {
		return nil, &unmappedError{body: body, asked: asked}
	}
	return records, nil
}

// recordHash is the hash asked that rec is filed under (splitRecords):
// the one hash asked that its fields name. A record naming two hashes
// asked (one in id, another in tzTxHash) is nobody's: which one it
// answers cannot be told, and it must not be served for the other.
func recordHash(rec []byte, asked []string, records map[string][]byte) (string, bool) {
	if len(asked) == 1 {
		return asked[0], true
	}
	found := ""
	for _, f := range recordHashFields {
		v, err := jsonparser.GetString(rec, f)
		if err != nil || v == "" {
			continue
		}
		v = strings.ToLower(strings.TrimSpace(v))
		if _, ok := records[v]; !ok || v == found {
			continue
		}
		if found != "" {
			return "", false
		}
		found = v
	}
	return found, found != ""
}
