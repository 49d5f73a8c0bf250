package cache_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	brrr "github.com/molecule-man/go-brrr"

	"explorer-edge/cache"
	"explorer-edge/sim"
)

// routeAnswers asks an in-process explorer-sim for n settled answers of
// each of the six routes, with their default limits.
func routeAnswers(b *testing.B, n int) (names []string, answers map[string][][]byte) {
	s := sim.New(sim.Config{})
	const chain = "CHAINX"
	head := s.FinalizedHeight(chain)
	cross := s.CrossHashes(chain, 8*n)
	internal := s.InternalTxHashes(chain, 4*n)
	tokens := s.TokenContracts(chain)
	paths := map[string]func(i int) string{
		"position-list": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/token/position-list?chainShortName=%s&tokenContractAddress=%s&page=%d", chain, tokens[i%len(tokens)], 1+i/len(tokens))
		},
		"block-list": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/block/block-list?chainShortName=%s&height=%d", chain, head-int64(i)*20)
		},
		"transaction-list": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=%s&height=%d", chain, head-int64(i))
		},
		"transaction-multi": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/tz/cross/transaction-multi?chainShortName=%s&txId=%s", chain, strings.Join(cross[8*i:8*i+8], ","))
		},
		"transaction-fills": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/tz/cross/transaction-fills?chainShortName=%s&txid=%s", chain, cross[i])
		},
		"internal-transaction-multi": func(i int) string {
			return fmt.Sprintf("/api/v5/chainx/transaction/internal-transaction-multi?chainShortName=%s&txId=%s", chain, strings.Join(internal[4*i:4*i+4], ","))
		},
	}
	names = []string{"position-list", "block-list", "transaction-list", "transaction-multi", "transaction-fills", "internal-transaction-multi"}
	answers = map[string][][]byte{}
	for _, name := range names {
		for i := range n {
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, httptest.NewRequest("GET", paths[name](i), nil))
			if w.Code != 200 || !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"code":"0"`)) {
				b.Fatalf("%s: %d %.200s", name, w.Code, w.Body.Bytes())
			}
			answers[name] = append(answers[name], bytes.Clone(w.Body.Bytes()))
		}
	}
	return names, answers
}

// BenchmarkEntryBytes stores realistic answers of every route as the edge
// does (cache.NewEntry: compressed once) and reports, per entry, the
// identity body (body-B), the cache bytes the entry holds and is
// accounted for (held-B: Entry.Cost) and what it held when an entry kept
// its body and a gzip copy (was-B). ns/op is the store cost, compression
// included.
//
//	go test -run '^$' -bench EntryBytes -benchmem ./cache
func BenchmarkEntryBytes(b *testing.B) {
	names, answers := routeAnswers(b, 50)
	now := time.Now()
	for _, name := range names {
		b.Run(name, func(b *testing.B) {
			bodies := answers[name]
			var body, held, was int64
			for _, a := range bodies {
				e := cache.NewEntry("/api/v5/chainx/"+name+"?chainShortName=CHAINX&k=00000000", a, cache.Final, now, time.Hour, 0, 0)
				body += int64(len(a))
				held += e.Cost()
				if e.Gzip != nil {
					was += e.Cost() + int64(len(a))
				} else {
					was += e.Cost()
				}
			}
			n := float64(len(bodies))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				cache.NewEntry(name, bodies[i%len(bodies)], cache.Final, now, time.Hour, 0, 0)
				i++
			}
			b.ReportMetric(float64(body)/n, "body-B")
			b.ReportMetric(float64(held)/n, "held-B")
			b.ReportMetric(float64(was)/n, "was-B")
		})
	}
}

// codec is one way to compress answers, for BenchmarkEncodings.
type codec struct {
	name    string
	encode  func(dst *bytes.Buffer, body []byte)
	inflate func(z []byte) []byte
}

func codecs() []codec {
	gz := func(level int) func(*bytes.Buffer, []byte) {
		zw, _ := gzip.NewWriterLevel(nil, level)
		return func(dst *bytes.Buffer, body []byte) {
			zw.Reset(dst)
			zw.Write(body)
			zw.Close()
		}
	}
	zr := new(gzip.Reader)
	gunzip := func(z []byte) []byte {
		zr.Reset(bytes.NewReader(z))
		out, _ := io.ReadAll(zr)
		return out
	}
	br := func(q int) func(*bytes.Buffer, []byte) {
		w, _ := brrr.NewWriter(nil, q)
		return func(dst *bytes.Buffer, body []byte) {
			w.Reset(dst)
			w.Write(body)
			w.Close()
		}
	}
	brr := brrr.NewReader(nil)
	unbr := func(z []byte) []byte {
		brr.Reset(bytes.NewReader(z))
		out, _ := io.ReadAll(brr)
		return out
	}
	zs := func(l zstd.EncoderLevel) func(*bytes.Buffer, []byte) {
		w, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1))
		return func(dst *bytes.Buffer, body []byte) {
			dst.Write(w.EncodeAll(body, dst.AvailableBuffer()))
		}
	}
	zd, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	unzs := func(z []byte) []byte {
		out, _ := zd.DecodeAll(z, nil)
		return out
	}
	return []codec{
		{"gzip-1", gz(1), gunzip}, // what the edge stores
		{"gzip-6", gz(6), gunzip},
		{"gzip-9", gz(9), gunzip},
		{"br-4", br(4), unbr},
		{"br-6", br(6), unbr},
		{"br-11", br(11), unbr},
		{"zstd-1", zs(zstd.SpeedFastest), unzs},
		{"zstd-3", zs(zstd.SpeedDefault), unzs},
	}
}

// BenchmarkEncodings decides whether a second encoding for browsers (br
// or zstd, made once at store time) earns its bytes: per route and codec,
// the bytes on the wire (wire-B, mean per answer), the store cost (ns/op:
// compressing one answer) and the cost of decoding it (decode-ns, what a
// browser pays). The edge's choice, gzip-1, is the first row.
//
//	go test -run '^$' -bench Encodings ./cache
func BenchmarkEncodings(b *testing.B) {
	names, answers := routeAnswers(b, 20)
	for _, name := range names {
		for _, c := range codecs() {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				bodies := answers[name]
				var wire int64
				var decode time.Duration
				var dst bytes.Buffer
				for _, a := range bodies {
					dst.Reset()
					c.encode(&dst, a)
					wire += int64(dst.Len())
					z := bytes.Clone(dst.Bytes())
					start := time.Now()
					for range 20 {
						if out := c.inflate(z); !bytes.Equal(out, a) {
							b.Fatalf("%s does not round-trip", c.name)
						}
					}
					decode += time.Since(start) / 20
				}
				i := 0
				for b.Loop() {
					dst.Reset()
					c.encode(&dst, bodies[i%len(bodies)])
					i++
				}
				n := float64(len(bodies))
				b.ReportMetric(float64(wire)/n, "wire-B")
				b.ReportMetric(float64(decode.Nanoseconds())/n, "decode-ns")
			})
		}
	}
}
