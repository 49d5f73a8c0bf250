package cdn

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/time/rate"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/metrics"
)

// cloudflare imitates Cloudflare's purge API as documented: POST
// /zones/<zone>/purge_cache with a bearer token and {"tags": [...]}, at
// most 100 tags a request (400 beyond), a token bucket per zone (429
// with Retry-After when empty), success said in the body.
type cloudflareAPI struct {
	t      *testing.T
	zone   string
	token  string
	bucket *rate.Limiter

	mu        sync.Mutex
	purged    []string // tags, in the order acknowledged
	requests  int
	throttled int
}

func (cf *cloudflareAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"success":false,"errors":[{"code":%d,"message":%q}]}`, status, msg)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/zones/"+cf.zone+"/purge_cache" {
		fail(404, "no route")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+cf.token {
		fail(403, "Authentication error")
		return
	}
	var body struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Tags) == 0 {
		fail(400, "bad body")
		return
	}
	if len(body.Tags) > 100 {
		fail(400, "Only 100 tags can be purged at a time")
		return
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	cf.requests++
	res := cf.bucket.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		cf.throttled++
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
		fail(429, "Rate limited")
		return
	}
	cf.purged = append(cf.purged, body.Tags...)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"success":true,"errors":[],"result":{"id":"x"}}`)
}

func (cf *cloudflareAPI) tags() []string {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return slices.Clone(cf.purged)
}

func newCloudflare(t *testing.T, perSecond float64, burst int) (*cloudflareAPI, string) {
	cf := &cloudflareAPI{t: t, zone: "z0123", token: "cf-token-0123456789", bucket: rate.NewLimiter(rate.Limit(perSecond), burst)}
	srv := httptest.NewServer(cf)
	t.Cleanup(srv.Close)
	return cf, srv.URL
}

func cloudflareConfig(base string, perSecond float64, burst int) config.CDN {
	c := config.CDNDefaults()
	c.TagHeader, c.Provider, c.Endpoints, c.Service, c.APIToken = "Cache-Tag", "cloudflare", []string{base}, "z0123", "cf-token-0123456789"
	c.Rate, c.Burst, c.ResendAfter = perSecond, burst, 0
	return c
}

// purges are n purges of per tags each, numbered.
func purges(n, per int) ([]Purge, []string) {
	var out []Purge
	var all []string
	for i := range n {
		p := Purge{At: time.Now().UnixNano()}
		for j := range per {
			p.Tags = append(p.Tags, fmt.Sprintf("ee-b1-chainx-%d-%d", i, j))
		}
		out = append(out, p)
		all = append(all, p.Tags...)
	}
	return out, all
}

