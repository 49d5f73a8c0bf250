package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminPurgeToken(t *testing.T) {
	const token = "a-purge-token-of-32-characters!!"
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("  "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, c := range []struct {
		name      string
		admin     Admin
		want, err string
	}{
		{"off", Admin{}, "", ""},
		{"inline", Admin{PurgeToken: token}, token, ""},
		{"file, trimmed", Admin{PurgeTokenFile: file}, token, ""},
		{"both", Admin{PurgeToken: token, PurgeTokenFile: file}, "", "not both"},
		{"short", Admin{PurgeToken: "short"}, "", "at least 16"},
		{"missing file", Admin{PurgeTokenFile: filepath.Join(dir, "nope")}, "", "admin.purge_token_file"},
		{"empty file", Admin{PurgeTokenFile: empty}, "", "empty"},
	} {
		cfg := valid()
		cfg.Admin = c.admin
		err := cfg.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: Validate = %v, want an error with %q", c.name, err, c.err)
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "short") && c.name == "short" {
				t.Errorf("%s: the error quotes the token: %v", c.name, err)
			}
			continue
		}
		if got, _ := cfg.Admin.Token(); got != c.want {
			t.Errorf("%s: token %q, want %q", c.name, got, c.want)
		}
	}
	t.Setenv("EDGE_ADMIN__PURGE_TOKEN", token)
	cfg, err := Load("")
	if err != nil || cfg.Admin.PurgeToken != token {
		t.Fatalf("from the environment: %q, %v", cfg.Admin.PurgeToken, err)
	}
}
