package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// counts are the answers of one stage of the run (warm-up or load).
type counts struct {
	requests       atomic.Int64
	status         [600]atomic.Int64
	otherStatus    atomic.Int64
	stale          atomic.Int64 // Cache-Status says stale
	staleErr       atomic.Int64 // ... stale-if-error: served because the upstream failed
	failures       atomic.Int64 // 502/503/504 for an upstream failure, while faults were in force
	quota          atomic.Int64 // 503/50001 "upstream quota spent": the budget binds, faults or not
	notModified    atomic.Int64 // correct 304s
	envelopes      atomic.Int64 // 200 with an injected error envelope passed through
	upstream400    atomic.Int64 // 400s passed through from the upstream
	clientErrors   atomic.Int64
	wrong          atomic.Int64
	withINM        atomic.Int64
	withGzip       atomic.Int64
	gzipped        atomic.Int64
	invalidSent    atomic.Int64
	traced         atomic.Int64 // sent with a sampled traceparent (the traced phase)
	withTraceState atomic.Int64
}

func (c *counts) byStatus() map[int]int64 {
	out := map[int]int64{}
	for i := range c.status {
		if n := c.status[i].Load(); n > 0 {
			out[i] = n
		}
	}
	if n := c.otherStatus.Load(); n > 0 {
		out[-1] = n
	}
	return out
}

// sent is what a request carried beside its target.
type sent struct {
	gzip  bool
	inm   string // If-None-Match sent; "" none
	bogus bool   // inm is a tag the edge never gave
}

// wrongAnswer is one answer that a correct edge could not have given.
type wrongAnswer struct {
	at      time.Duration // since the start of the run
	why     string
	target  string
	sent    sent
	status  int
	headers string
	body    string
	want    string
}

// checker decides whether each answer is right and keeps the first wrong ones.
type checker struct {
	t0     time.Time
	tl     *timeline
	mu     sync.Mutex
	wrongs []wrongAnswer
	errs   []string // first client errors
}

const keepWrong = 10

func (ck *checker) clientError(c *counts, t *target, err error) {
	c.clientErrors.Add(1)
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if len(ck.errs) < keepWrong {
		ck.errs = append(ck.errs, fmt.Sprintf("+%.1fs %s: %v", time.Since(ck.t0).Seconds(), t.path, err))
	}
}

func (ck *checker) wrong(c *counts, t *target, s sent, resp *fasthttp.Response, body []byte, start time.Time, why string) {
	c.wrong.Add(1)
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if len(ck.wrongs) >= keepWrong {
		return
	}
	w := wrongAnswer{at: start.Sub(ck.t0), why: why, target: t.path, sent: s, status: resp.StatusCode()}
	var hs []string
	for k, v := range resp.Header.All() {
		hs = append(hs, string(k)+": "+string(v))
	}
	sort.Strings(hs)
	w.headers = strings.Join(hs, "; ")
	w.body = clip(body, 200)
	if t.invalid {
		w.want = fmt.Sprintf("%d with code %s", invalidStatus(t.wantCode), t.wantCode)
	} else {
		w.want = fmt.Sprintf("%d code %s: %s", t.refStatus, t.refCode, clip(t.refBody, 200))
	}
	ck.wrongs = append(ck.wrongs, w)
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}

// invalidStatus is the HTTP status of the edge's refusal with code: the
// vendor's (50025 comes with 200).
func invalidStatus(code string) int {
	if code == "50025" {
		return 200
	}
	return 400
}

// errorEnvelope decodes {"code":"<non-zero>","msg":"...","data":[]}
// strictly: exactly these three keys, of these types.
func errorEnvelope(body []byte) (code, msg string, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || len(m) != 3 {
		return "", "", false
	}
	var data []any
	if json.Unmarshal(m["code"], &code) != nil || json.Unmarshal(m["msg"], &msg) != nil ||
		json.Unmarshal(m["data"], &data) != nil || data == nil || len(data) != 0 {
		return "", "", false
	}
	return code, msg, code != "" && code != "0"
}

