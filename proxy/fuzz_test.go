package proxy

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/metrics"
)

var fuzzChains = []string{"CHAINX", "TRADE_ZONE"}

// FuzzParams: every query either fails with an envelope naming one of the
// route's parameters, or normalizes to a key that is a fixed point (parsing
// the key again gives the key) and holds only the route's parameters.
func FuzzParams(f *testing.F) {
	for _, s := range []string{
		"chainShortName=chainx&limit=20",
		"chainShortName=%20CHAINX&height=0012&page=1",
		"chainShortName=trade_zone&txId=0x" + strings.Repeat("a", 64) + ",0X" + strings.Repeat("B", 64),
		"chainShortName=chainx&tokenContractAddress=0x" + strings.Repeat("1", 40) + "&holderAddress=",
		"txid=0x12&chainShortName=chainx",
		"chainShortName=chainx&protocolType=TOKEN_20&height=5",
	} {
		for i := range routes {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, ri uint8, raw string) {
		r := &routes[int(ri)%len(routes)]
		var args fasthttp.Args
		args.Parse(raw)
		var q query
		err := q.parse(r, &args, fuzzChains)
		if err != nil {
			if err.Code != "50014" && err.Code != "50036" && err.Code != "50025" {
				t.Fatalf("code %s for %q", err.Code, raw)
			}
			named := false
			for _, p := range r.params {
				if strings.Contains(err.Msg, p.name) {
					named = true
				}
			}
			if !named || err.Status != 400 {
				t.Fatalf("error %+v names no parameter of %s", err, r.name)
			}
			return
		}
		key := append([]byte(nil), q.key...)
		path, rawQuery, ok := bytes.Cut(key, []byte("?"))
		if !ok || string(path) != r.path {
			t.Fatalf("key %q", key)
		}
		var again fasthttp.Args
		again.ParseBytes(rawQuery)
		again.VisitAll(func(k, _ []byte) {
			known := false
			for _, p := range r.params {
				known = known || p.name == string(k)
			}
			if !known {
				t.Fatalf("key %q holds unknown parameter %q", key, k)
			}
		})
		var q2 query
		if err := q2.parse(r, &again, fuzzChains); err != nil || !bytes.Equal(q2.key, key) {
			t.Fatalf("key %q is not a fixed point: %q, %v", key, q2.key, err)
		}
		for i := 0; i < q.nHashes; i++ {
			h := q.hash(i)
			if len(h) != 66 || !bytes.Equal(h, bytes.ToLower(h)) {
				t.Fatalf("hash %q not normalized", h)
			}
		}
	})
}

// FuzzVerify: no header set is accepted unless it carries the client's
// exact signature of the request target; nothing panics.
func FuzzVerify(f *testing.F) {
	m := metrics.New(RouteNames(), fuzzChains, nopStats{})
	a, err := newAdmission(config.Auth{Mode: "signed", MaxSkew: 30 * time.Second, Clients: []config.Client{
		{Name: "web", APIKey: clientKey, SecretKey: clientSecret, Passphrase: clientPass}}}, m)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ts := "2026-01-02T03:04:05.000Z"
	uri := "/api/v5/chainx/block/block-list?chainShortName=chainx"
	f.Add(clientKey, clientPass, sign(clientSecret, ts, uri), ts, uri)
	f.Add(clientKey, clientPass, "x", "2026-01-02T03:04:05Z", uri)
	f.Add("", "", "", "", "/")
	f.Fuzz(func(t *testing.T, key, pass, sig, stamp, target string) {
		var h fasthttp.RequestHeader
		h.SetRequestURI(target)
		h.Set("SVC-ACCESS-KEY", key)
		h.Set("SVC-ACCESS-PASSPHRASE", pass)
		h.Set("SVC-ACCESS-SIGN", sig)
		h.Set("SVC-ACCESS-TIMESTAMP", stamp)
		c, err := a.verify(&h, now)
		if err != nil {
			if err.Status != 401 {
				t.Fatalf("status %d", err.Status)
			}
			return
		}
		if c.name != "web" || string(h.Peek("SVC-ACCESS-SIGN")) != sign(clientSecret, string(h.Peek("SVC-ACCESS-TIMESTAMP")), string(h.RequestURI())) {
			t.Fatalf("accepted a request without the client's signature: %q %q %q", sig, stamp, target)
		}
	})
}

type nopStats struct{}

func (nopStats) Bytes() int64     { return 0 }
func (nopStats) Entries() int64   { return 0 }
func (nopStats) Evictions() int64 { return 0 }
func (nopStats) MaxBytes() int64  { return 0 }
