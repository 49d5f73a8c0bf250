package route

import (
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
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
		for i := range Table {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, ri uint8, raw string) {
		r := &Table[int(ri)%len(Table)]
		var args fasthttp.Args
		args.Parse(raw)
		var q Params
		err := q.Parse(r, &args, fuzzChains)
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
				t.Fatalf("error %+v names no parameter of %s", err, r.Name)
			}
			return
		}
		key := append([]byte(nil), q.Key...)
		path, rawQuery, ok := bytes.Cut(key, []byte("?"))
		if !ok || string(path) != r.Path {
			t.Fatalf("key %q", key)
		}
		var again fasthttp.Args
		again.ParseBytes(rawQuery)
		for k := range again.All() {
			known := false
			for _, p := range r.params {
				known = known || p.name == string(k)
			}
			if !known {
				t.Fatalf("key %q holds unknown parameter %q", key, k)
			}
		}
		var q2 Params
		if err := q2.Parse(r, &again, fuzzChains); err != nil || !bytes.Equal(q2.Key, key) {
			t.Fatalf("key %q is not a fixed point: %q, %v", key, q2.Key, err)
		}
		for i := 0; i < q.NHashes; i++ {
			h := q.Hash(i)
			if len(h) != 66 || !bytes.Equal(h, bytes.ToLower(h)) {
				t.Fatalf("hash %q not normalized", h)
			}
		}
	})
}
