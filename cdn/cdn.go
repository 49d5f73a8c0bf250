// Package cdn carries the edge's purges to a CDN (docs/cdn.md): the
// operator's and the reorganizations', as the tags every answer carries
// (proxy/purge: Naming), to Varnish, Fastly, Cloudflare or a webhook.
//
// Unlike a fire-and-forget purge, each one is sent in order, batched to
// the provider's limit per request, within a token bucket of its rate,
// with the provider's Retry-After honoured and failures retried with
// backoff until the provider acknowledges it: a purge is never dropped
// while the process runs. Each is sent again after cdn.resend_after (a
// tiered CDN's lower tier may have refilled from a shield that had not
// purged yet). In a fleet one node sends at a time (a lease in Redis),
// from the fleet's purge log, only once every live node has applied the
// purge (Fleet): the CDN must not refill from a node still holding the
// purged answer, and a node that dies with purges queued loses none.
package cdn

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"explorer-edge/config"
	"explorer-edge/metrics"
)

// Purge is one purge as the CDN sees it.
type Purge struct {
	Seq  int64    // the record's number in the fleet's purge log; 0 on a single node
	At   int64    // unix ns the edge ran it: the lag counts from there
	Tags []string // what it names (purge.Naming.SelectorTags)
	Soft bool
	// resend: this is the second sending (cdn.resend_after), due at due
	// (unix ns, the process's clock)
	resend bool
	due    int64
	// local: in a fleet, a purge the fleet's log did not take (Redis
	// unreachable): this node sends it itself (Enqueue).
	local bool
	// ats are the times of the records merged into this one (merge).
	ats []int64
}

// Fleet is the fleet's side of sending (fleet.Redis): who sends, how far
// the sending has come, and how far every live node has applied the log.
type Fleet interface {
	// HoldCDNLease takes or renews the lease of sending for ttl; it
	// reports whether this node holds it.
	HoldCDNLease(ttl time.Duration) bool
	// CDNCursor is the number of the last record sent (acknowledged).
	CDNCursor() (int64, error)
	// SetCDNCursor records that the records up to seq are acknowledged.
	SetCDNCursor(seq int64) error
	// AppliedByAll is the highest record every live node has applied.
	AppliedByAll() (int64, error)
}

// Sender sends purges to one provider. Create it with New; Close stops it.
type Sender struct {
	p      provider
	cfg    config.CDN
	m      *metrics.Metrics
	log    *slog.Logger
	bucket *rate.Limiter
	fleet  Fleet
	now    func() time.Time

	mu      sync.Mutex
	queue   []Purge // in order of the log
	resends []Purge // sent once, due again at At+ResendAfter of their acknowledgement
	local   []Purge // fleet mode: purges not in the log, and their resends
	wake    chan struct{}
	closed  chan struct{}
	done    chan struct{}
	base    context.Context // ended by Close
	cancel  context.CancelFunc
}

// Options are a Sender's collaborators.
type Options struct {
	Metrics *metrics.Metrics // required
	Logger  *slog.Logger     // required
	Client  *http.Client     // nil: one of its own with cdn.timeout
	Fleet   Fleet            // nil: a single node, which sends its own purges
	Clock   func() time.Time // the edge's clock, Purge.At's; nil: time.Now
}

// New starts a sender for cfg (cdn.provider set, validated).
func New(cfg config.CDN, o Options) (*Sender, error) {
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout}
	}
	p, err := newProvider(cfg, client)
	if err != nil {
		return nil, err
	}
	s := &Sender{p: p, cfg: cfg, m: o.Metrics, log: o.Logger, fleet: o.Fleet, now: o.Clock,
		bucket: rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst),
		wake:   make(chan struct{}, 1), closed: make(chan struct{}), done: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Close stops the sender; what is queued is left to the log (fleet) or
// lost with the process (single node: its cache goes too).
func (s *Sender) Close() {
	close(s.closed)
	s.cancel()
	<-s.done
}

// Enqueue queues a purge; it never blocks. In a fleet every node queues
// every purge of the log as it applies it; the lease holder sends them.
func (s *Sender) Enqueue(p Purge) {
	s.mu.Lock()
	if s.fleet != nil && p.Seq == 0 {
		// A purge the fleet's log refused (Redis unreachable, the
		// operator told so by a 503): no other node will send it and
		// there is no lease to hold, so this node sends it now, without
		// waiting for the others, which were not told either (the CDN
		// may refill from them until the operator's retry goes through
		// the log). Not sending it would leave the CDN serving what the
		// operator purged for as long as its lifetime, a day.
		p.local = true
		s.local = append(s.local, p)
		s.m.CDN.Queue.Set(float64(len(s.queue) + len(s.local)))
		s.mu.Unlock()
		s.poke()
		return
	}
	// In the log's order: a node's own purge is queued when it publishes
	// it, the others' when it reads them, so a record can come after one
	// numbered above it. A record is sent only once every live node, this
	// one included, has read the log past it (head): by then every record
	// below it this node will queue is queued.
	i := len(s.queue)
	for p.Seq > 0 && i > 0 && s.queue[i-1].Seq > p.Seq {
		i--
	}
	if p.Seq > 0 && i > 0 && s.queue[i-1].Seq == p.Seq {
		s.mu.Unlock()
		return // queued already
	}
	s.queue = slices.Insert(s.queue, i, p)
	s.m.CDN.Queue.Set(float64(len(s.queue)))
	s.mu.Unlock()
	s.poke()
}

