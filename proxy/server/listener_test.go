package server

import (
	"bufio"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/envelope"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The refusal a capped listener writes is a whole HTTP/1.1 answer that Go's
// client reads as such.
func TestRefusalAnswerIsHTTP(t *testing.T) {
	b := refusalAnswer(&envelope.Error{Status: 503, Code: "50001", Msg: `say "why"`, RetryAfter: 1})
	res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	testkit.CheckEnvelope(t, "refusal", res.StatusCode, body, 503, "50001", `say "why"`)
}
