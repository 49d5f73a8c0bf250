//go:build pprof

// Built only with -tags pprof, to profile the hit path under wrk
// (bench/README.md): net/http/pprof on the address in PPROF_ADDR (not an
// EDGE_ variable: those are config keys). The shipped binary has none.
package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("PPROF_ADDR"); addr != "" {
		go http.ListenAndServe(addr, nil)
	}
}
