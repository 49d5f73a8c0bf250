package main

import (
	"slices"
	"strings"
	"testing"
)

// TestRan: of `go tool covdata func` output, only the module's functions
// that ran count (above 0%), without explorer-sim, metrics, tcpio and
// this command, and files and packages are counted distinct.
func TestRan(t *testing.T) {
	out := `explorer-edge/proxy/proxy.go:100:	*Proxy.Handle		100.0%
explorer-edge/proxy/proxy.go:140:	*Proxy.handle		12.5%
explorer-edge/proxy/proxy.go:200:	*Proxy.fill		0.0%
explorer-edge/proxy/write.go:10:	*Proxy.writeEntry	3.2%
explorer-edge/proxy/route/memo.go:20:	*Memo.Lookup		50.0%
explorer-edge/cache/cache.go:30:	*Cache.GetString	100.0%
explorer-edge/sim/sim.go:40:	*Server.ServeHTTP	100.0%
explorer-edge/metrics/metrics.go:50:	*Metrics.Request	100.0%
explorer-edge/tcpio/conn.go:60:	*Conn.Read		100.0%
explorer-edge/bench/path/main.go:70:	main			100.0%
github.com/valyala/fasthttp/server.go:80:	*Server.Serve	100.0%
total:					(statements)	8.1%
`
	ran := Ran(strings.NewReader(out))
	var names []string
	for _, f := range ran {
		names = append(names, f.Name)
	}
	want := []string{"*Proxy.Handle", "*Proxy.handle", "*Proxy.writeEntry", "*Memo.Lookup", "*Cache.GetString"}
	if !slices.Equal(names, want) {
		t.Errorf("ran %v, want %v", names, want)
	}
	if files := Files(ran); len(files) != 4 {
		t.Errorf("files %v, want 4", files)
	}
	if pkgs := Packages(ran); !slices.Equal(pkgs, []string{"explorer-edge/proxy", "explorer-edge/proxy/route", "explorer-edge/cache"}) {
		t.Errorf("packages %v", pkgs)
	}
	if l := Listing(ran); !strings.Contains(l, "  proxy/proxy.go: *Proxy.Handle *Proxy.handle\n") {
		t.Errorf("listing:\n%s", l)
	}
}
