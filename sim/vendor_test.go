package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// The codes the edge classes, with the HTTP status the vendor's table gives
// each: many failures come with 200, and account failures are not all 401.
func TestVendorCodeTable(t *testing.T) {
	want := map[string]int{
		"50001": 503, "50004": 400, "50007": 200, "50011": 429, "50012": 200,
		"50013": 200, "50014": 400, "50025": 200, "50026": 500, "50030": 403,
		"50036": 400, "50037": 200, "50038": 200, "50040": 200, "50043": 200,
		"50044": 400, "50100": 400, "50102": 401, "50103": 401, "50104": 401,
		"50105": 401, "50106": 401, "50107": 401, "50110": 401, "50111": 401,
		"50112": 401, "50113": 401,
	}
	for code, status := range want {
		v, ok := LookupVendorCode(code)
		if !ok || v.Status != status || v.Msg == "" || v.Code != code {
			t.Errorf("LookupVendorCode(%s) = %+v, %v; want status %d with words", code, v, ok, status)
		}
	}
	if _, ok := LookupVendorCode("0"); ok {
		t.Error(`"0" is success, not an error code`)
	}
	table := VendorCodes()
	for i := 1; i < len(table); i++ {
		if table[i-1].Code >= table[i].Code {
			t.Errorf("table not in code order or duplicated: %s then %s", table[i-1].Code, table[i].Code)
		}
	}
	// The sim's own codes are the vendor's, with the vendor's status, except
	// 50025 (400 unless status-vendor) and 50000 (the sim's unknown path).
	for code, status := range map[string]int{codeMissing: 400, codeInvalid: 400, codeServer: 500,
		codeRateLimit: 429, codeAuthExpired: 401, codeSign: 401, codeNoData: 200} {
		if v, _ := LookupVendorCode(code); v.Status != status {
			t.Errorf("sim code %s: vendor status %d, the sim answers %d", code, v.Status, status)
		}
	}
	table[0].Code = "changed"
	if VendorCodes()[0].Code == "changed" {
		t.Error("VendorCodes hands out the table itself")
	}
}

// Every code of the table can be injected with the vendor's status and
// words; without envelope_vendor an envelope is HTTP 200 as it always was.
func TestFaultEnvelopeVendor(t *testing.T) {
	s, _ := startClocked(t)
	const path = "/api/v5/chainx/block/block-list?chainShortName=CHAINX&limit=1"
	for _, v := range VendorCodes() {
		s.SetFaults(Faults{Envelope: 1, EnvelopeCode: v.Code, EnvelopeVendor: true})
		a := get(t, s, path)
		code, msg, data := a.envelope(t)
		if a.status != v.Status || code != v.Code || !strings.HasPrefix(msg, v.Msg) || len(data) != 0 {
			t.Errorf("envelope_vendor %s: %d %s %q, want %d %s %q", v.Code, a.status, code, msg, v.Status, v.Code, v.Msg)
		}
		s.SetFaults(Faults{Envelope: 1, EnvelopeCode: v.Code})
		if a := get(t, s, path); a.status != 200 {
			t.Errorf("envelope %s without envelope_vendor: HTTP %d, want 200", v.Code, a.status)
		}
	}

	// Through the admin endpoint, JSON both ways.
	status, got := adminDo(t, s, "POST", "/sim/faults", `{"envelope":1,"envelope_code":"50100","envelope_vendor":true}`)
	if status != 200 || got["envelope_vendor"] != true {
		t.Fatalf("POST /sim/faults: %d %v", status, got)
	}
	if a := get(t, s, path); a.status != 400 {
		t.Errorf("50100 \"API frozen\" injected: HTTP %d, want the vendor's 400", a.status)
	}
	status, got = adminDo(t, s, "POST", "/sim/faults", `{"envelope":1,"envelope_code":"59999","envelope_vendor":true}`)
	if msg, _ := got["error"].(string); status != 400 || !strings.Contains(msg, "envelope_code") {
		t.Errorf("a code outside the table with envelope_vendor: %d %v, want 400 naming envelope_code", status, got)
	}

	var f Faults
	if err := json.Unmarshal([]byte(`{"envelope_vendor":true,"envelope_code":"50013"}`), &f); err != nil || !f.EnvelopeVendor {
		t.Errorf("unmarshal envelope_vendor: %+v %v", f, err)
	}
	// The default code, 50026, is in the table: 500.
	if err := (Faults{Envelope: 1, EnvelopeVendor: true}).Validate(); err != nil {
		t.Errorf("envelope_vendor with the default code: %v", err)
	}
}
