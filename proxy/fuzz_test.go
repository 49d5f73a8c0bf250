package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"explorer-edge/cache"
	"explorer-edge/config"
	"explorer-edge/metrics"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/route"
	"explorer-edge/proxy/upstream"
)

var fuzzChains = []string{"CHAINX", "TRADE_ZONE"}

// Hashes FuzzUpstreamAnswer asks per-hash answers for.
var fuzzAsked = []string{
	"0x" + strings.Repeat("a1", 32),
	"0x" + strings.Repeat("b2", 32),
	"0x" + strings.Repeat("c3", 32),
}

// FuzzUpstreamAnswer feeds arbitrary bytes, with one of several statuses,
// as the upstream's answer to each route, through the whole store path
// (envelope check, TTL classification, entry and gzip) and through the
// per-hash splitting of transaction-multi. Properties: nothing panics; only
// a whole JSON envelope of code "0" with status 200 is cached, byte for
// byte; anything else is passed through with its status or is a 50026; a
// per-hash record is filed only under the hash its id names, and either
// every record of the answer is filed or none is.
func FuzzUpstreamAnswer(f *testing.F) {
	cfg := config.Default()
	cfg.Upstream.APIKey, cfg.Upstream.SecretKey, cfg.Upstream.Passphrase = "k", "s", "p"
	cfg.Upstream.BaseURL = "http://127.0.0.1:1"
	c, err := cache.New(cache.Config{MaxBytes: 8 << 20})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	p, err := New(cfg, Options{Cache: c, Metrics: metrics.New(route.Names(), cfg.Chains, c)})
	if err != nil {
		f.Fatal(err)
	}
	s := p.settings.Load()
	raw := [route.Count]string{
		"chainShortName=chainx&tokenContractAddress=0x" + strings.Repeat("1", 40),
		"chainShortName=chainx&height=100",
		"chainShortName=chainx&height=100",
		"chainShortName=chainx&txId=" + strings.Join(fuzzAsked, ","),
		"chainShortName=chainx&txid=" + fuzzAsked[0],
		"chainShortName=chainx&txId=" + fuzzAsked[1],
	}
	var keys [route.Count]string
	for i := range route.Table {
		var args fasthttp.Args
		args.Parse(raw[i])
		var q query
		if err := q.Parse(&route.Table[i], &args, s.chains); err != nil {
			f.Fatalf("%s: %v", route.Table[i].Name, err)
		}
		keys[i] = string(q.Key)
	}
	rec := func(id, status string) string {
		return `{"id":"` + id + `","status":"` + status + `","fromChain":"CHAINX"}`
	}
	for _, body := range []string{
		`{"code":"0","msg":"","data":[]}`,
		`{"code":"0","msg":"","data":[` + rec(fuzzAsked[0], "done") + `,` + rec(strings.ToUpper(fuzzAsked[1]), "") + `]}`,
		`{"code":"0","msg":"","data":[` + rec(" "+fuzzAsked[2]+" ", "done") + `,` + rec(fuzzAsked[2], "done") + `]}`,
		`{"code":"0","msg":"","data":[` + rec("0x"+strings.Repeat("d", 64), "done") + `]}`,
		`{"code":"0","msg":"","data":[1,"x",null]}`,
		`{"code":"0","msg":"","data":[{"page":"1","limit":"20","totalPage":"1","chainFullName":"X","chainShortName":"CHAINX","blockList":[{"height":"100","state":"done"},{"height":"99","state":"pending"}]}]}`,
		`{"code":"0","msg":"","data":[{"transactionList":[{"height":"7"}],"internalTransactionDetails":[]}]}`,
		`{"code":"50026","msg":"System error","data":[]}`,
		`{"code":50026,"msg":"numeric","data":[]}`,
		`{"code":"0","msg":"","data":{}}`,
		`{"code":"0","msg":"","data":[{"page":"1" "limit":}`,
		`{"code":"0","msg":"","data":[{"blockList":[{"height":"1`,
		"  \n" + `{"code":"0","data":[]}`,
		``,
		`null`,
	} {
		f.Add(uint8(0), []byte(body))
		f.Add(uint8(route.BlockList), []byte(body))
		f.Add(uint8(route.TransactionMulti), []byte(body))
	}
	// ri picks the route and, above the routes, the upstream's status.
	statuses := []int{200, 400, 429, 500, 502, 503}
	f.Add(uint8(route.Count+route.BlockList), []byte(`{"code":"0","msg":"","data":[]}`)) // 400 with code "0"
	f.Fuzz(func(t *testing.T, ri uint8, body []byte) {
		r := &route.Table[int(ri)%len(route.Table)]
		status := statuses[int(ri)/len(route.Table)%len(statuses)]
		code, codeErr := envelope.Code(body)
		if codeErr == nil && code == "0" && !json.Valid(body) {
			t.Fatalf("code 0 for invalid JSON %q", body)
		}
		// The call refuses what envelope.Code refuses (malformed, 502); the
		// store gets only answers it accepted, with their code.
		if codeErr == nil {
			var q query
			q.ParseKey(r, keys[r.ID])
			a := p.store(s, q.request(false, false), p.clock(), upstream.Answer{Status: status, Code: code, Body: body})
			switch {
			case a.entry != nil && a.entry.Status == 0:
				if held, err := a.entry.Inflate(nil); code != "0" || status != 200 || err != nil || !bytes.Equal(held, body) {
					t.Fatalf("cached an answer of status %d code %q, or not as it came", status, code)
				}
				if a.entry.Class > cache.Negative {
					t.Fatalf("class %v", a.entry.Class)
				}
			case a.entry != nil: // a refusal of the question or "no data", kept for the negative time
				cl := envelope.ClassOf(status, code)
				if (cl != envelope.ClassRefusal && cl != envelope.ClassNoData) || a.entry.Status != status || !bytes.Equal(a.entry.Body, body) {
					t.Fatalf("kept status %d code %q (%v) as a refusal", status, code, cl)
				}
			case envelope.ClassOf(status, code) == envelope.ClassFailure:
				// The upstream failing: the edge's own failure, never its
				// envelope as an answer.
				want := envelope.Failure(status, code)
				if a.status != want.Status || a.code != want.Code || bytes.Equal(a.body, body) {
					t.Fatalf("upstream failure status %d code %q answered %d %q, want the edge's %d %q", status, code, a.status, a.code, want.Status, want.Code)
				}
			default:
				if (code == "0" && status == 200) || a.status != status || !bytes.Equal(a.body, body) {
					t.Fatalf("passed through status %d code %q as %d", status, code, a.status)
				}
			}
		}
		if !json.Valid(body) {
			splitRecords(body, fuzzAsked) // must not panic; the edge never calls it so
			return
		}
		records, err := splitRecords(body, fuzzAsked)
		if err != nil {
			if !errors.Is(err, errUnmapped) {
				t.Fatalf("split: %v", err)
			}
			return
		}
		filed := 0
		for _, h := range fuzzAsked {
			recs, ok := records[h]
			if !ok {
				t.Fatalf("hash %s missing from the split", h)
			}
			if recs == nil {
				continue
			}
			var objs []map[string]any
			if err := json.Unmarshal(envelope.Wrap(recs)[len(`{"data":`):len(envelope.Wrap(recs))-1], &objs); err != nil {
				t.Fatalf("records of %s are not JSON objects: %q", h, recs)
			}
			for _, o := range objs {
				names := false // filed under a hash one of its fields holds
				for _, f := range recordHashFields {
					v, _ := o[f].(string)
					names = names || strings.ToLower(strings.TrimSpace(v)) == h
				}
				if !names {
					t.Fatalf("record %v filed under %s, which none of %v holds", o, h, recordHashFields)
				}
			}
			filed += len(objs)
			route.ClassifyCross(envelope.Wrap(recs))
		}
		if n, ok := countData(body); ok && filed != n {
			t.Fatalf("filed %d of %d records", filed, n)
		}
	})
}

// countData counts the elements of the first top-level "data" array of a
// valid JSON document, matching the key exactly as the edge's scanner does
// (encoding/json's Unmarshal would fold case and take the last duplicate).
func countData(body []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, false
		}
		if k != "data" {
			continue
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return 0, false
		}
		return len(elems), true
	}
	return 0, false
}
