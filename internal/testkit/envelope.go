package testkit

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// CheckEnvelope: a well-formed error envelope of code, whose msg is valid
// UTF-8 and names param.
func CheckEnvelope(t *testing.T, what string, status int, body []byte, wantStatus int, code, param string) {
	t.Helper()
	var env struct {
		Code string          `json:"code"`
		Msg  string          `json:"msg"`
		Data json.RawMessage `json:"data"`
	}
	if status != wantStatus || json.Unmarshal(body, &env) != nil || env.Code != code || string(env.Data) != "[]" ||
		!utf8.ValidString(env.Msg) || !strings.Contains(env.Msg, param) {
		t.Errorf("%s: %d %s, want %d code %s naming %s", what, status, body, wantStatus, code, param)
	}
}
