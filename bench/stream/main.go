// Command stream measures the event stream (docs/stream.md) against
// polling: explorer-sim making a block a second, the explorer-edge binary
// in front of it with stream.enabled, and, for each -n, that many
// EventSource subscribers on the edge for -duration, then as many clients
// asking the newest block page every second for -duration. It prints, per
// N: the delivery delay of heads (from the block's time, when the
// upstream made it, to a subscriber's receipt: p50, p99), the edge's RSS
// per idle subscriber, its CPU per event, the upstream calls per block;
// and for polling the requests a second, the edge's CPU and the bytes
// received.
//
//	make build && go run ./bench/stream            # make bench-stream, ~2 minutes
//	go run ./bench/stream -n 1000,10000 -duration 20s
//
// Subscribers and pollers run in this process, on the same cores as the
// edge: the CPU figures are the edge's alone (/proc/<pid>/stat).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"explorer-edge/internal/procstat"
	"explorer-edge/sim"
)

func main() {
	edgeBin := flag.String("edge", "bin/explorer-edge", "the explorer-edge binary (make build)")
	ns := flag.String("n", "1000,10000", "subscribers (and pollers), comma-separated")
	duration := flag.Duration("duration", 20*time.Second, "measured time of each phase")
	poll := flag.Duration("poll", time.Second, "stream.poll_interval")
	flag.Parse()
	if err := run(*edgeBin, *ns, *duration, *poll); err != nil {
		log.Fatal(err)
	}
}

func run(edgeBin, ns string, duration, poll time.Duration) error {
	// explorer-sim, counting the newest-page calls the edge makes.
	s := sim.New(sim.Config{BlockInterval: time.Second, Chains: []string{"CHAINX"}})
	var headCalls atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/block-list") && r.URL.Query().Get("height") == "" {
			headCalls.Add(1)
		}
		s.ServeHTTP(w, r)
	})}
	go up.Serve(ln)
	defer up.Close()
	defer s.Close()

	listen, admin := freeAddr(), freeAddr()
	dir, err := os.MkdirTemp("", "streambench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "config.yaml")
	creds := sim.DemoCredentials()
	os.WriteFile(cfg, fmt.Appendf(nil, `listen: %q
admin_listen: %q
chains: ["CHAINX"]
upstream:
  base_url: "http://%s"
  api_key: %q
  secret_key: %q
  passphrase: %q
  rate: 100
  burst: 100
server:
  max_conns: 19000
stream:
  enabled: true
  max_subscribers: 20000
  max_per_ip: 20000
  poll_interval: %s
  lease: %s
log:
  level: warn
`, listen, admin, ln.Addr(), creds.APIKey, creds.SecretKey, creds.Passphrase, poll, 3*poll), 0o600)
	edge := exec.Command(edgeBin, "-config", cfg)
	edge.Stdout, edge.Stderr = os.Stderr, os.Stderr
	if err := edge.Start(); err != nil {
		return err
	}
	defer func() { edge.Process.Kill(); edge.Wait() }()
	if err := waitReady("http://" + admin + "/healthz"); err != nil {
		return err
	}
	pid := edge.Process.Pid
	fmt.Printf("explorer-sim: a block a second; edge pid %d, stream.poll_interval %v, %v a phase\n\n", pid, poll, duration)
	fmt.Println("| N | delay p50 | delay p99 | RSS per idle subscriber | edge CPU per event | upstream calls per block | polling: requests/s | polling: edge CPU | polling: MB received |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, f := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		st, err := subscribe(listen, pid, n, duration, &headCalls)
		if err != nil {
			return fmt.Errorf("%d subscribers: %w", n, err)
		}
		pl, err := pollers(listen, pid, n, duration)
		if err != nil {
			return fmt.Errorf("%d pollers: %w", n, err)
		}
		fmt.Printf("| %d | %v | %v | %.1f KB | %.2f ms | %.2f | %.0f | %.0f%% of a core | %.1f |\n", n,
			st.p50.Round(time.Millisecond), st.p99.Round(time.Millisecond), st.rssPerSub, st.cpuPerEvent*1000, st.callsPerBlock,
			pl.rps, pl.cpu*100, float64(pl.bytes)/1e6)
	}
	return nil
}

type streamStats struct {
	p50, p99      time.Duration
	rssPerSub     float64 // KB
	cpuPerEvent   float64 // seconds of edge CPU per head announced
	callsPerBlock float64
}

