package sim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkRoutes measures the handler alone (no socket) per route, to know
// how fast the sim can feed the proxy's miss path.
func BenchmarkRoutes(b *testing.B) {
	s := New(Config{Now: newClock().Now})
	head := s.Head("CHAINX")
	for _, q := range []string{
		"/api/v5/chainx/block/block-list?chainShortName=CHAINX",
		fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d", head-10),
		"/api/v5/chainx/token/position-list?chainShortName=CHAINX&tokenContractAddress=" + s.TokenContracts("CHAINX")[0],
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + join(s.CrossHashes("TRADE_ZONE", 20)),
		"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&txId=" + join(s.InternalTxHashes("CHAINX", 20)),
	} {
		req := httptest.NewRequest("GET", q, nil)
		b.Run(s.routes[req.URL.Path].name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				s.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
