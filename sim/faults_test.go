package sim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const blocksQ = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=5"

// TestFaultKinds observes every fault kind from a real client over a socket.
func TestFaultKinds(t *testing.T) {
	cases := []struct {
		name   string
		faults Faults
		check  func(t *testing.T, resp *http.Response, body []byte, err error)
	}{
		{"http500", Faults{HTTP500: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 500 || envelopeCode(body) != "50026" {
				t.Errorf("got %v %v %s", status(resp), err, body)
			}
		}},
		{"http429", Faults{HTTP429: 1, RetryAfter: 3}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" || envelopeCode(body) != "50011" {
				t.Errorf("got %v %v Retry-After %q %s", status(resp), err, resp.Header.Get("Retry-After"), body)
			}
		}},
		{"http429 default retry", Faults{HTTP429: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.Header.Get("Retry-After") != "1" {
				t.Errorf("got %v Retry-After %q", err, resp.Header.Get("Retry-After"))
			}
		}},
		{"envelope", Faults{Envelope: 1, EnvelopeCode: "50001"}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 200 || envelopeCode(body) != "50001" {
				t.Errorf("got %v %v %s", status(resp), err, body)
			}
		}},
		{"drop", Faults{Drop: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err == nil {
				t.Errorf("dropped connection answered %v", status(resp))
			}
		}},
		{"malformed", Faults{Malformed: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			var v any
			if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &v) == nil {
				t.Errorf("got %v %v %s", status(resp), err, body)
			}
		}},
		{"truncated", Faults{Truncated: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			var v any
			if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &v) == nil {
				t.Fatalf("got %v %v %s", status(resp), err, body)
			}
			if cl, _ := strconv.Atoi(resp.Header.Get("Content-Length")); cl != len(body) || len(body) < 1000 {
				t.Errorf("Content-Length %d, body %d bytes", cl, len(body))
			}
			if !strings.HasPrefix(string(body), `{"code":"0","msg":"","data":[{"page":"1"`) {
				t.Errorf("not the start of the real answer: %.80s", body)
			}
		}},
		{"oversized", Faults{Oversized: 1, OversizedBytes: 100 << 10}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			var v struct{ Code string }
			if err != nil || resp.StatusCode != 200 || len(body) != 100<<10 || json.Unmarshal(body, &v) != nil || v.Code != "0" {
				t.Errorf("got %v %v, %d bytes, code %q", status(resp), err, len(body), v.Code)
			}
		}},
		{"none for another route", Faults{Route: RouteTransactionMulti, HTTP500: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 200 || envelopeCode(body) != "0" {
				t.Errorf("got %v %v %s", status(resp), err, body)
			}
		}},
		{"for this route", Faults{Route: RouteBlockList, HTTP500: 1}, func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 500 {
				t.Errorf("got %v %v %s", status(resp), err, body)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, Config{Faults: tc.faults})
			resp, body, err := fetch(client(t, 10*time.Second), s.URL()+blocksQ)
			tc.check(t, resp, body, err)
			if got := s.Stats().Routes[RouteBlockList]; got != 1 {
				t.Errorf("faulted request counted %d times", got)
			}
		})
	}
}

