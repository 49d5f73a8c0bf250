package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/sim"
)

// TestCacheHoldsThreeTimesTheAnswers fills an edge whose cache.max_bytes
// is 8 MiB with 3,000 distinct settled transaction-list pages of about
// 10 KB. Each answer held twice (its body and a gzip copy) left about 600
// entries, some 14 KB of cache per answer; held once, compressed, at
// least three times as many must stay.
func TestCacheHoldsThreeTimesTheAnswers(t *testing.T) {
	h := newHarness(t, func(cfg *config.Config, _ *sim.Config) { cfg.Cache.MaxBytes = 8 << 20 })
	h.get("/api/v5/chainx/block/block-list?chainShortName=chainx") // learn the finalized height
	final := h.p.truth.Final("CHAINX")
	const pages = 3000
	var next, bodyBytes atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < pages; i = next.Add(1) - 1 {
				r := h.get(fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&limit=20&height=%d", final-i))
				if r.status != 200 || r.code() != "0" {
					t.Errorf("page %d: %d %s", i, r.status, r.body)
					return
				}
				bodyBytes.Add(int64(len(r.body)))
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	mean := bodyBytes.Load() / pages
	entries, held := h.cache.Entries(), h.cache.Bytes()
	t.Logf("%d pages of %d bytes on average into 8 MiB: %d entries held, %d bytes of cache per entry",
		pages, mean, entries, held/max(entries, 1))
	if mean < 9000 {
		t.Fatalf("pages of %d bytes on average: not the answers this test is about", mean)
	}
	if entries < 3*600 {
		t.Fatalf("%d entries held, want at least 1,800 (3 x 600)", entries)
	}
}

// TestEveryRepresentationIsTheUpstreamsAnswer asks for settled answers of
// every route as a gzip client, as a client that takes no gzip (often
// enough that the answer earns an identity copy), and with HEAD, and
// compares each with what explorer-sim says now. Each representation has
// its own validator, and a client holding it gets 304.
func TestEveryRepresentationIsTheUpstreamsAnswer(t *testing.T) {
	for _, copies := range []int64{0, -1} {
		t.Run(fmt.Sprintf("identity_bytes=%d", copies), func(t *testing.T) {
			h := newHarness(t, func(cfg *config.Config, _ *sim.Config) { cfg.Cache.IdentityBytes = copies })
			h.get("/api/v5/chainx/block/block-list?chainShortName=chainx")
			final := h.p.truth.Final("CHAINX")
			cross := h.sim.CrossHashes("CHAINX", 6)
			internal := h.sim.InternalTxHashes("CHAINX", 4)
			targets := []string{
				fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=CHAINX&height=%d&limit=20&page=1", final-50),
				fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&limit=20&page=1&protocolType=transaction", final-50),
				"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=CHAINX&txId=" + join(cross[:6]),
				"/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=CHAINX&limit=20&page=1&txId=" + join(internal[:4]),
			}
			for _, target := range targets {
				want := h.simGet(target)
				gz := h.get(target, "Accept-Encoding", "gzip")
				if gz.status != 200 || gz.header["Content-Encoding"] != "gzip" {
					t.Fatalf("%s as gzip: %d, Content-Encoding %q", target, gz.status, gz.header["Content-Encoding"])
				}
				zr, err := gzip.NewReader(bytes.NewReader(gz.body))
				if err != nil {
					t.Fatal(err)
				}
				plain, err := io.ReadAll(zr)
				if err != nil || !bytes.Equal(plain, want) {
					t.Fatalf("%s: the gzip answer is not the upstream's (%v)", target, err)
				}
				var id resp
				for range 20 { // past the asks that earn an identity copy
					id = h.get(target)
					if id.status != 200 || id.header["Content-Encoding"] != "" || !bytes.Equal(id.body, want) {
						t.Fatalf("%s identity: %d, Content-Encoding %q, equal %v", target, id.status, id.header["Content-Encoding"], bytes.Equal(id.body, want))
					}
				}
				head := h.do("HEAD", target)
				if head.status != 200 || len(head.body) != 0 || head.header["Content-Length"] != fmt.Sprint(len(want)) {
					t.Fatalf("%s HEAD: %d, %d bytes, Content-Length %q, want %d", target, head.status, len(head.body), head.header["Content-Length"], len(want))
				}
				if id.header["Etag"] == gz.header["Etag"] || id.header["Etag"] == "" {
					t.Fatalf("%s: ETag identity %q, gzip %q", target, id.header["Etag"], gz.header["Etag"])
				}
				if r := h.get(target, "If-None-Match", id.header["Etag"]); r.status != 304 {
					t.Fatalf("%s: identity validator: %d", target, r.status)
				}
				if r := h.get(target, "Accept-Encoding", "gzip", "If-None-Match", gz.header["Etag"]); r.status != 304 {
					t.Fatalf("%s: gzip validator: %d", target, r.status)
				}
			}
			if copies < 0 && h.cache.IdentityBytes() != 0 {
				t.Fatalf("identity copies of %d bytes with identity_bytes -1", h.cache.IdentityBytes())
			}
			if copies == 0 && h.cache.IdentityBytes() == 0 {
				t.Fatal("no identity copy after 20 asks of each answer")
			}
		})
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

// TestLargeAnswersStreamToIdentityClients: an answer of about 1 MB, held
// compressed, is sent whole to gzip and identity clients alike, and a
// client taking no gzip is sent it inflated as it is written, when it has
// no identity copy: a request does not allocate the answer's size.
func TestLargeAnswersStreamToIdentityClients(t *testing.T) {
	var big []byte
	{
		var b bytes.Buffer
		b.WriteString(`{"code":"0","msg":"","data":[{"page":"1","limit":"99","totalPage":"1","blockList":[`)
		for i := 0; b.Len() < 1<<20; i++ {
			fmt.Fprintf(&b, `{"hash":"0x%064x","height":"%d","state":"done"},`, uint64(i)*0x9e3779b97f4a7c15, 1000+i)
		}
		b.WriteString(`{"hash":"0x0","height":"1","state":"done"}]}]}`)
		big = b.Bytes()
	}
	h := newHarnessWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("limit") == "99" {
				w.Header().Set("Content-Type", "application/json")
				w.Write(big)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, func(cfg *config.Config, _ *sim.Config) { cfg.Cache.IdentityBytes = -1 }) // else a hot answer has a copy, sent as is
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=99&height=1000"
	gz := h.get(target, "Accept-Encoding", "gzip")
	zr, err := gzip.NewReader(bytes.NewReader(gz.body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, big) {
		t.Fatalf("gzip answer: %v, equal %v", err, bytes.Equal(plain, big))
	}
	for range 3 {
		if id := h.get(target); id.status != 200 || !bytes.Equal(id.body, big) {
			t.Fatalf("identity answer: %d, %d bytes, want %d", id.status, len(id.body), len(big))
		}
	}
	if head := h.do("HEAD", target); head.status != 200 || head.header["Content-Length"] != fmt.Sprint(len(big)) {
		t.Fatalf("HEAD: %d, Content-Length %q", head.status, head.header["Content-Length"])
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(target)
	ctx.Request.Header.SetMethod("GET")
	serve := func() {
		ctx.Response.Reset()
		h.p.Handle(&ctx)
		if !ctx.Response.IsBodyStream() { // else each connection's buffer grows to 1 MB
			t.Fatal("the identity answer is inflated whole into the response, not as it is written")
		}
		var n countWriter
		if err := ctx.Response.BodyWriteTo(&n); err != nil || int(n) != len(big) {
			t.Fatalf("streamed %d bytes (%v), want %d", n, err, len(big))
		}
	}
	for range 5 {
		serve()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		serve()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 20; per > uint64(len(big))/8 {
		t.Fatalf("%d bytes allocated per identity request of a %d-byte answer", per, len(big))
	}
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
