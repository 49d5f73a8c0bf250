// Command membound checks the edge's memory bound with the largest
// answers it accepts: an upstream answering every question with about
// 8 MB of JSON, clients asking at more than the full upstream budget, half
// of them taking gzip and half not, some asking again for what was just
// fetched. It runs the explorer-edge binary with cache.max_bytes 256 MiB
// and samples its RSS; it fails when the peak (VmHWM) passes
// 1.5 x max_bytes + 64 MiB (448 MiB), the bound docs/operations.md gives.
//
//	make build && go run ./bench/membound            # ~1 minute
//	go run ./bench/membound -edge /path/to/explorer-edge -duration 60s
//
// The questions are transaction lists of distinct blocks (a block of
// tens of thousands of transactions); the answers are distinct per
// question (the question stamped into them) and compress about as real
// ones do: rows of hex hashes and addresses, 2-3 to 1.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"explorer-edge/internal/procstat"
)

func main() {
	edgeBin := flag.String("edge", "bin/explorer-edge", "the explorer-edge binary")
	size := flag.Int("answer-bytes", 8_000_000, "bytes of each upstream answer (upstream.max_response_bytes is 8 MiB)")
	maxBytes := flag.Int64("max-bytes", 256<<20, "the edge's cache.max_bytes")
	rate := flag.Float64("rate", 20, "the edge's upstream.rate (burst the same): the full budget")
	workers := flag.Int("workers", 16, "concurrent clients")
	duration := flag.Duration("duration", 40*time.Second, "how long the clients ask")
	flag.Parse()
	if err := run(*edgeBin, *size, *maxBytes, *rate, *workers, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "membound:", err)
		os.Exit(1)
	}
}

func run(edgeBin string, size int, maxBytes int64, rate float64, workers int, duration time.Duration) error {
	up, upCalls, err := startUpstream(size)
	if err != nil {
		return err
	}
	defer up.Close()
	listen, admin := freeAddr(), freeAddr()
	dir, err := os.MkdirTemp("", "membound")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, `listen: %q
admin_listen: %q
chains: ["CHAINX"]
upstream:
  base_url: "http://%s"
  api_key: "k"
  secret_key: "s"
  passphrase: "p"
  timeout: 10s
  rate: %g
  burst: %d
cache:
  max_bytes: %d
log:
  level: warn
`, listen, admin, up.Addr(), rate, int(rate), maxBytes), 0o600)
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
	base := statusKB(pid, "VmRSS")

	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if r := statusKB(pid, "VmRSS"); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	})

	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	var next atomic.Int64
	var recent sync.Map // worker -> last key fetched
	type tally struct{ ok, hit, refused, bytes atomic.Int64 }
	var gz, id tally
	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(end) {
				h := next.Add(1)
				if v, ok := recent.Load(w); ok && rng.IntN(10) < 3 {
					h = v.(int64) // asked again: a hit, sent from what is held
				}
				target := fmt.Sprintf("http://%s/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&limit=100&height=%d", listen, 1_000_000+h)
				req, _ := http.NewRequest("GET", target, nil)
				t := &id
				if w%2 == 0 {
					req.Header.Set("Accept-Encoding", "gzip")
					t = &gz
				}
				res, err := client.Do(req)
				if err != nil {
					continue
				}
				n, _ := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch {
				case res.StatusCode == 200:
					t.ok.Add(1)
					t.bytes.Add(n)
					recent.Store(w, h)
					if strings.Contains(res.Header.Get("Cache-Status"), "hit") {
						t.hit.Add(1)
					}
				case res.StatusCode == 503:
					t.refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	hwm := statusKB(pid, "VmHWM")
	metrics := scrape("http://" + admin + "/metrics")

	bound := maxBytes + maxBytes/2 + 64<<20
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	fmt.Printf("answers of %d bytes, cache.max_bytes %d MiB, upstream.rate %g, %d clients for %s\n", size, maxBytes>>20, rate, workers, duration)
	fmt.Printf("upstream calls %d (%.1f/s)\n", upCalls.Load(), float64(upCalls.Load())/duration.Seconds())
	for _, x := range []struct {
		name string
		t    *tally
	}{{"gzip", &gz}, {"identity", &id}} {
		fmt.Printf("%-8s clients: %d answers (%d hits), %d refused (budget), %.0f MB received\n", x.name, x.t.ok.Load(), x.t.hit.Load(), x.t.refused.Load(), float64(x.t.bytes.Load())/1e6)
	}
	fmt.Printf("cache: %s entries, %s bytes held (explorer_edge_cache_entries, _bytes)\n", metrics["explorer_edge_cache_entries"], metrics["explorer_edge_cache_bytes"])
	fmt.Printf("RSS: at start %.1f MiB, peak sampled %.1f MiB, VmHWM %.1f MiB; bound %.1f MiB (1.5 x max_bytes + 64 MiB)\n",
		mib(base), mib(peak.Load()), mib(hwm), float64(bound)/(1<<20))
	if hwm<<10 > bound {
		return fmt.Errorf("peak RSS %.1f MiB is above the bound %.1f MiB", mib(hwm), float64(bound)/(1<<20))
	}
	fmt.Println("PASS: the peak stays within the bound")
	return nil
}

// startUpstream answers every request with an envelope of about size
// bytes: rows of pseudo-random hashes, made once, with the request's
// target stamped in front so that each question's answer is its own.
func startUpstream(size int) (*server, *atomic.Int64, error) {
	var rows bytes.Buffer
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; rows.Len() < size-512; i++ {
		fmt.Fprintf(&rows, `{"txid":"0x%016x%016x%016x%016x","height":"1000","from":"0x%016x%016x%08x","to":"0x%016x%016x%08x","amount":"%d.%06d","state":"success"},`,
			rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint32(), rng.Uint64(), rng.Uint64(), rng.Uint32(), rng.IntN(1000), rng.IntN(1_000_000))
	}
	body := rows.Bytes()
	calls := new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"code":"0","msg":"","data":[{"page":"1","limit":"100","totalPage":"1","asked":%q,"transactionList":[`, r.URL.RequestURI())
		w.Write(body)
		io.WriteString(w, `{"txid":"0x0","height":"1000","state":"success"}]}]}`)
	})}
	go hs.Serve(ln)
	return &server{hs, ln}, calls, nil
}

type server struct {
	hs *http.Server
	ln net.Listener
}

func (s *server) Addr() string { return s.ln.Addr().String() }
func (s *server) Close()       { s.hs.Close() }

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(url string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a process's start: no event to wait on
	}
	return fmt.Errorf("%s not answering after 15 s", url)
}

// statusKB reads a "Name:   123 kB" line of /proc/<pid>/status; 0 when
// the process is gone.
func statusKB(pid int, name string) int64 {
	kb, _ := procstat.KB(pid, name)
	return kb
}

// scrape returns the unlabelled samples of a Prometheus text page.
func scrape(url string) map[string]string {
	out := map[string]string{}
	res, err := http.Get(url)
	if err != nil {
		return out
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok && !strings.HasPrefix(name, "#") && !strings.Contains(name, "{") {
			out[name] = v
		}
	}
	return out
}
