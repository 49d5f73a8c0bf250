package route

import (
	"strings"
	"testing"
	"time"

	"explorer-edge/config"
)

// TestRouteTableTTLs: the route table is the one place a route's default
// fresh times are declared; every route has one, cache.ttl may name only
// routes of the table, and an override leaves the other classes be.
func TestRouteTableTTLs(t *testing.T) {
	for i := range Table {
		if Table[i].ttl.Shortest() <= 0 {
			t.Errorf("route %s has no default TTL", Table[i].Name)
		}
		if ByPath([]byte(Table[i].Path)) != &Table[i] || ByName(Table[i].Name) != &Table[i] {
			t.Errorf("route %s is not found by its path and name", Table[i].Name)
		}
	}
	cfg := config.Default()
	cfg.Cache.TTL = map[string]config.PerClass{"block-list": {Head: 3 * time.Second}, "transaction-list": {Final: time.Hour}}
	if err := CheckConfig(&cfg); err != nil {
		t.Fatalf("overrides of known routes: %v", err)
	}
	if got := TTLs(&Table[TransactionList], cfg.Cache.TTL); got.Head != time.Second || got.Final != time.Hour {
		t.Fatalf("transaction-list with final overridden: %+v", got)
	}
	cfg.Cache.TTL["no-such-route"] = config.PerClass{Head: time.Second}
	cfg.Cache.TTL["position-list"] = config.PerClass{}
	err := CheckConfig(&cfg)
	if err == nil || !strings.Contains(err.Error(), "cache.ttl.no-such-route: unknown route (known: position-list, block-list") {
		t.Fatalf("unknown route: %v", err)
	}
}
