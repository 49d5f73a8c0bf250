package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestRedactedHidesEverySecret: every key that names a secret, wherever
// it is (a list's items included, any such key added later), shows
// "xxxxx" in Redacted; its value appears nowhere, not even inside another
// value or in a URL's user info; the hash ignores what a secret is, only
// whether it is set.
func TestRedactedHidesEverySecret(t *testing.T) {
	c := Default()
	c.Upstream.Accounts = []Account{{Name: "second"}}
	c.Auth.Clients = []Client{{Name: "web"}}
	var secrets []string
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Field(i)
				if f.Kind() == reflect.String && secretName(v.Type().Field(i).Tag.Get("koanf")) {
					s := fmt.Sprintf("secret-value-%02d-never-shown", len(secrets))
					f.SetString(s)
					secrets = append(secrets, s)
					continue
				}
				fill(f)
			}
		case reflect.Slice:
			for i := range v.Len() {
				fill(v.Index(i))
			}
		}
	}
	fill(reflect.ValueOf(&c).Elem())
	if len(secrets) < 8 {
		t.Fatalf("only %d secret keys found", len(secrets))
	}
	c.Shared.Prefix = "edge:" + secrets[0] + ":" // a secret inside another value
	c.Shared.RedisAddr = "redis://default:userinfo-password@redis:6379"
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, s := range append(secrets, "userinfo-password") {
		if strings.Contains(out, s) {
			t.Errorf("Redacted shows %s:\n%s", s, out)
		}
	}
	for _, want := range []string{`"secret_key":"xxxxx"`, `"redis_password":"xxxxx"`, `"purge_token":"xxxxx"`, `"redis_addr":"redis://xxxxx@redis:6379"`,
		`"timeout":"5s"`, `"top_sample":64`, `"secret_key_file":""`} {
		if !strings.Contains(out, want) {
			t.Errorf("Redacted lacks %s:\n%s", want, out)
		}
	}
	h := c.RedactedHash()
	rotated := c
	rotated.Shared.RedisPassword = "another-secret-value"
	unset := c
	unset.Shared.RedisPassword = ""
	changed := c
	changed.Upstream.Rate++
	switch {
	case len(h) != 64 || c.RedactedHash() != h:
		t.Errorf("hash %q not a stable sha256", h)
	case rotated.RedactedHash() != h:
		t.Errorf("a rotated secret changed the hash")
	case unset.RedactedHash() == h || changed.RedactedHash() == h:
		t.Errorf("a secret unset or a rate changed kept the hash")
	}
}