// upstreamFailure reports whether status/code is one of the edge's answers
// to a failed upstream call (README.md, Errors).
func upstreamFailure(status int, code string) bool {
	switch status {
	case 502:
		return code == "50026"
	case 503:
		return code == "50001"
	case 504:
		return code == "50004"
	}
	return false
}

// check judges one answer of the edge to a request for t sent from start to
// end.
func (ck *checker) check(c *counts, pc *phaseCounts, t *target, s sent, resp *fasthttp.Response, start, end time.Time) {
	if pc == nil {
		pc = &phaseCounts{} // the warm-up: counted in c only
	}
	pc.requests.Add(1)
	status := resp.StatusCode()
	if status >= 0 && status < len(c.status) {
		c.status[status].Add(1)
	} else {
		c.otherStatus.Add(1)
	}
	if cs := resp.Header.Peek("Cache-Status"); bytes.Contains(cs, []byte("stale")) {
		c.stale.Add(1)
		pc.stale.Add(1)
		if bytes.Contains(cs, []byte("stale-if-error")) {
			c.staleErr.Add(1)
			pc.staleErr.Add(1)
		}
	}
	body := resp.Body()
	if ce := resp.Header.Peek(fasthttp.HeaderContentEncoding); len(ce) > 0 {
		if !s.gzip || string(ce) != "gzip" {
			ck.wrong(c, t, s, resp, body, start, "Content-Encoding "+string(ce)+" not asked for")
			return
		}
		c.gzipped.Add(1)
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			// Bounded: an edge that passed a gzip bomb on must not
			// make the soak inflate it.
			body, err = io.ReadAll(io.LimitReader(zr, maxResponseBytes+1))
		}
		if err != nil {
			ck.wrong(c, t, s, resp, resp.Body(), start, "gzip body does not decompress: "+err.Error())
			return
		}
	}
	if len(body) > maxResponseBytes {
		// No real answer is near it: only an oversized or inflated one.
		ck.wrong(c, t, s, resp, body, start, fmt.Sprintf("an answer of more than upstream.max_response_bytes (%d bytes): an oversized or gzip-bomb answer served", maxResponseBytes))
		return
	}
	etag := string(resp.Header.Peek(fasthttp.HeaderETag))
	noStore := string(resp.Header.Peek(fasthttp.HeaderCacheControl)) == "no-store"

	if t.invalid {
		code, _, ok := errorEnvelope(body)
		switch {
		case !ok:
			ck.wrong(c, t, s, resp, body, start, "invalid request: answer is not an error envelope")
		case status != invalidStatus(t.wantCode) || code != t.wantCode:
			ck.wrong(c, t, s, resp, body, start, fmt.Sprintf("invalid request: got %d/%s, want %d/%s", status, code, invalidStatus(t.wantCode), t.wantCode))
		case !noStore:
			ck.wrong(c, t, s, resp, body, start, "error without Cache-Control: no-store")
		}
		return
	}

	switch status {
	case 304:
		switch {
		case s.inm == "":
			ck.wrong(c, t, s, resp, body, start, "304 without If-None-Match")
		case s.bogus:
			ck.wrong(c, t, s, resp, body, start, "304 for an ETag the edge never gave")
		case etag != s.inm:
			ck.wrong(c, t, s, resp, body, start, "304 whose ETag is not the one asked for")
		default:
			c.notModified.Add(1)
			pc.good.Add(1)
		}
		return
	case 200:
		if t.refStatus == 200 && t.knownGood(body) {
			ck.goodOK(c, pc, t, s, resp, body, etag, start)
			return
		}
		var got any
		if err := json.Unmarshal(body, &got); err != nil {
			ck.wrong(c, t, s, resp, body, start, "200 body is not JSON: "+err.Error())
			return
		}
		if m, _ := got.(map[string]any); m != nil && m["code"] != "0" {
			// Only an injected error envelope, passed through as it came.
			code, msg, ok := errorEnvelope(body)
			_, injected := ck.tl.during(start, end)
			switch {
			case !ok || msg != "injected error envelope":
				ck.wrong(c, t, s, resp, body, start, "200 with a non-zero code that is not an injected envelope")
			case !injected[code]:
				ck.wrong(c, t, s, resp, body, start, "200 with code "+code+" while no such envelope was injected")
			case !noStore:
				ck.wrong(c, t, s, resp, body, start, "passed-through envelope without Cache-Control: no-store")
			default:
				c.envelopes.Add(1)
				pc.envelopes.Add(1)
			}
			return
		}
		if t.refStatus != 200 {
			ck.wrong(c, t, s, resp, body, start, "200 where the upstream refuses the request")
			return
		}
		want, err := t.refValue()
		if err != nil {
			ck.wrong(c, t, s, resp, body, start, "reference not JSON: "+err.Error())
			return
		}
		if !reflect.DeepEqual(got, want) {
			ck.wrong(c, t, s, resp, body, start, "200 body differs from the reference")
			return
		}
		t.addGood(body)
		ck.goodOK(c, pc, t, s, resp, body, etag, start)
		return
	}

	code, msg, ok := errorEnvelope(body)
	if !ok {
		ck.wrong(c, t, s, resp, body, start, fmt.Sprintf("%d answer is not an error envelope", status))
		return
	}
	// The upstream's own refusal of the question may come from the cache,
	// stored for the route's negative time; any other error is no-store.
	refusal := status == 400 && t.refStatus == 400 && code == t.refCode
	cc := string(resp.Header.Peek(fasthttp.HeaderCacheControl))
	if !noStore && !(refusal && strings.HasPrefix(cc, "public, max-age=")) {
		ck.wrong(c, t, s, resp, body, start, "error without Cache-Control: no-store")
		return
	}
	switch {
	case refusal:
		c.upstream400.Add(1) // the upstream's own refusal, passed through
	case status == 503 && code == "50001" && strings.Contains(msg, "quota spent"):
		// The fleet's budget binds: the soak asks for more than the
		// upstream's rate, faults or not (the calls are checked against
		// the budget instead).
		if ra := resp.Header.Peek(fasthttp.HeaderRetryAfter); len(ra) > 0 {
			if n, err := strconv.Atoi(string(ra)); err != nil || n < 1 {
				ck.wrong(c, t, s, resp, body, start, "Retry-After is not a positive number of seconds")
				return
			}
		}
		c.quota.Add(1)
		pc.quota.Add(1)
	case upstreamFailure(status, code):
		faulty, _ := ck.tl.during(start, end)
		if !faulty {
			ck.wrong(c, t, s, resp, body, start, fmt.Sprintf("%d/%s while no fault was in force (for %v before)", status, code, grace))
			return
		}
		if ra := resp.Header.Peek(fasthttp.HeaderRetryAfter); len(ra) > 0 {
			if n, err := strconv.Atoi(string(ra)); err != nil || n < 1 {
				ck.wrong(c, t, s, resp, body, start, "Retry-After is not a positive number of seconds")
				return
			}
		}
		c.failures.Add(1)
		pc.failures.Add(1)
	default:
		ck.wrong(c, t, s, resp, body, start, fmt.Sprintf("%d/%s is not an answer the edge may give here", status, code))
	}
}

// goodOK finishes a 200 whose body is correct: the headers of a stored answer.
func (ck *checker) goodOK(c *counts, pc *phaseCounts, t *target, s sent, resp *fasthttp.Response, body []byte, etag string, start time.Time) {
	if etag == "" {
		ck.wrong(c, t, s, resp, body, start, "200 without ETag")
		return
	}
	if !t.noteETag(etag, body) {
		ck.wrong(c, t, s, resp, body, start, "the same ETag came with another body")
		return
	}
	if s.inm != "" && !s.bogus && s.inm == etag {
		ck.wrong(c, t, s, resp, body, start, "full answer although If-None-Match matched its ETag")
		return
	}
	pc.good.Add(1)
}
