package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/purge"
	"explorer-edge/sim"
)

// webhookCDN records the tags of the purges POSTed to it, in order; it
// refuses (500) while closed.
type webhookCDN struct {
	open atomic.Bool
	mu   sync.Mutex
	tags []string
}

func (w *webhookCDN) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !w.open.Load() {
		rw.WriteHeader(500)
		return
	}
	var body struct {
		Tags []string `json:"tags"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		rw.WriteHeader(400)
		return
	}
	w.mu.Lock()
	w.tags = append(w.tags, body.Tags...)
	w.mu.Unlock()
}

func (w *webhookCDN) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.tags)
}

// TestCDNFleetHolderDies: two edges on redis-server send the fleet's
// purges to a CDN (a webhook) from one node at a time. With the CDN
// refusing, 500 operator purges queue; the node holding the lease is
// closed with them queued; the other takes the lease from Redis and sends
// every one, in the order of the fleet's log, once the CDN accepts: none
// lost (a purge the dead node had sent may come twice, in place).
func TestCDNFleetHolderDies(t *testing.T) {
	rdb := startRedis(t)
	cdnAPI := &webhookCDN{}
	srv := httptest.NewServer(cdnAPI)
	defer srv.Close()
	_, edges := newFleet(t, rdb, 2, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.CDN.TagHeader, c.CDN.Provider, c.CDN.Endpoints = "xkey", "webhook", []string{srv.URL}
		c.CDN.Lease, c.CDN.ResendAfter, c.CDN.Rate, c.CDN.Burst = time.Second, 0, 1000, 1000
	})
	holder := -1
	testkit.WaitFor(t, "a node to hold the CDN lease", func() bool {
		for i, e := range edges {
			if e.shared.HoldCDNLease(time.Second) {
				holder = i
				return true
			}
		}
		return false
	})
	other := edges[1-holder]
	naming := &other.p.settings.Load().cdn.Tags
	var want []string
	for i := range 500 {
		sel := fmt.Sprintf(`{"url":"/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d"}`, 1000+i)
		edges[i%2].purge(sel) // published by either node, one log
		s, err := purge.Parse([]byte(sel), other.p.settings.Load().chains)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, naming.SelectorTags(s, func(string) int64 { return 0 }, 0)...)
	}
	testkit.WaitFor(t, "every node to queue the 500 purges", func() bool {
		return edges[holder].p.cdn.Pending() >= 500 && other.p.cdn.Pending() >= 500
	})
	edges[holder].node.Close(context.Background())
	cdnAPI.open.Store(true)
	testkit.WaitFor(t, "the other node to send them all", func() bool { return other.p.cdn.Pending() == 0 })
	got := slices.Compact(cdnAPI.got())
	if !slices.Equal(got, want) {
		t.Fatalf("the CDN got %d purges (without repeats), want the 500 of the log in order; first %v", len(got), got[:min(5, len(got))])
	}
}
