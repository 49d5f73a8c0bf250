package proxy

import (
	"bytes"
	"fmt"
	"testing"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// TestPlainConnsServeTheSame: with server.plain_conns the edge serves plain
// net.Conns (no tcpio) and every answer is what the tuned path sends: small
// and large bodies, gzip, 304, errors, over keep-alive connections.
func TestPlainConnsServeTheSame(t *testing.T) {
	tuned := newHarness(t)
	plain := newHarness(t, func(c *config.Config, _ *sim.Config) { c.Server.PlainConns = true })
	if got := plain.p.NewServer(plain.cfg.Server).WriteBufferSize; got != 0 {
		t.Fatalf("plain_conns: write buffer %d, want fasthttp's default", got)
	}
	final := tuned.sim.FinalizedHeight("CHAINX")
	targets := []string{
		"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=1",
		"/api/v5/chainx/block/block-list?chainShortName=chainx&limit=100", // about 48 KB
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d&limit=100", final-3),
		"/api/v5/chainx/block/block-list?chainShortName=nochain",
	}
	for _, target := range targets {
		for _, hdr := range [][]string{nil, {"Accept-Encoding", "gzip"}} {
			for range 2 { // a miss, then a hit
				a, b := tuned.get(target, hdr...), plain.get(target, hdr...)
				if a.status != b.status || !bytes.Equal(a.body, b.body) || a.header["Etag"] != b.header["Etag"] {
					t.Fatalf("%s %v: tuned %d (%d bytes), plain %d (%d bytes)", target, hdr, a.status, len(a.body), b.status, len(b.body))
				}
			}
			if etag := plain.get(target, hdr...).header["Etag"]; etag != "" {
				if r := plain.get(target, append([]string{"If-None-Match", etag}, hdr...)...); r.status != 304 {
					t.Fatalf("plain_conns: If-None-Match %d", r.status)
				}
			}
		}
	}
}
