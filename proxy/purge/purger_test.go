package purge

import (
	"log/slog"
	"testing"
	"time"

	"explorer-edge/cache"
	"explorer-edge/metrics"
	"explorer-edge/proxy/route"
)

// TestPurgeBetweenVerdictAndStore: a purge logged after an answer's
// verdict but before its store waits for the store, then removes it: the
// answer is never left in memory by the purge that should have removed it.
// (Without the ordering, the purge scanned memory before the answer was in
// it, and the answer stayed.)
func TestPurgeBetweenVerdictAndStore(t *testing.T) {
	c, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	chains := []string{"CHAINX"}
	p := New(c, Options{Metrics: metrics.New(route.Names(), chains, c), Logger: slog.New(slog.DiscardHandler),
		Clock: clock, Chains: chains, InFlight: func() time.Duration { return time.Minute }, Retain: func() time.Duration { return time.Hour }})
	sel, perr := Parse([]byte(`{"all":true}`), chains)
	if perr != nil {
		t.Fatal(perr)
	}
	e := cache.NewEntry("k", []byte(`{"code":"0","data":[]}`), cache.Final, now.Add(-time.Second), time.Hour, 0, 0)
	purged := make(chan struct{})
	p.Admit(e, now.Add(-time.Minute).UnixNano(), false, func(e *cache.Entry) {
		go func() { p.Purge(sel); close(purged) }()
		select {
		case <-purged:
			// The purge ran to its end between the verdict and the store.
		case <-time.After(time.Second):
			// It waits for this store, as it must.
		}
		c.Set(e, now)
	})
	<-purged
	if c.GetString("k") != nil {
		t.Fatal("an answer stored after the purge's scan, judged before the purge was logged, stayed in memory")
	}
}