// TestFaultHang: a hung request ends at the client's timeout, and one still
// hanging ends when the server closes.
func TestFaultHang(t *testing.T) {
	hanging := make(chan struct{}, 2)
	s, err := Start(Config{Faults: Faults{Hang: 1}, onWait: func() { hanging <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, _, err = fetch(client(t, 300*time.Millisecond), s.URL()+blocksQ)
	if !isTimeout(err) || time.Since(start) < 300*time.Millisecond {
		t.Errorf("hung request: err %v after %v, want a client timeout", err, time.Since(start))
	}
	<-hanging

	done := make(chan error)
	go func() {
		_, _, err := fetch(client(t, 0), s.URL()+blocksQ)
		done <- err
	}()
	<-hanging
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("request hanging at Close got an answer")
	}
}

// TestCloseDuringLatency: a request delayed when the server closes gets no
// answer (never an empty 200).
func TestCloseDuringLatency(t *testing.T) {
	waiting := make(chan struct{}, 1)
	s, err := Start(Config{Faults: Faults{Latency: time.Hour}, onWait: func() { waiting <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, _, err := fetch(client(t, 0), s.URL()+blocksQ)
		done <- err
	}()
	<-waiting
	s.Close()
	if err := <-done; err == nil {
		t.Error("request delayed at Close got an answer")
	}
}

// TestFaultLatency: latency delays answers of the faulted route only.
func TestFaultLatency(t *testing.T) {
	const d = 150 * time.Millisecond
	s := start(t, Config{Faults: Faults{Route: RouteBlockList, Latency: d, Jitter: 10 * time.Millisecond}})
	c := client(t, 10*time.Second)
	start := time.Now()
	if resp, _, err := fetch(c, s.URL()+blocksQ); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", status(resp), err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("answer after %v, want at least %v", took, d)
	}
	// Another route is not delayed. Its time is not asserted against a
	// bound (the machine may be slow); it must merely be answered, and the
	// latency must not be counted against it: compare with the faulted one.
	start = time.Now()
	if resp, _, err := fetch(c, s.URL()+"/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid="+s.UnknownHash(0)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", status(resp), err)
	}
	if took := time.Since(start); took >= d {
		t.Errorf("unfaulted route took %v", took)
	}
}

// TestFaultsAPI sets and clears faults over HTTP and through Go.
func TestFaultsAPI(t *testing.T) {
	s := start(t, Config{})
	c := client(t, 10*time.Second)
	send := func(method, body string) answer {
		req, _ := http.NewRequest(method, s.URL()+"/sim/faults", strings.NewReader(body))
		return do(t, c, req)
	}
	a := send("POST", `{"route":"transaction-list","latency":"20ms","http429":0.5,"retry_after":7,"envelope":0.25}`)
	if a.status != 200 {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	want := `{"route":"transaction-list","latency":"20ms","jitter":"0s","http500":0,"http429":0.5,"retry_after":7,"envelope":0.25,"envelope_code":"50026","envelope_vendor":false,"hang":0,"drop":0,"malformed":0,"truncated":0,"oversized":0,"oversized_bytes":9437184,"gzip_bomb":0,"gzip_bomb_bytes":67108864,"reorg":0}`
	if got := strings.TrimSpace(string(send("GET", "").body)); got != want {
		t.Errorf("GET /sim/faults\n got %s\nwant %s", got, want)
	}
	if f := s.Faults(); f.Latency != 20*time.Millisecond || f.HTTP429 != 0.5 || f.RetryAfter != 7 {
		t.Errorf("Faults() = %+v", f)
	}
	for _, body := range []string{
		`{"route":"nope"}`, `{"http500":1.5}`, `{"http500":0.6,"drop":0.6}`, `{"latency":"soon"}`, `{"typo":1}`, `not json`,
		`{"gzip_bomb":0.5,"drop":0.6}`, `{"gzip_bomb_bytes":-1}`, `{"gzip_bomb_bytes":2147483648}`,
	} {
		if a := send("POST", body); a.status != 400 {
			t.Errorf("POST %s: %d, want 400", body, a.status)
		}
	}
	if a := send("DELETE", ""); a.status != 200 {
		t.Fatalf("DELETE: %d", a.status)
	}
	if f := s.Faults(); f != (Faults{RetryAfter: 1, EnvelopeCode: "50026", OversizedBytes: 9 << 20, GzipBombBytes: 64 << 20}) {
		t.Errorf("after DELETE: %+v", f)
	}

	s.SetFaults(Faults{HTTP500: 1})
	if resp, _, err := fetch(c, s.URL()+blocksQ); err != nil || resp.StatusCode != 500 {
		t.Fatalf("after SetFaults: %v %v", status(resp), err)
	}
	s.ClearFaults()
	if resp, _, err := fetch(c, s.URL()+blocksQ); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after ClearFaults: %v %v", status(resp), err)
	}
}

// TestFaultGzipBomb: the answer says gzip although the request did not ask
// for it, is small on the wire, decodes to exactly the size set (64 MiB by
// default) and is the same bytes every time (built once).
func TestFaultGzipBomb(t *testing.T) {
	s := start(t, Config{Faults: Faults{GzipBomb: 1}})
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	// The first answer builds the bomb (64 MiB compressed, seconds under
	// -race on a busy machine): no timeout of the client's but the test's.
	c := &http.Client{Transport: tr}
	var first []byte
	for i := range 2 {
		resp, body, err := fetch(c, s.URL()+blocksQ)
		if err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("ask %d: %v Content-Encoding %q", i, status(resp), resp.Header.Get("Content-Encoding"))
		}
		if cl, _ := strconv.Atoi(resp.Header.Get("Content-Length")); cl != len(body) || len(body) > 128<<10 {
			t.Fatalf("ask %d: Content-Length %s, %d bytes on the wire (want at most 128 KiB)", i, resp.Header.Get("Content-Length"), len(body))
		}
		if i == 0 {
			first = body
			continue
		}
		if !bytes.Equal(body, first) {
			t.Error("the second bomb differs from the first: built again")
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	var ends endsWriter
	n, err := io.Copy(&ends, zr)
	if err != nil || n != 64<<20 {
		t.Fatalf("decoded %d bytes (%v), want %d", n, err, 64<<20)
	}
	if !strings.HasPrefix(string(ends.head), `{"code":"0","msg":"","data":[   `) || !strings.HasSuffix(string(ends.tail), `   ]}`) {
		t.Errorf("decoded body is not the padded empty envelope: %q ... %q", ends.head, ends.tail)
	}

	s.SetFaults(Faults{GzipBomb: 1, GzipBombBytes: 1000})
	resp, body, err := fetch(c, s.URL()+blocksQ)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", status(resp), err)
	}
	zr, err = gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := io.ReadAll(zr); err != nil || len(dec) != 1000 || !json.Valid(dec) {
		t.Errorf("gzip_bomb_bytes 1000: decoded %d bytes (%v), valid JSON %v", len(dec), err, json.Valid(dec))
	}
}

// endsWriter keeps the first and the last 32 bytes written to it.
type endsWriter struct{ head, tail []byte }

func (e *endsWriter) Write(p []byte) (int, error) {
	if room := 32 - len(e.head); room > 0 {
		e.head = append(e.head, p[:min(room, len(p))]...)
	}
	e.tail = append(e.tail, p[max(len(p)-32, 0):]...)
	e.tail = e.tail[max(len(e.tail)-32, 0):]
	return len(p), nil
}

// TestFaultsAfterAuth: auth failures are answered as such, not faulted.
func TestFaultsAfterAuth(t *testing.T) {
	s := start(t, Config{Auth: true, Faults: Faults{HTTP500: 1}})
	if a := get(t, s, blocksQ); a.status != 401 {
		t.Errorf("unsigned request under faults: %d", a.status)
	}
}

func TestFaultPick(t *testing.T) {
	f := Faults{HTTP500: 0.25, Drop: 0.25}
	n := map[int]int{}
	for range 4000 {
		n[f.pick()]++
	}
	for kind, want := range map[int]int{faultHTTP500: 1000, faultDrop: 1000, faultNone: 2000} {
		if n[kind] < want*8/10 || n[kind] > want*12/10 {
			t.Errorf("kind %d drawn %d times of 4000, want about %d", kind, n[kind], want)
		}
	}
	if (Faults{}).pick() != faultNone || (Faults{Truncated: 1}).pick() != faultTruncated {
		t.Error("pick of 0 or 1 fractions")
	}
}

// fetch GETs url and reads the whole body.
func fetch(c *http.Client, url string) (*http.Response, []byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func envelopeCode(body []byte) string {
	var e struct{ Code string }
	json.Unmarshal(body, &e)
	return e.Code
}

func status(resp *http.Response) any {
	if resp == nil {
		return "no response"
	}
	return resp.StatusCode
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// The reorg fault replaces the newest blocks: new hashes from the first
// replaced height up, the blocks below untouched, the replaced blocks'
// transactions gone and others in their place; setting it again
// reorganizes again.
func TestReorgFault(t *testing.T) {
	clock := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := New(Config{Now: func() time.Time { return clock }})
	defer s.Close()
	c := s.chains["CHAINX"]
	head := s.Head("CHAINX")
	before := map[int64]string{}
	for h := head - 5; h <= head; h++ {
		before[h] = c.blockHash(h)
	}
	oldTxs := s.TxHashes("CHAINX", head-1)
	s.SetFaults(Faults{Reorg: 2})
	if f := s.Faults(); f.Reorg != 0 {
		t.Fatalf("faults after a reorg report reorg %d, want 0 (an event)", f.Reorg)
	}
	for h := head - 5; h <= head; h++ {
		if changed := c.blockHash(h) != before[h]; changed != (h >= head-1) {
			t.Fatalf("height %d (head %d) after a reorg of 2: hash changed %v", h, head, changed)
		}
	}
	newTxs := s.TxHashes("CHAINX", head-1)
	if _, _, ok := c.openTx(oldTxs[0], head); ok {
		t.Fatal("a transaction of a replaced block still resolves")
	}
	if h, i, ok := c.openTx(newTxs[0], head); !ok || h != head-1 || i != 0 {
		t.Fatalf("a transaction of the new branch: %d %d %v", h, i, ok)
	}
	// Blocks produced later are on the new branch; a second reorg stacks.
	clock = clock.Add(3 * s.cfg.BlockInterval)
	mid := c.blockHash(head)
	s.SetFaults(Faults{Reorg: 1})
	if c.blockHash(head) != mid || c.blockHash(head+3) == "" {
		t.Fatal("a second reorg of depth 1 changed a block below it")
	}
	if err := (Faults{Reorg: -1}).Validate(); err == nil {
		t.Fatal("a negative reorg validated")
	}
}
