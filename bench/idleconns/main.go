// Command idleconns measures what idle keep-alive connections cost a
// server: it opens -n connections to -url, asks one GET on each, reads the
// whole answer and keeps them open, then prints the growth of -pid's RSS
// per connection.
//
//	go run ./bench/idleconns -url http://127.0.0.1:8080/api/v5/... -n 3000 -pid 1234
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"time"

	"explorer-edge/internal/procstat"

	"github.com/valyala/fasthttp"
)

func main() {
	target := flag.String("url", "", "URL to ask on every connection")
	n := flag.Int("n", 3000, "connections")
	pid := flag.Int("pid", 0, "server process to measure")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" || *pid == 0 {
		log.Fatal("usage: idleconns -url http://host:port/path -pid PID [-n N]")
	}
	before := rssKiB(*pid)
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	conns := make([]net.Conn, 0, *n)
	size := 0
	for range *n {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			log.Fatalf("after %d connections: %v", len(conns), err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(req)); err != nil {
			log.Fatal(err)
		}
		var res fasthttp.Response
		if err := res.Read(bufio.NewReader(c)); err != nil {
			log.Fatal(err)
		}
		if res.StatusCode() != 200 {
			log.Fatalf("status %d: %s", res.StatusCode(), res.Body())
		}
		size = len(res.Body())
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // let the server settle after the last answer
	after := rssKiB(*pid)
	fmt.Printf("%d idle keep-alive connections, one %d-byte answer each: RSS %.1f -> %.1f MiB, %.1f KiB per connection\n",
		len(conns), size, float64(before)/1024, float64(after)/1024, float64(after-before)/float64(len(conns)))
	for _, c := range conns {
		c.Close()
	}
}

func rssKiB(pid int) int {
	kib, err := procstat.KB(pid, "VmRSS")
	if err != nil {
		log.Fatal(err)
	}
	return int(kib)
}
