package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Faults describes the faults injected into answers. Fractions are of
// answers (0 none, 1 every one) and are exclusive: at most one kind per
// answer, so their sum is at most 1. Latency applies on top of any kind.
// Faults apply after stats are counted and after auth, so 401s are never
// faulted.
//
// In JSON, durations are Go duration strings ("250ms"):
//
//	{"route":"", "latency":"0s", "jitter":"0s", "http500":0, "http429":0,
//	 "retry_after":1, "envelope":0, "envelope_code":"50026",
//	 "envelope_vendor":false, "hang":0,
//	 "drop":0, "malformed":0, "truncated":0, "oversized":0, "oversized_bytes":0,
//	 "gzip_bomb":0, "gzip_bomb_bytes":0, "reorg":0}
type Faults struct {
	Route        string        // one route name, or "" for all six
	Latency      time.Duration // added before every answer of the route
	Jitter       time.Duration // plus a uniform random [0, Jitter)
	HTTP500      float64       // HTTP 500 with an envelope, code 50026
	HTTP429      float64       // HTTP 429, Retry-After: RetryAfter, envelope code 50011
	RetryAfter   int           // seconds; 0 means 1
	Envelope     float64       // HTTP 200 with {"code":EnvelopeCode,...,"data":[]}
	EnvelopeCode string        // "" means "50026"
	Hang         float64       // never answer until the client goes or the server closes
	Drop         float64       // close the connection without answering
	Malformed    float64       // HTTP 200 with a body that is not JSON
	Truncated    float64       // HTTP 200, the JSON cut in half (Content-Length matches the cut)
	Oversized    float64       // HTTP 200, the real JSON led by spaces up to OversizedBytes
	// OversizedBytes is the size of an oversized answer; 0 means 9 MiB,
	// beyond explorer-edge's default upstream.max_response_bytes of 8 MiB.
	OversizedBytes int
	// GzipBomb answers HTTP 200 with Content-Encoding: gzip, whatever the
	// request accepts: a body of tens of KB that decodes to GzipBombBytes,
	// an envelope of code "0" whose data array is led by that many spaces
	// (so it fits no route's answer). An upstream may compress unasked;
	// the edge must bound what it inflates (upstream.max_response_bytes
	// applies to the decoded size too).
	GzipBomb float64
	// GzipBombBytes is the decoded size of a gzip bomb; 0 means 64 MiB. The
	// compressed bytes are built once per size and reused (bomb.go).
	GzipBombBytes int
	// EnvelopeVendor answers the envelope fault as the vendor documents
	// EnvelopeCode: its HTTP status (50013 "busy" 200, 50030 403, 50100
	// 400, 50102-50113 401, ...) and its message (vendor.go). Off, the
	// envelope comes with HTTP 200 whatever the code, as it always did.
	EnvelopeVendor bool
	// Reorg, when > 0, reorganizes every chain once, as the faults are set:
	// the newest Reorg blocks are replaced by others (new hashes, other
	// transactions; those of the replaced blocks are gone). It is an event,
	// not a state: Faults() reports 0 afterwards, and setting it again
	// reorganizes again (reorg.go).
	Reorg int
}

type faultsJSON struct {
	Route        string  `json:"route"`
	Latency      string  `json:"latency"`
	Jitter       string  `json:"jitter"`
	HTTP500      float64 `json:"http500"`
	HTTP429      float64 `json:"http429"`
	RetryAfter   int     `json:"retry_after"`
	Envelope     float64 `json:"envelope"`
	EnvelopeCode string  `json:"envelope_code"`
	EnvelopeVend bool    `json:"envelope_vendor"`
	Hang         float64 `json:"hang"`
	Drop         float64 `json:"drop"`
	Malformed    float64 `json:"malformed"`
	Truncated    float64 `json:"truncated"`
	Oversized    float64 `json:"oversized"`
	OversizedB   int     `json:"oversized_bytes"`
	GzipBomb     float64 `json:"gzip_bomb"`
	GzipBombB    int     `json:"gzip_bomb_bytes"`
	Reorg        int     `json:"reorg"`
}

// MarshalJSON writes durations as Go duration strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		f.Route, f.Latency.String(), f.Jitter.String(), f.HTTP500, f.HTTP429, f.RetryAfter,
		f.Envelope, f.EnvelopeCode, f.EnvelopeVendor, f.Hang, f.Drop, f.Malformed, f.Truncated,
		f.Oversized, f.OversizedBytes, f.GzipBomb, f.GzipBombBytes, f.Reorg,
	})
}

// UnmarshalJSON reads what MarshalJSON writes; absent fields are zero, and
// unknown fields are an error so a typo does not silently inject nothing.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	var out Faults
	var err error
	if j.Latency != "" {
		if out.Latency, err = time.ParseDuration(j.Latency); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if j.Jitter != "" {
		if out.Jitter, err = time.ParseDuration(j.Jitter); err != nil {
			return fmt.Errorf("jitter: %w", err)
		}
	}
	out.Route, out.HTTP500, out.HTTP429, out.RetryAfter = j.Route, j.HTTP500, j.HTTP429, j.RetryAfter
	out.Envelope, out.EnvelopeCode, out.Hang, out.Drop = j.Envelope, j.EnvelopeCode, j.Hang, j.Drop
	out.EnvelopeVendor = j.EnvelopeVend
	out.Malformed, out.Truncated = j.Malformed, j.Truncated
	out.Oversized, out.OversizedBytes = j.Oversized, j.OversizedB
	out.GzipBomb, out.GzipBombBytes = j.GzipBomb, j.GzipBombB
	out.Reorg = j.Reorg
	*f = out
	return nil
}