func (s *Sender) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Pending is the purges queued, resends not counted.
func (s *Sender) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.queue)
	for _, p := range s.local {
		if !p.resend {
			n++
		}
	}
	return n
}

// Idle reports whether nothing is queued nor waiting to be sent again.
func (s *Sender) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) == 0 && len(s.resends) == 0 && len(s.local) == 0
}

// idle is how often a sender with nothing to do looks at the lease and
// the fleet's progress.
const idle = 250 * time.Millisecond

func (s *Sender) run() {
	defer close(s.done)
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		default:
		}
		wait := s.step()
		if wait <= 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-s.closed:
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// step sends what is due and says how long to wait for more.
func (s *Sender) step() time.Duration {
	localDue := idle
	if s.fleet != nil {
		i, wait := s.localHead()
		if i >= 0 {
			return s.sendLocal(i)
		}
		localDue = wait
	}
	if s.fleet != nil && !s.fleet.HoldCDNLease(s.cfg.Lease) {
		s.trim() // another node sends: what it acknowledged leaves the queue
		return min(idle, localDue)
	}
	next, n, due, ok := s.head()
	if !ok {
		return min(due, idle, localDue)
	}
	if !s.send(next) {
		return 0 // closed, or given up for now: the loop looks again
	}
	s.mu.Lock()
	if next.resend {
		s.resends = s.resends[1:]
	} else {
		s.queue = s.queue[n:]
		s.m.CDN.Queue.Set(float64(len(s.queue) + len(s.local)))
		if s.cfg.ResendAfter > 0 {
			again := next
			again.resend, again.due = true, time.Now().Add(s.cfg.ResendAfter).UnixNano()
			s.resends = append(s.resends, again)
		}
	}
	s.mu.Unlock()
	if s.fleet != nil && !next.resend && next.Seq > 0 {
		if err := s.fleet.SetCDNCursor(next.Seq); err != nil {
			s.log.Warn("CDN purge sent, its place in the log not recorded: the next sender sends it again", "seq", next.Seq, "err", err)
		}
	}
	return 0
}

// localHead is the index of the first local purge (or resend) due, or -1
// and how long until one is.
func (s *Sender) localHead() (int, time.Duration) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := idle
	for i, p := range s.local {
		if p.due <= now {
			return i, 0
		}
		wait = min(wait, time.Duration(p.due-now))
	}
	return -1, wait
}

// sendLocal sends the local purge at i (only step removes from local, so
// i stays its place) and queues its resend.
func (s *Sender) sendLocal(i int) time.Duration {
	s.mu.Lock()
	p := s.local[i]
	s.mu.Unlock()
	if !s.send(p) {
		return 0
	}
	s.mu.Lock()
	s.local = slices.Delete(s.local, i, i+1)
	if !p.resend && s.cfg.ResendAfter > 0 {
		p.resend, p.due = true, time.Now().Add(s.cfg.ResendAfter).UnixNano()
		s.local = append(s.local, p)
	}
	s.m.CDN.Queue.Set(float64(len(s.queue) + len(s.local)))
	s.mu.Unlock()
	return 0
}

// head is the next purge to send: a resend that is due, else the first
// records of the queue once the fleet has applied them (and they are not
// behind the cursor), merged (merge): n of them. Else due is how long
// until something may be.
func (s *Sender) head() (p Purge, n int, due time.Duration, ok bool) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	due = idle
	if len(s.resends) > 0 {
		r := s.resends[0]
		if r.due <= now {
			return r, 0, 0, true
		}
		due = time.Duration(r.due - now)
	}
	if s.fleet != nil {
		if !s.trimLocked() {
			return Purge{}, 0, due, false
		}
		if len(s.queue) == 0 {
			return Purge{}, 0, due, false
		}
		applied, err := s.fleet.AppliedByAll()
		if err != nil || applied < s.queue[0].Seq {
			return Purge{}, 0, min(due, 50*time.Millisecond), false
		}
		p, n = merge(s.queue, applied, s.limit())
		return p, n, 0, true
	}
	if len(s.queue) == 0 {
		return Purge{}, 0, due, false
	}
	p, n = merge(s.queue, math.MaxInt64, s.limit())
	return p, n, 0, true
}