func newSender(t *testing.T, cfg config.CDN) (*Sender, *metrics.Metrics) {
	t.Helper()
	m := metrics.New([]string{"r"}, nil, nil)
	s, err := New(cfg, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, m
}

// TestCloudflareWithinItsBucket: a sender given nine tenths of the zone's
// rate (the imitation's bucket: 5 requests at once, then a steady rate;
// scaled from the Free plan's per minute to per second; a tenth kept for
// the requests' own jitter) queues 40 purges of 150 tags
// at once: they reach Cloudflare in order, batched to 100 tags (purges
// queued together share requests: 60 to 80 of them), none lost, and no
// request is refused for rate.
func TestCloudflareWithinItsBucket(t *testing.T) {
	cf, base := newCloudflare(t, 20, 5)
	s, m := newSender(t, cloudflareConfig(base, 18, 5))
	ps, want := purges(40, 150)
	for _, p := range ps {
		s.Enqueue(p)
	}
	testkit.WaitFor(t, "the queue to drain", func() bool { return s.Pending() == 0 })
	if got := cf.tags(); !slices.Equal(got, want) {
		t.Fatalf("Cloudflare purged %d tags, want the %d queued in order", len(got), len(want))
	}
	if cf.throttled != 0 || cf.requests < 60 || cf.requests > 80 {
		t.Fatalf("%d requests, %d refused for rate; want 60 to 80, none", cf.requests, cf.throttled)
	}
	if ok := testutil.ToFloat64(m.CDN.Requests.WithLabelValues("ok")); ok != float64(cf.requests) || testutil.ToFloat64(m.CDN.Queue) != 0 {
		t.Fatalf("requests ok %v, queue %v", ok, testutil.ToFloat64(m.CDN.Queue))
	}
	if n := testutil.CollectAndCount(m.CDN.Lag); n != 1 {
		t.Fatalf("lag histogram: %d series", n)
	}
	if n := lagCount(t, m); n != 40 {
		t.Fatalf("lag observed %d times, want once for each of the 40 purges", n)
	}
}

func lagCount(t *testing.T, m *metrics.Metrics) uint64 {
	t.Helper()
	var d dto.Metric
	if err := m.CDN.Lag.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// TestCloudflareRetryAfter: a sender set faster than the zone's bucket is
// refused with 429 and Retry-After; it waits as told and sends every
// purge, in order, counting the refusals as throttled.
func TestCloudflareRetryAfter(t *testing.T) {
	cf, base := newCloudflare(t, 4, 2)
	s, m := newSender(t, cloudflareConfig(base, 1000, 1000))
	ps, want := purges(6, 40)
	for _, p := range ps {
		s.Enqueue(p)
	}
	testkit.WaitFor(t, "the queue to drain", func() bool { return s.Pending() == 0 })
	if got := cf.tags(); !slices.Equal(got, want) {
		t.Fatalf("Cloudflare purged %v, want %v", got, want)
	}
	if thr := testutil.ToFloat64(m.CDN.Requests.WithLabelValues("throttled")); thr < 1 || int(thr) != cf.throttled {
		t.Fatalf("throttled counted %v, the imitation refused %d", thr, cf.throttled)
	}
}

// TestProviderFailuresRetried: a provider that fails (500, then a refusal
// of the credentials until fixed) gets the purge again, with backoff,
// until it acknowledges; each outcome is counted; the token never shows
// in what the sender logs.
func TestProviderFailuresRetried(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 1:
			w.WriteHeader(500)
		case 2:
			w.WriteHeader(403)
		default:
			if r.Header.Get("Fastly-Key") != "fastly-secret-token" || r.Header.Get("Fastly-Soft-Purge") != "1" {
				w.WriteHeader(400)
				return
			}
			got = append(got, strings.Fields(r.Header.Get("Surrogate-Key"))...)
		}
	}))
	defer srv.Close()
	c := config.CDNDefaults()
	c.TagHeader, c.Provider, c.Endpoints, c.Service, c.APIToken, c.Soft = "Surrogate-Key", "fastly", []string{srv.URL}, "svc", "fastly-secret-token", true
	var logged strings.Builder
	var logMu sync.Mutex
	m := metrics.New([]string{"r"}, nil, nil)
	s, err := New(c, Options{Metrics: m, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ps, want := purges(1, 300) // two requests: 256 + 44 keys
	ps[0].Soft = true
	s.Enqueue(ps[0])
	testkit.WaitFor(t, "the purge acknowledged", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 300 })
	if !slices.Equal(got, want) {
		t.Fatal("keys out of order")
	}
	for outcome, n := range map[string]float64{"server_error": 1, "refused": 1, "ok": 2} {
		if v := testutil.ToFloat64(m.CDN.Requests.WithLabelValues(outcome)); v != n {
			t.Errorf("outcome %s: %v, want %v", outcome, v, n)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logged.String(), "fastly-secret-token") || !strings.Contains(logged.String(), "retried") {
		t.Fatalf("log: %s", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// fakeFleet is the fleet's side for a sender: a lease always held, a
// cursor, and how far every live node has read the log, set by the test.
type fakeFleet struct {
	mu      sync.Mutex
	cursor  int64
	applied int64
	asked   int // AppliedByAll calls
}

func (f *fakeFleet) HoldCDNLease(time.Duration) bool { return true }
func (f *fakeFleet) CDNCursor() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursor, nil
}
func (f *fakeFleet) SetCDNCursor(seq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cursor = max(f.cursor, seq)
	return nil
}
func (f *fakeFleet) AppliedByAll() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.applied, nil
}

// TestFleetSendsOnlyWhatEveryNodeApplied: in a fleet a purge goes to the
// CDN only once every live node has applied it (the CDN would refill from
// a node still holding the answer), in the log's order whatever order the
// records were queued in, and the cursor follows the acknowledgements.
func TestFleetSendsOnlyWhatEveryNodeApplied(t *testing.T) {
	cf, base := newCloudflare(t, 1000, 1000)
	f := &fakeFleet{applied: 1}
	m := metrics.New([]string{"r"}, nil, nil)
	s, err := New(cloudflareConfig(base, 1000, 1000), Options{Metrics: m, Logger: slog.New(slog.DiscardHandler), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, seq := range []int64{2, 1, 3} { // an own record before another node's, read later
		s.Enqueue(Purge{Seq: seq, At: time.Now().UnixNano(), Tags: []string{"t" + strconv.FormatInt(seq, 10)}})
	}
	s.Enqueue(Purge{Seq: 2, Tags: []string{"t2"}}) // read again: queued once
	testkit.WaitFor(t, "record 1 sent", func() bool { return len(cf.tags()) == 1 })
	// Record 2 waits for every node: the sender asks again and again.
	f.mu.Lock()
	asked := f.asked
	f.mu.Unlock()
	testkit.WaitFor(t, "the sender to ask the fleet 5 more times", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.asked >= asked+5
	})
	if s.Pending() != 2 || len(cf.tags()) != 1 {
		t.Fatalf("sent %v before every node applied record 2", cf.tags())
	}
	f.mu.Lock()
	f.applied = 3
	f.mu.Unlock()
	testkit.WaitFor(t, "records 2 and 3 sent", func() bool { return s.Pending() == 0 })
	if got := cf.tags(); !slices.Equal(got, []string{"t1", "t2", "t3"}) {
		t.Fatalf("sent %v", got)
	}
	if c, _ := f.CDNCursor(); c != 3 {
		t.Fatalf("cursor %d", c)
	}
}

// TestFleetMergesWhatEveryNodeApplied: records that every live node has
// applied when the head of the queue goes, as soft as it, go in one
// request with the union of their tags (a reorganization's partial and
// whole purges name the same tags), and its resend is one request too;
// a record not applied everywhere, or of another softness, waits for its
// own.
func TestFleetMergesWhatEveryNodeApplied(t *testing.T) {
	cf, base := newCloudflare(t, 1000, 1000)
	f := &fakeFleet{applied: 0}
	m := metrics.New([]string{"r"}, nil, nil)
	cfg := cloudflareConfig(base, 1000, 1000)
	cfg.ResendAfter = 50 * time.Millisecond
	s, err := New(cfg, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reorg := []string{"ee-b1-chainx-10", "ee-b1-chainx-11", "ee-b2-chainx-0"}
	s.Enqueue(Purge{Seq: 1, At: time.Now().UnixNano(), Tags: reorg})
	s.Enqueue(Purge{Seq: 2, At: time.Now().UnixNano(), Tags: append(slices.Clone(reorg), "ee-b1-chainx-12")})
	s.Enqueue(Purge{Seq: 3, At: time.Now().UnixNano(), Tags: []string{"ee-k-1"}, Soft: true})
	s.Enqueue(Purge{Seq: 4, At: time.Now().UnixNano(), Tags: []string{"ee-k-2"}})
	f.mu.Lock()
	f.applied = 3
	f.mu.Unlock()
	ok := func() float64 { return testutil.ToFloat64(m.CDN.Requests.WithLabelValues("ok")) }
	// 1 and 2 together, then 3 (soft); 4 waits for every node.
	testkit.WaitFor(t, "records 1 to 3 sent and sent again", func() bool { return ok() == 4 && s.Pending() == 1 })
	want := []string{"ee-b1-chainx-10", "ee-b1-chainx-11", "ee-b2-chainx-0", "ee-b1-chainx-12", "ee-k-1"}
	if got := cf.tags(); !slices.Equal(got[:5], want) || len(got) != 10 {
		t.Fatalf("sent %v, want %v and its resends", got, want)
	}
	if c, _ := f.CDNCursor(); c != 3 {
		t.Fatalf("cursor %d, want 3", c)
	}
	if n := lagCount(t, m); n != 3 {
		t.Fatalf("lag observed %d times, want once for each of records 1 to 3", n)
	}
}

// refusingFleet is a fleet whose Redis does not answer: no lease, no
// cursor, no report of the others.
type refusingFleet struct{}

func (refusingFleet) HoldCDNLease(time.Duration) bool { return false }
func (refusingFleet) CDNCursor() (int64, error)       { return 0, errors.New("shared tier unreachable") }
func (refusingFleet) SetCDNCursor(int64) error        { return errors.New("shared tier unreachable") }
func (refusingFleet) AppliedByAll() (int64, error)    { return 0, errors.New("shared tier unreachable") }

// TestFleetRefusedPurgeSentFromThisNode: a purge the fleet's log refused
// (Redis unreachable: the purger tells it with seq 0) is sent by the node
// that ran it, at once and again after cdn.resend_after, without the
// lease it cannot take: left to the log, it would never reach the CDN.
func TestFleetRefusedPurgeSentFromThisNode(t *testing.T) {
	cf, base := newCloudflare(t, 1000, 1000)
	m := metrics.New([]string{"r"}, nil, nil)
	cfg := cloudflareConfig(base, 1000, 1000)
	cfg.ResendAfter = 50 * time.Millisecond
	s, err := New(cfg, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler), Fleet: refusingFleet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Enqueue(Purge{At: time.Now().UnixNano(), Tags: []string{"ee-k-1"}})
	s.Enqueue(Purge{At: time.Now().UnixNano(), Tags: []string{"ee-k-2"}})
	testkit.WaitFor(t, "both purges sent and sent again", s.Idle)
	if got := cf.tags(); !slices.Equal(got, []string{"ee-k-1", "ee-k-2", "ee-k-1", "ee-k-2"}) {
		t.Fatalf("sent %v", got)
	}
	if q := testutil.ToFloat64(m.CDN.Queue); q != 0 {
		t.Fatalf("cdn_purge_queue %v", q)
	}
}