func (f Faults) fractions() []float64 {
	return []float64{f.HTTP500, f.HTTP429, f.Envelope, f.Hang, f.Drop, f.Malformed, f.Truncated, f.Oversized, f.GzipBomb}
}

// Validate reports every problem of f at once.
func (f Faults) Validate() error {
	var errs []error
	if f.Route != "" {
		known := false
		for _, rt := range routeTable {
			known = known || rt.name == f.Route
		}
		if !known {
			errs = append(errs, fmt.Errorf("route %q is not a route name", f.Route))
		}
	}
	if f.EnvelopeVendor {
		code := f.EnvelopeCode
		if code == "" {
			code = codeServer
		}
		if _, ok := LookupVendorCode(code); !ok {
			errs = append(errs, fmt.Errorf("envelope_code %q is not in the vendor's table, so envelope_vendor has no status for it", code))
		}
	}
	if f.Latency < 0 || f.Jitter < 0 {
		errs = append(errs, errors.New("latency and jitter must not be negative"))
	}
	if f.RetryAfter < 0 {
		errs = append(errs, errors.New("retry_after must not be negative"))
	}
	if f.Reorg < 0 || f.Reorg > maxReorg {
		errs = append(errs, fmt.Errorf("reorg must be in [0, %d] blocks", maxReorg))
	}
	if f.OversizedBytes < 0 || f.OversizedBytes > 1<<30 {
		errs = append(errs, errors.New("oversized_bytes must be in [0, 1 GiB]"))
	}
	if f.GzipBombBytes < 0 || f.GzipBombBytes > 1<<30 {
		errs = append(errs, errors.New("gzip_bomb_bytes must be in [0, 1 GiB]"))
	}
	sum := 0.0
	names := []string{"http500", "http429", "envelope", "hang", "drop", "malformed", "truncated", "oversized", "gzip_bomb"}
	for i, v := range f.fractions() {
		if v < 0 || v > 1 || v != v {
			errs = append(errs, fmt.Errorf("%s = %v is not a fraction in [0, 1]", names[i], v))
		}
		sum += v
	}
	if sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("fractions add up to %v; at most one fault per answer, so at most 1", sum))
	}
	return errors.Join(errs...)
}

// normalized fills the defaults and clamps fractions into [0, 1].
func (f Faults) normalized() Faults {
	if f.RetryAfter <= 0 {
		f.RetryAfter = 1
	}
	if f.EnvelopeCode == "" {
		f.EnvelopeCode = codeServer
	}
	if f.OversizedBytes <= 0 {
		f.OversizedBytes = 9 << 20
	}
	if f.GzipBombBytes <= 0 {
		f.GzipBombBytes = defaultGzipBombBytes
	}
	f.Latency, f.Jitter = max(f.Latency, 0), max(f.Jitter, 0)
	for _, p := range []*float64{&f.HTTP500, &f.HTTP429, &f.Envelope, &f.Hang, &f.Drop, &f.Malformed, &f.Truncated, &f.Oversized, &f.GzipBomb} {
		if !(*p >= 0) { // also NaN
			*p = 0
		}
		*p = min(*p, 1)
	}
	return f
}

// maxReorg bounds the depth of a reorganization.
const maxReorg = 1000

// Fault kinds, in the order pick draws them.
const (
	faultHTTP500 = iota
	faultHTTP429
	faultEnvelope
	faultHang
	faultDrop
	faultMalformed
	faultTruncated
	faultOversized
	faultGzipBomb
	faultNone
)

// pick draws the fault kind of one answer.
func (f Faults) pick() int {
	u := rand.Float64()
	acc := 0.0
	for kind, v := range f.fractions() {
		acc += v
		if v > 0 && u < acc {
			return kind
		}
	}
	return faultNone
}

func (f Faults) latency() time.Duration {
	d := f.Latency
	if f.Jitter > 0 {
		d += rand.N(f.Jitter)
	}
	return d
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	return s.faults
}

// SetFaults replaces the faults in force. Defaults are filled in and
// out-of-range fractions clamped; use Faults.Validate to reject them instead.
func (s *Server) SetFaults(f Faults) {
	f = f.normalized()
	s.Reorg(min(f.Reorg, maxReorg))
	f.Reorg = 0
	if f.GzipBomb > 0 {
		s.gzipBomb(f.GzipBombBytes) // built now, not in the first answer
	}
	s.faultsMu.Lock()
	s.faults = f
	s.faultsMu.Unlock()
	js, _ := json.Marshal(f)
	s.log.Info("faults set", "faults", string(js))
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.SetFaults(Faults{}) }