// subscribe opens n streams, waits until each has its first event, reads
// the edge's RSS, then measures for duration.
func subscribe(addr string, pid, n int, duration time.Duration, headCalls *atomic.Int64) (streamStats, error) {
	var st streamStats
	time.Sleep(2 * time.Second) // the previous phase's connections closed
	base, _ := procstat.KB(pid, "VmRSS")
	var (
		mu      sync.Mutex
		delays  []time.Duration
		measure atomic.Bool
		events  atomic.Int64 // heads received in the window, over all subscribers
		ready   sync.WaitGroup
	)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ready.Add(n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return st, fmt.Errorf("after %d: %w", i, err)
		}
		conns = append(conns, c)
		io.WriteString(c, "GET /edge/v1/events?chains=CHAINX HTTP/1.1\r\nHost: edge\r\n\r\n")
		go func() {
			br := bufio.NewReaderSize(c, 1024)
			first := true
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					if first {
						ready.Done()
					}
					return
				}
				if !bytes.HasPrefix(line, []byte("data: ")) {
					continue
				}
				at := time.Now()
				if first {
					first = false
					ready.Done()
					continue
				}
				var ev struct {
					Height int64 `json:"height"`
					Time   int64 `json:"time"`
				}
				if json.Unmarshal(line[6:], &ev) != nil || ev.Time == 0 || !measure.Load() {
					continue
				}
				events.Add(1)
				d := at.Sub(time.UnixMilli(ev.Time))
				mu.Lock()
				delays = append(delays, d)
				mu.Unlock()
			}
		}()
	}
	ready.Wait()
	time.Sleep(2 * time.Second)
	rss, _ := procstat.KB(pid, "VmRSS")
	st.rssPerSub = float64(rss-base) / float64(n)
	cpu0, calls0 := cpuSeconds(pid), headCalls.Load()
	measure.Store(true)
	time.Sleep(duration)
	measure.Store(false)
	cpu1, calls1 := cpuSeconds(pid), headCalls.Load()
	mu.Lock()
	defer mu.Unlock()
	if len(delays) == 0 {
		return st, fmt.Errorf("no event in %v", duration)
	}
	slices.Sort(delays)
	st.p50, st.p99 = delays[len(delays)/2], delays[len(delays)*99/100]
	announced := float64(events.Load()) / float64(n)
	st.cpuPerEvent = (cpu1 - cpu0) / max(announced, 1)
	st.callsPerBlock = float64(calls1-calls0) / duration.Seconds()
	return st, nil
}

type pollStats struct {
	rps, cpu float64
	bytes    int64
}

// pollers are n clients asking the newest page every second on
// keep-alive connections, for duration.
func pollers(addr string, pid, n int, duration time.Duration) (pollStats, error) {
	var st pollStats
	time.Sleep(2 * time.Second)
	var reqs, bytesIn atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	req := []byte("GET /api/v5/chainx/block/block-list?chainShortName=CHAINX HTTP/1.1\r\nHost: edge\r\nAccept-Encoding: gzip\r\n\r\n")
	var failed atomic.Int64
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			close(stop)
			wg.Wait()
			return st, fmt.Errorf("after %d: %w", i, err)
		}
		wg.Go(func() {
			defer c.Close()
			br := bufio.NewReaderSize(c, 16<<10)
			// Spread over the second, as independent browsers are.
			t := time.NewTimer(time.Duration(i) * time.Second / time.Duration(n))
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				t.Reset(time.Second)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(req); err != nil {
					failed.Add(1)
					return
				}
				size, err := readResponse(br)
				if err != nil {
					failed.Add(1)
					return
				}
				reqs.Add(1)
				bytesIn.Add(int64(size))
			}
		})
	}
	time.Sleep(2 * time.Second) // every poller under way
	cpu0, r0, b0 := cpuSeconds(pid), reqs.Load(), bytesIn.Load()
	time.Sleep(duration)
	cpu1, r1, b1 := cpuSeconds(pid), reqs.Load(), bytesIn.Load()
	close(stop)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		log.Printf("%d pollers failed", f)
	}
	st.rps = float64(r1-r0) / duration.Seconds()
	st.cpu = (cpu1 - cpu0) / duration.Seconds()
	st.bytes = b1 - b0
	return st, nil
}

// readResponse reads one response with a Content-Length and returns its
// size on the wire.
func readResponse(br *bufio.Reader) (int, error) {
	size, length := 0, -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		size += len(line)
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(k), "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(string(v)))
		}
	}
	if length < 0 {
		return 0, fmt.Errorf("no Content-Length")
	}
	n, err := br.Discard(length)
	return size + n, err
}

// cpuSeconds is the user and system time of pid (/proc/<pid>/stat).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(url string) error {
	for range 200 {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never answered", url)
}
