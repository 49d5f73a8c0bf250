package envelope

import (
	"slices"
	"strings"
	"testing"

	"explorer-edge/metrics"
)

// TestVendorCodesClassed: every code of the vendor's table is there once,
// with a class, and an envelope is classed by its code whatever HTTP
// status carries it, except that a 5xx or 429 is the upstream failing and
// a 401 the account's, whatever the code.
func TestVendorCodesClassed(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range VendorCodes {
		if seen[v.Code] {
			t.Errorf("code %s listed twice", v.Code)
		}
		seen[v.Code] = true
		if v.Class == ClassUnknown || v.Words == "" || v.Status == 0 {
			t.Errorf("code %s: class %v, words %q, status %d", v.Code, v.Class, v.Words, v.Status)
		}
		if (v.Class == ClassRefusal || v.Class == ClassNoData) && !slices.Contains(metrics.Codes, v.Code) {
			t.Errorf("code %s is served to clients (%v) but requests_total counts it as \"other\"", v.Code, v.Class)
		}
		if got := ClassOf(v.Status, v.Code); got != v.Class {
			t.Errorf("ClassOf(%d, %s) = %v, want its own class %v", v.Status, v.Code, got, v.Class)
		}
	}
	for _, c := range []struct {
		status int
		code   string
		want   Class
	}{
		{200, "50013", ClassFailure}, // "system busy" with 200
		{400, "50004", ClassFailure},
		{200, "50026", ClassFailure},
		{500, "50036", ClassFailure}, // a parameter code with 500: the upstream failing
		{429, "50036", ClassFailure},
		{200, "50043", ClassAccount}, // frozen by risk control, with 200
		{400, "50100", ClassAccount}, // API frozen, with 400
		{403, "50030", ClassAccount},
		{200, "50007", ClassAccount},
		{429, "50012", ClassAccount}, // the Chinese page's status
		{500, "50113", ClassAccount},
		{401, "59999", ClassAccount}, // any 401
		{400, "50036", ClassRefusal},
		{200, "50036", ClassRefusal},
		{200, "50025", ClassRefusal},
		{400, "50014", ClassRefusal},
		{200, "50040", ClassNoData},
		{400, "50044", ClassNoData},
		{200, "50037", ClassNoData},
		{200, "59999", ClassUnknown},
		{400, "", ClassUnknown},
	} {
		if got := ClassOf(c.status, c.code); got != c.want {
			t.Errorf("ClassOf(%d, %q) = %v, want %v", c.status, c.code, got, c.want)
		}
	}
	for _, c := range []struct {
		status     int
		code       string
		wantStatus int
		wantCode   string
	}{{200, "50013", 503, "50001"}, {200, "50026", 502, "50026"}, {200, "50001", 503, "50001"}, {400, "50004", 504, "50004"},
		{410, "50005", 502, "50026"}, {429, "50036", 502, "50026"}} {
		e := Failure(c.status, c.code)
		if e.Status != c.wantStatus || e.Code != c.wantCode || e.Kind != KindEnvelope || !strings.Contains(e.Msg, "upstream answered "+c.code) {
			t.Errorf("Failure(%d, %s) = %d %s %q (%s), want %d %s naming the upstream's code", c.status, c.code, e.Status, e.Code, e.Msg, e.Kind, c.wantStatus, c.wantCode)
		}
	}
}
