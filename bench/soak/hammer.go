package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
)

// hammer is the stale hot keys' load: during its phase,
// conns connections ask a few hot keys as fast as the edge answers (up to
// rate), while the sim answers their route only after 2-3 s, longer than
// the edge's upstream timeout. The keys go stale and stay so; an edge that
// starts a goroutine per stale hit, each waiting for the one refresh, piles
// up thousands of them. Every answer is judged like the load's.
type hammer struct {
	keys  []*target
	route string
	conns int
	rate  float64
	hcs   []*fasthttp.HostClient // one per node, conns spread over them
	ck    *checker
	c     *counts
	runs  atomic.Int64 // phases it ran in
}

// newHammer picks up to 4 hot keys of one route, position-list if it has
// two or more.
func newHammer(pl *pool, nodes []*node, ck *checker, conns int, r float64) *hammer {
	by := map[string][]*target{}
	for _, t := range pl.hot {
		if t.refStatus == 200 {
			by[t.route] = append(by[t.route], t)
		}
	}
	route := routePosition
	if len(by[route]) < 2 {
		for rt, ts := range by {
			if len(ts) > len(by[route]) {
				route = rt
			}
		}
	}
	keys := by[route][:min(4, len(by[route]))]
	h := &hammer{keys: keys, route: route, conns: conns, rate: r, ck: ck, c: &counts{}}
	for _, n := range nodes {
		h.hcs = append(h.hcs, loadClient(n.listen, max(conns/len(nodes), 1)))
	}
	return h
}

// faults is the sim's setting of the hammer's phase: the keys' route slow.
func (h *hammer) faults() map[string]any {
	return map[string]any{"route": h.route, "latency": "2s", "jitter": "1s"}
}

func (h *hammer) describe() string {
	return fmt.Sprintf("%d hot %s keys, %d connections, up to %.0f req/s", len(h.keys), h.route, h.conns, h.rate)
}

// run asks the keys until ctx ends.
func (h *hammer) run(ctx context.Context) {
	if len(h.keys) == 0 {
		return
	}
	h.runs.Add(1)
	lim := rate.NewLimiter(rate.Limit(h.rate), h.conns)
	var wg sync.WaitGroup
	for i := range h.conns {
		hc := h.hcs[i%len(h.hcs)]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for lim.Wait(ctx) == nil {
				t := h.keys[r.IntN(len(h.keys))]
				req.Reset()
				resp.Reset()
				req.SetRequestURI(t.path)
				req.Header.SetHost(hc.Addr)
				// Many clients behind the trusted proxy: none of them
				// near the per-IP limit.
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", 200+r.IntN(50), r.IntN(256), r.IntN(256)))
				h.c.requests.Add(1)
				start := time.Now()
				err := hc.Do(req, resp)
				if err != nil {
					h.ck.clientError(h.c, t, err)
					continue
				}
				h.ck.check(h.c, nil, t, sent{}, resp, start, time.Now())
			}
		})
	}
	wg.Wait()
	for _, hc := range h.hcs {
		hc.CloseIdleConnections()
	}
}
