package proxy

import (
	"bytes"
	"strings"
	"testing"
)

// TestFleetPerHashSharedHitSaysShared: a per-hash route answered from items
// another node put in Redis says detail=shared in Cache-Status, as a
// whole-key route does; asked again on that node it is a plain hit.
func TestFleetPerHashSharedHitSaysShared(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 3)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 3)
	multi := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes, ",")
	fills := "/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hashes[1]
	first := edges[0].get(multi)
	if first.status != 200 || !strings.Contains(first.header["Cache-Status"], "fwd=miss") {
		t.Fatalf("first node: %d %q %s", first.status, first.header["Cache-Status"], first.body)
	}
	calls := h.upstreamCalls()
	for _, c := range []struct {
		name   string
		edge   *fleetEdge
		target string
	}{
		{"transaction-multi on another node", edges[1], multi},
		{"transaction-fills on a third node", edges[2], fills},
	} {
		r := c.edge.get(c.target)
		cs := r.header["Cache-Status"]
		if r.status != 200 || !strings.HasPrefix(cs, "explorer-edge; hit; ttl=") || !strings.HasSuffix(cs, "; detail=shared") {
			t.Errorf("%s: %d Cache-Status %q, want a hit with detail=shared", c.name, r.status, cs)
		}
		if c.target == multi && !bytes.Equal(r.body, first.body) {
			t.Errorf("%s: body differs from the first node's", c.name)
		}
		// Now in the node's own cache: a plain hit.
		if again := c.edge.get(c.target).header["Cache-Status"]; !strings.HasPrefix(again, "explorer-edge; hit") || strings.Contains(again, "shared") {
			t.Errorf("%s, asked again: Cache-Status %q, want a plain hit", c.name, again)
		}
	}
	if n := h.upstreamCalls() - calls; n != 0 {
		t.Fatalf("answers from the shared tier cost %d upstream calls", n)
	}
}
