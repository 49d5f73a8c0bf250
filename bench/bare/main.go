// Command bare is the reference point of bench/compare: a fasthttp server
// that answers every request with one fixed body and nothing else (no
// routing, validation, cache lookup, metrics or extra headers), with a
// 32 KB write buffer (the edge's own is 1 KB on tcpio.Conns, 4 KB with
// server.plain_conns) and the edge's GOMAXPROCS. What the edge loses against
// it is the cost of the edge's own work on a hit; what it loses beyond that
// against nginx is the cost of Go's and fasthttp's I/O path.
//
// Two flags add the edge's work back one piece at a time (bench/compare,
// BARE_STEPS=1): -timeouts sets the edge's default server timeouts (10 s
// read and write, 60 s idle: three socket deadlines per request), and
// -headers also sets the five headers the edge adds to a hit
// (Cache-Status, Cache-Control, Age, ETag, Vary), as the edge does.
//
//	go run ./bench/bare -listen 127.0.0.1:8091 -body answer.json -gomaxprocs 1
package main

import (
	"flag"
	"log"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8091", "address to listen on")
	bodyFile := flag.String("body", "", "file whose bytes every answer carries (default: 8 KB of JSON)")
	procs := flag.Int("gomaxprocs", 0, "GOMAXPROCS; 0 = Go's default")
	timeouts := flag.Bool("timeouts", false, "the edge's default read, write and idle timeouts")
	headers := flag.Bool("headers", false, "the five headers the edge adds to a hit")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	body := []byte(`{"code":"0","msg":"","data":[]}`)
	if *bodyFile != "" {
		var err error
		if body, err = os.ReadFile(*bodyFile); err != nil {
			log.Fatal(err)
		}
	} else {
		for len(body) < 8<<10 {
			body = append(body, ' ')
		}
	}
	ct := []byte("application/json")
	var scratch []byte
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			h := &ctx.Response.Header
			if *headers { // as proxy.writeEntry sets them, values built per request
				scratch = strconv.AppendInt(append(scratch[:0], "explorer-edge; hit; ttl="...), 86399, 10)
				h.SetCanonical(hdrCacheStatus, scratch)
				scratch = strconv.AppendInt(append(scratch[:0], "public, max-age="...), 86399, 10)
				h.SetCanonical(hdrCacheControl, scratch)
				h.SetCanonical(hdrAge, strconv.AppendInt(scratch[:0], 0, 10))
				h.SetCanonical(hdrETag, etag)
				h.SetCanonical(hdrVary, valAcceptEncoding)
			}
			h.SetContentTypeBytes(ct)
			ctx.Response.SetBodyRaw(body)
		},
		Name:                 "bare",
		WriteBufferSize:      32 << 10,
		NoDefaultContentType: true,
	}
	if *timeouts { // config.Default()'s server timeouts
		srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = 10*time.Second, 10*time.Second, 60*time.Second
	}
	log.Fatal(srv.ListenAndServe(*listen))
}

var (
	hdrCacheStatus    = []byte("Cache-Status")
	hdrCacheControl   = []byte("Cache-Control")
	hdrAge            = []byte("Age")
	hdrETag           = []byte("ETag")
	hdrVary           = []byte("Vary")
	valAcceptEncoding = []byte("Accept-Encoding")
	etag              = []byte(`"0a6fda0590f9cbd2"`)
)
