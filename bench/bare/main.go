// Command bare is the reference point of bench/compare: a fasthttp server
// that answers every request with one fixed body and nothing else (no
// routing, validation, cache lookup, metrics or extra headers), with the
// edge's write buffer (32 KB) and GOMAXPROCS. What the edge loses against
// it is the cost of the edge's own work on a hit; what it loses beyond that
// against nginx is the cost of Go's and fasthttp's I/O path.
//
//	go run ./bench/bare -listen 127.0.0.1:8091 -body answer.json -gomaxprocs 1
package main

import (
	"flag"
	"log"
	"os"
	"runtime"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8091", "address to listen on")
	bodyFile := flag.String("body", "", "file whose bytes every answer carries (default: 8 KB of JSON)")
	procs := flag.Int("gomaxprocs", 0, "GOMAXPROCS; 0 = Go's default")
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
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.SetContentTypeBytes(ct)
			ctx.Response.SetBodyRaw(body)
		},
		Name:                 "bare",
		WriteBufferSize:      32 << 10,
		NoDefaultContentType: true,
	}
	log.Fatal(srv.ListenAndServe(*listen))
}
