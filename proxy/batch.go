package proxy

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"
	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/metrics"
)

// transaction-multi and transaction-fills return the same records, so they
// are cached per (chain, hash) and answered from the hashes in cache plus
// one upstream call for the rest (DESIGN.md section 4). Misses of concurrent
// requests are gathered for a short window into calls of up to 20 hashes.

// errUnmapped: the upstream answered a record whose id matches no hash
// asked; the request is then fetched and cached whole.
var errUnmapped = errors.New("batch answer has a record for a hash not asked")

// hashKey is the cache key of one hash's records.
func hashKey(chain, hash string) string { return "hash|" + chain + "|" + hash }

// hashCall is one hash being fetched; requests that miss it wait on done.
type hashCall struct {
	done    chan struct{}
	records []byte // the hash's records, comma-separated JSON objects
	entry   *cache.Entry
	err     error
}

type batchGroup struct {
	chain  string
	hashes []string
	calls  []*hashCall
}

type batcher struct {
	p      *Proxy
	window atomic.Int64 // nanoseconds
	mu     sync.Mutex
	open   map[string]*batchGroup // by chain: the group still gathering
	flying map[string]*hashCall   // by hash key: fetches under way
}

func newBatcher(p *Proxy, window time.Duration) *batcher {
	b := &batcher{p: p, open: map[string]*batchGroup{}, flying: map[string]*hashCall{}}
	b.window.Store(int64(window))
	return b
}

// serveBatch answers a per-hash route from the item cache and the batcher.
// whole is the request's own cached answer, if any: only one made by the
// fallback below has stale windows, and it stands in for a failure.
func (p *Proxy) serveBatch(ctx *fasthttp.RequestCtx, s *settings, q *query, whole *cache.Entry, start, now time.Time) {
	chain := string(q.chain)
	n := q.nHashes
	items := make([]*cache.Entry, n)
	var need, stale []string
	var needIdx []int
	fromCache := 0
	ns := now.UnixNano()
	var shared []string // keys of the hashes not in Ristretto
	var sharedIdx []int
	for i := 0; i < n; i++ {
		k := hashKey(chain, string(q.hash(i)))
		if items[i] = p.cache.GetString(k); items[i] == nil && p.tier != nil {
			shared, sharedIdx = append(shared, k), append(sharedIdx, i)
		}
	}
	fromShared := 0 // items found in the shared tier, not Ristretto
	if len(shared) > 0 {
		for j, e := range p.tier.GetMany(shared, now) {
			if e != nil {
				p.cache.Set(e, now)
				items[sharedIdx[j]] = e
				fromShared++
			}
		}
	}
	for i, e := range items {
		h := string(q.hash(i))
		switch e.StateAt(ns) {
		case cache.Fresh:
			fromCache++
		case cache.Stale:
			fromCache++
			stale = append(stale, h)
		default:
			need = append(need, h)
			needIdx = append(needIdx, i)
		}
	}
	if len(stale) > 0 {
		keys := make([]string, len(stale))
		for i, h := range stale {
			keys[i] = hashKey(chain, h)
		}
		p.background(keys, func(keys []string) {
			hashes := make([]string, len(keys))
			for i, k := range keys {
				hashes[i] = k[strings.LastIndexByte(k, '|')+1:]
			}
			p.batch.fetch(s, chain, hashes, true)
		})
	}
	var fetchErr error
	if len(need) > 0 {
		calls := p.batch.fetch(s, chain, need, len(stale) > 0)
		for j, c := range calls {
			if c.err != nil {
				fetchErr = c.err
				continue
			}
			items[needIdx[j]] = c.entry
		}
	}
	if errors.Is(fetchErr, errUnmapped) {
		// Never serve one hash's record for another: fall back to the
		// request whole, cached under its own key.
		p.metrics.BatchUnmapped.Inc()
		a, leader, err := p.load(s, q.request(whole != nil, false))
		p.answer(ctx, s, q, whole, a, leader, err, start)
		return
	}
	result, st := metrics.ResultMiss, statusMiss
	switch {
	case fetchErr != nil:
		// Serve old records for the failed hashes if every one is usable.
		var e *Error
		answered := errors.As(fetchErr, &e) && e.answered
		for _, i := range needIdx {
			if answered || !items[i].UsableOnError(ns) {
				if !answered && whole.UsableOnError(ns) {
					p.writeEntry(ctx, q, whole, now, staleErrorStatus(fetchErr))
					p.done(ctx, q.route.id, metrics.ResultStaleError, start)
					return
				}
				p.fail(ctx, q.route.id, start, fetchErr)
				return
			}
		}
		result, st = metrics.ResultStaleError, staleErrorStatus(fetchErr)
	case len(need) == 0 && len(stale) > 0:
		result, st = metrics.ResultStale, statusStaleRevalidate
	case len(need) == 0 && fromShared > 0:
		result, st = metrics.ResultHit, statusSharedHit // as a whole key's answer from Redis says
	case len(need) == 0:
		result, st = metrics.ResultHit, statusHit
	case fromCache > 0:
		result, st = metrics.ResultPartial, statusPartial
	}
	// Assemble in the order asked; the whole answer is cached under the
	// request's key too, so a repeat is a plain zero-allocation hit.
	// The answer is as old as its oldest part, fresh as long as all parts
	// are, and may be served stale only within every part's windows.
	body := append(make([]byte, 0, 64+n*1200), `{"code":"0","msg":"","data":[`...)
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
	assembled := cache.NewEntry(string(q.key), body, class, time.Unix(0, stored), time.Duration(fresh-stored),
		time.Duration(swr), time.Duration(sie))
	if fresh > ns && fetchErr == nil {
		p.cache.Set(assembled, now)
	} else if st == statusPartial || st == statusMiss {
		st.text = strings.TrimSuffix(st.text, "; stored") // a part was stale: not kept whole
	}
	p.writeEntry(ctx, q, assembled, now, st)
	p.done(ctx, q.route.id, result, start)
}

