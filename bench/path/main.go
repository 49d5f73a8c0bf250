// Command path prints what one question runs through the edge: for a hit
// (on a URI the edge remembers), a whole-key miss and a per-hash miss of
// three hashes, the module's functions, files and packages that ran,
// measured by clearing Go's coverage counters just before the request and
// reading them just after it answered. explorer-sim answers in-process;
// its functions, the metrics package and tcpio are not counted (the
// issue's measure), nor this command. An idle row is the same measure
// with no request: what the edge's own goroutines (pollers, samplers,
// timers) ran meanwhile, counted in every row too. A function literal
// counts as the function it is written in (covdata's attribution): the
// breaker's IsSuccessful shows as newAccount.
//
// Counters say what ran, not in which order: the columns "returns to a
// file already left" and "calls into an earlier file that is not the
// caller" cannot be derived from them and are not printed.
//
// It must be built with coverage of the module (make path does):
//
//	go build -cover -covermode=atomic -coverpkg=explorer-edge/... -o /tmp/edge-path ./bench/path
//	GOCOVERDIR=$(mktemp -d) /tmp/edge-path [-list]
//
// -list also prints, per path, every function that ran, by file.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"runtime/coverage"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/proxy"
	"explorer-edge/proxy/node"
	"explorer-edge/sim"
)

func main() {
	listing := flag.Bool("list", false, "print every function that ran, by file")
	flag.Parse()
	if err := coverage.ClearCounters(); err != nil {
		log.Fatalf("built without coverage of the module (make path builds it): %v", err)
	}
	tmp, err := os.MkdirTemp("", "edge-path")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	e, err := start()
	if err != nil {
		log.Fatal(err)
	}
	defer e.close()

	hashes := e.sim.CrossHashes("TRADE_ZONE", 6)
	// Settled heights: their answers are final, held for a day.
	final := e.sim.FinalizedHeight("CHAINX")
	list := func(h int64) string {
		return "/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&limit=20&height=" + strconv.FormatInt(h, 10)
	}
	hit, whole := list(final-5), list(final-6)
	perHash := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes[3:6], ",")
	// The hit's URI asked until the edge remembers it; the per-hash
	// route's path warmed by other hashes, so that the measured miss is
	// of its three hashes, not the route's first use.
	for range 3 {
		e.get(hit)
	}
	e.get("/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.Join(hashes[0:3], ","))
	e.get(list(final - 7))

	rows := []struct {
		name, uri, want string
	}{
		{"idle (no request)", "", ""},
		{"hit, remembered URI", hit, "hit"},
		{"whole-key miss", whole, "fwd=miss"},
		{"per-hash miss (3 hashes)", perHash, "fwd=miss"},
	}
	fmt.Println("| path | functions | files | packages |")
	fmt.Println("|---|---|---|---|")
	var lists []string
	for i, r := range rows {
		dir := path.Join(tmp, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			log.Fatal(err)
		}
		if err := coverage.ClearCounters(); err != nil {
			log.Fatal(err)
		}
		if r.uri == "" {
			time.Sleep(50 * time.Millisecond) // a window as long as a miss, for the background's share
		} else if cs := e.get(r.uri); !strings.Contains(cs, r.want) {
			log.Fatalf("%s: Cache-Status %q, want %q", r.name, cs, r.want)
		}
		if err := coverage.WriteCountersDir(dir); err != nil {
			log.Fatal(err)
		}
		if err := coverage.WriteMetaDir(dir); err != nil {
			log.Fatal(err)
		}
		out, err := exec.Command("go", "tool", "covdata", "func", "-i="+dir).Output()
		if err != nil {
			log.Fatalf("go tool covdata func: %v", err)
		}
		ran := Ran(bytes.NewReader(out))
		fmt.Printf("| %s | %d | %d | %d |\n", r.name, len(ran), len(Files(ran)), len(Packages(ran)))
		if *listing {
			lists = append(lists, "\n"+r.name+":\n"+Listing(ran))
		}
	}
	fmt.Println("\nCounted: functions of module explorer-edge with a counter above zero, but explorer-sim (sim/), metrics/, tcpio/ and bench/.")
	fmt.Println("Not measured: the order of execution (returns to a file already left, calls into an earlier file): coverage counters do not record it.")
	for _, l := range lists {
		fmt.Print(l)
	}
}

// Func is a function that ran: its file (module path) and name.
type Func struct{ File, Name string }

// excluded are the module's packages not counted, by prefix.
var excluded = []string{"explorer-edge/sim/", "explorer-edge/metrics/", "explorer-edge/tcpio/", "explorer-edge/bench/"}

// Ran reads `go tool covdata func` output (file:line:<tab>name<tab>pct%)
// and returns the counted functions whose coverage is above zero.
func Ran(r io.Reader) []Func {
	var out []Func
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || !strings.HasSuffix(f[2], "%") {
			continue // the "total" line, or anything else
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[2], "%"), 64)
		if err != nil || pct == 0 {
			continue
		}
		file, _, _ := strings.Cut(f[0], ":")
		if !strings.HasPrefix(file, "explorer-edge/") || slices.ContainsFunc(excluded, func(p string) bool { return strings.HasPrefix(file, p) }) {
			continue
		}
		out = append(out, Func{File: file, Name: f[1]})
	}
	return out
}

// Files are the distinct files of fs.
func Files(fs []Func) []string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.File) {
			out = append(out, f.File)
		}
	}
	return out
}

// Packages are the distinct packages (directories) of fs.
func Packages(fs []Func) []string {
	var out []string
	for _, f := range Files(fs) {
		if d := path.Dir(f); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Listing is fs by file, one line per file: "file: f1 f2 ...".
func Listing(fs []Func) string {
	var b strings.Builder
	for _, file := range Files(fs) {
		b.WriteString("  " + strings.TrimPrefix(file, "explorer-edge/") + ":")
		for _, f := range fs {
			if f.File == file {
				b.WriteString(" " + f.Name)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// edge is explorer-sim and an edge in front of it, on loopback ports.
type edge struct {
	sim  *sim.Server
	hs   *http.Server
	node *node.Node
	addr string // the node's public address (read once: Node.Addr is module code)
	hc   fasthttp.Client
}

func start() (*edge, error) {
	// Without the sim's auth: it would verify the edge's signature with
	// package signer, whose functions would count as the edge's.
	e := &edge{sim: sim.New(sim.Config{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.hs = &http.Server{Handler: e.sim.Handler()}
	go e.hs.Serve(ln)
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://" + ln.Addr().String()
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = sim.DemoAPIKey, sim.DemoSecretKey, sim.DemoPassphrase
	cfg.Upstream.Rate, cfg.Upstream.Burst = 1000, 1000
	// Never listened on: Start is given listeners on free ports.
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:1"
	cfg.Log.Level = "error"
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if e.node, err = proxy.Start(cfg, node.Options{NoSelfCheck: true, Listener: pub, AdminListener: admin}); err != nil {
		return nil, err
	}
	e.addr = e.node.Addr()
	return e, nil
}

// get asks uri and returns the answer's Cache-Status.
func (e *edge) get(uri string) string {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + e.addr + uri)
	if err := e.hc.DoTimeout(req, resp, 30*time.Second); err != nil || resp.StatusCode() != 200 {
		log.Fatalf("GET %s: %d %v %s", uri, resp.StatusCode(), err, resp.Body())
	}
	return string(resp.Header.Peek("Cache-Status"))
}

func (e *edge) close() {
	e.node.Close(context.Background())
	e.hs.Close()
	e.sim.Close()
}