// merge is the first records of q that every live node has applied (seq
// at most applied) and that are as soft as the first, as one purge of at
// most limit tags (one request: a sender that dies mid-way leaves little
// to send again): the union of their tags in order, numbered as the last
// of them. Sending
// them together is what sending each would have been, since each is
// applied everywhere by now, and in the log's order. A node that sees a
// reorganization purges it twice when the fork search runs (a partial
// purge, then the whole), two records of the log naming the same tags:
// merged, they are one request and its resend. (The other nodes, which
// see the reorganization again, publish theirs later: see docs/cdn.md.)
func merge(q []Purge, applied int64, limit int) (Purge, int) {
	first := q[0]
	p := Purge{Seq: first.Seq, At: first.At, Soft: first.Soft, Tags: slices.Clone(first.Tags), ats: []int64{first.At}}
	seen := map[string]bool{}
	for _, t := range first.Tags {
		seen[t] = true
	}
	n := 1
	for ; n < len(q) && q[n].Seq <= applied && q[n].Soft == first.Soft; n++ {
		var more []string
		for _, t := range q[n].Tags {
			if !seen[t] && !slices.Contains(more, t) {
				more = append(more, t)
			}
		}
		if len(p.Tags)+len(more) > limit {
			break
		}
		for _, t := range more {
			seen[t] = true
		}
		p.Tags = append(p.Tags, more...)
		p.Seq = q[n].Seq
		p.ats = append(p.ats, q[n].At)
	}
	if n == 1 {
		return first, 1
	}
	return p, n
}

// trim drops from the queue what the fleet's cursor says the CDN has
// acknowledged (sent by the node holding the lease).
func (s *Sender) trim() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trimLocked()
}

// trimLocked is trim with mu held; false when the cursor could not be
// read.
func (s *Sender) trimLocked() bool {
	cursor, err := s.fleet.CDNCursor()
	if err != nil {
		return false
	}
	i := 0
	for i < len(s.queue) && s.queue[i].Seq > 0 && s.queue[i].Seq <= cursor {
		i++
	}
	s.queue = s.queue[i:]
	s.m.CDN.Queue.Set(float64(len(s.queue)))
	return true
}

// send sends p in batches of the provider's limit until every batch is
// acknowledged; false when the sender closed first or lost its lease.
func (s *Sender) send(p Purge) bool {
	limit := s.limit()
	soft := p.Soft && s.cfg.Soft
	for start := 0; start < len(p.Tags); start += limit {
		batch := p.Tags[start:min(start+limit, len(p.Tags))]
		backoff := 100 * time.Millisecond
		for {
			if err := s.bucket.Wait(s.ctx()); err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(s.ctx(), s.cfg.Timeout)
			err := s.p.send(ctx, batch, soft)
			cancel()
			outcome := outcomeOf(err)
			s.m.CDN.Requests.WithLabelValues(outcome).Inc()
			if err == nil {
				break
			}
			wait := backoff
			var ra *retryAfter
			if errors.As(err, &ra) {
				wait = max(ra.d, wait)
			} else {
				backoff = min(2*backoff, 30*time.Second)
			}
			s.log.Warn("CDN purge not acknowledged; retried", "provider", s.cfg.Provider, "outcome", outcome,
				"seq", p.Seq, "tags", len(batch), "retry_in", wait.String(), "err", err)
			select {
			case <-s.closed:
				return false
			case <-time.After(wait):
			}
			if s.fleet != nil && !p.local && !s.fleet.HoldCDNLease(s.cfg.Lease) {
				return false
			}
		}
	}
	if !p.resend {
		now := s.now()
		if p.ats == nil {
			s.m.CDN.Lag.Observe(now.Sub(time.Unix(0, p.At)).Seconds())
		}
		for _, at := range p.ats {
			s.m.CDN.Lag.Observe(now.Sub(time.Unix(0, at)).Seconds())
		}
	}
	return true
}

// limit is the most tags of one request (cdn.batch_tags, else the
// provider's).
func (s *Sender) limit() int {
	if s.cfg.BatchTags > 0 {
		return s.cfg.BatchTags
	}
	return s.p.maxTags()
}

// ctx is a context ended by Close.
func (s *Sender) ctx() context.Context { return s.base }

// retryAfter is a provider's refusal for rate (429, or 503 with
// Retry-After): wait d before the next request.
type retryAfter struct {
	status int
	d      time.Duration
}

func (r *retryAfter) Error() string {
	return "HTTP " + strconv.Itoa(r.status) + ", Retry-After " + r.d.String()
}

// statusError is a provider's refusal other than for rate.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return "HTTP " + strconv.Itoa(e.status) + ": " + e.body }

// outcomeOf is the outcome label of cdn_purge_requests_total.
func outcomeOf(err error) string {
	var ra *retryAfter
	var se *statusError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ra):
		return "throttled"
	case errors.As(err, &se) && se.status >= 500:
		return "server_error"
	case errors.As(err, &se):
		return "refused"
	}
	return "unreachable"
}