// fetch returns one call per hash, fetching those not already under way in
// gathered groups, and waits for them.
func (b *batcher) fetch(s *settings, chain string, hashes []string, haveStale bool) []*hashCall {
	calls := make([]*hashCall, len(hashes))
	b.mu.Lock()
	for i, h := range hashes {
		k := hashKey(chain, h)
		if c, ok := b.flying[k]; ok {
			calls[i] = c
			continue
		}
		c := &hashCall{done: make(chan struct{})}
		b.flying[k] = c
		calls[i] = c
		g := b.open[chain]
		if g == nil {
			g = &batchGroup{chain: chain}
			b.open[chain] = g
			time.AfterFunc(time.Duration(b.window.Load()), func() { b.dispatch(s, g, haveStale) })
		}
		g.hashes = append(g.hashes, h)
		g.calls = append(g.calls, c)
		if len(g.hashes) == maxHashes {
			delete(b.open, chain)
			go b.send(s, g, haveStale)
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
func (b *batcher) dispatch(s *settings, g *batchGroup, haveStale bool) {
	b.mu.Lock()
	if b.open[g.chain] != g {
		b.mu.Unlock()
		return
	}
	delete(b.open, g.chain)
	b.mu.Unlock()
	b.send(s, g, haveStale)
}

// send makes one upstream transaction-multi call for the group and hands
// each hash its records.
func (b *batcher) send(s *settings, g *batchGroup, haveStale bool) {
	p := b.p
	r := &routes[routeTransactionMulti]
	finish := func(i int, records []byte, e *cache.Entry, err error) {
		c := g.calls[i]
		c.records, c.entry, c.err = records, e, err
		b.mu.Lock()
		delete(b.flying, hashKey(g.chain, g.hashes[i]))
		b.mu.Unlock()
		close(c.done)
	}
	// A refresh that another one beat: the hash is fresh again.
	now := p.clock()
	var ask []int
	for i, h := range g.hashes {
		if e := p.cache.GetString(hashKey(g.chain, h)); e.StateAt(now.UnixNano()) == cache.Fresh {
			finish(i, e.Body, e, nil)
			continue
		}
		ask = append(ask, i)
	}
	if len(ask) == 0 {
		return
	}
	var key strings.Builder
	key.WriteString(r.path + "?chainShortName=" + g.chain + "&txId=")
	for j, i := range ask {
		if j > 0 {
			key.WriteByte(',')
		}
		key.WriteString(g.hashes[i])
	}
	sent := p.clock() // the answer is as old as the question
	up, err := p.up.fetch(s, &fetchReq{route: r, key: key.String(), chain: g.chain, height: -1, haveStale: haveStale})
	body := up.body
	if err == nil && (up.code != "0" || up.status != fasthttp.StatusOK) {
		msg, _ := jsonparser.GetString(body, "msg")
		err = &Error{Status: up.status, Code: up.code, Msg: msg, reason: reasonEnvelope,
			answered: !upstreamFailing(up.status, up.code)}
	}
	if err != nil {
		for _, i := range ask {
			finish(i, nil, nil, err)
		}
		return
	}
	asked := make([]string, len(ask))
	for j, i := range ask {
		asked[j] = g.hashes[i]
	}
	records, err := splitRecords(body, asked)
	if err != nil {
		for _, i := range ask {
			finish(i, nil, nil, err)
		}
		return
	}
	now = p.clock()
	for _, i := range ask {
		h := g.hashes[i]
		recs := records[h]
		class := cache.Negative
		if len(recs) > 0 {
			class = classifyCross(p, nil, wrapData(recs))
		}
		e := cache.NewItem(hashKey(g.chain, h), recs, class, sent, p.ttlFor(s, r, class),
			classWindow(s.cfg.Cache.StaleWhileRevalidate, class), s.cfg.Cache.StaleIfError)
		p.cache.Set(e, now)
		if p.tier != nil {
			p.tier.Set(e, now)
		}
		finish(i, recs, e, nil)
	}
}

// splitRecords files the records of a transaction-multi answer under the
// hashes asked: each hash gets its records as comma-separated JSON objects
// (nil: none). A record that is not an object or whose id is not a hash
// asked is errUnmapped, and nothing is filed.
func splitRecords(body []byte, asked []string) (map[string][]byte, error) {
	records := make(map[string][]byte, len(asked))
	for _, h := range asked {
		records[h] = nil
	}
	unmapped := false
	_, err := jsonparser.ArrayEach(body, func(rec []byte, t jsonparser.ValueType, _ int, _ error) {
		id, _ := jsonparser.GetString(rec, "id")
		id = strings.ToLower(strings.TrimSpace(id))
		buf, ok := records[id]
		if !ok || t != jsonparser.Object {
			unmapped = true
			return
		}
		if len(buf) > 0 {
			buf = append(buf, ',')
		}
		records[id] = append(buf, rec...)
	}, "data")
	if unmapped || (err != nil && !errors.Is(err, jsonparser.KeyPathNotFoundError)) {
		return nil, errUnmapped
	}
	return records, nil
}

// wrapData makes records an envelope for the classifier.
func wrapData(records []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	b.Write(records)
	b.WriteString(`]}`)
	return b.Bytes()
}
