package main

import (
	"strings"
	"testing"

	"explorer-edge/config"
)

// server.max_conns is lowered to what the descriptor limit holds beside
// the admin cap, the upstream pool and the process's own descriptors.
func TestFitDescriptors(t *testing.T) {
	f := func(nofile uint64, maxConns, wantConns, wantLowered int, wantErr string) {
		t.Helper()
		cfg := config.Default() // admin_max_conns 64, upstream.max_conns 64
		cfg.Server.MaxConns = maxConns
		lowered, err := fitDescriptors(&cfg, nofile)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("nofile %d: error %v, want %q", nofile, err, wantErr)
			}
			return
		}
		if err != nil || cfg.Server.MaxConns != wantConns || lowered != wantLowered {
			t.Errorf("nofile %d, max_conns %d: max_conns %d, lowered %d, %v; want %d, %d", nofile, maxConns,
				cfg.Server.MaxConns, lowered, err, wantConns, wantLowered)
		}
	}
	f(0, 10000, 10000, 0, "")          // limit unknown: unchecked
	f(1048576, 10000, 10000, 0, "")    // the usual container limit
	f(10192, 10000, 10000, 0, "")      // exactly enough
	f(10191, 10000, 9999, 10000, "")   // one short
	f(1024, 10000, 832, 10000, "")     // a common default soft limit
	f(256, 10000, 64, 10000, "")       // the test's
	f(193, 10000, 1, 10000, "")        // one public connection left
	f(192, 10000, 0, 0, "cannot hold") // none
	f(64, 10000, 0, 0, "ulimit -n")    // says how to fix it
}
