package config

import (
	"os"
	"reflect"
	"testing"
)

// FuzzConfig feeds arbitrary YAML to the loader. Properties: nothing
// panics, neither Parse nor Validate; a document either fails with an error
// or decodes, and decoding is deterministic; Validate of a decoded config
// either passes or says what is wrong.
func FuzzConfig(f *testing.F) {
	shipped, err := os.ReadFile("../config.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	for _, s := range []string{
		"",
		"listen: \":9000\"\nchains: CHAINX,TRADE_ZONE\n",
		"cache:\n  ttl:\n    block-list:\n      head: 2s\n    nope:\n      final: 1h\n",
		"auth:\n  mode: signed\n  clients:\n    - name: web\n      api_key: k\n      secret_key: s\n      passphrase: p\n",
		"upstream:\n  rate: fast\n",
		"upstream: [1, 2]\n",
		"cache: {max_bytes: -1, policy: route}\n",
		"shared: {enabled: true, addrs: [127.0.0.1:6379], local_share: 2}\n",
		"a: &x [*x]\n",
		"server:\n  read_timeout: 1h1h1h\n  max_url_bytes: 1e400\n",
		"\t- :\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := Parse(doc)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error that says nothing")
			}
			return
		}
		again, err := Parse(doc)
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("decoding is not deterministic: %v", err)
		}
		if err := c.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("a validation error that says nothing")
			}
			return
		}
		// A config Validate passes can be served.
		if c.Cache.MaxBytes <= 0 || c.Upstream.Rate <= 0 || c.Upstream.Timeout <= 0 || c.Listen == c.AdminListen || len(c.Chains) == 0 {
			t.Fatalf("Validate passed %+v", c)
		}
	})
}
