package envelope

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// Class is what an upstream error envelope means for the edge: whose
// fault it is, whether another account or a stale copy may stand in, and
// whether it may be cached.
type Class uint8

const (
	// ClassUnknown: a code outside the vendor's table. Passed through to
	// the client as it came, never cached, the account not blamed: the
	// edge cannot tell whose fault it is, so it neither spends more calls
	// on it nor keeps it.
	ClassUnknown Class = iota
	// ClassFailure: the upstream failed. Another account is asked at
	// once, a copy within cache.stale_if_error stands in, the call counts
	// as the account failing (health, breaker); never cached.
	ClassFailure
	// ClassAccount: the upstream refused the account itself (its
	// credentials, or the account is frozen, blocked or without
	// permission). Like an HTTP 401: the account counts as failing, every
	// question goes to another account, logged at error and alerted on
	// (outcome="credentials"); alone, the client gets the edge's 502
	// 50026, never the explorer's words about the edge's account.
	ClassAccount
	// ClassRefusal: the upstream refused the question (a parameter
	// error). Asked of a second account when there is one; a refusal that
	// stands is cached for the route's negative time.
	ClassRefusal
	// ClassNoData: a deterministic "no data" answer to the question
	// (no such token, no data at this height, data does not exist).
	// Cached for the route's negative time like an empty answer, served
	// as the upstream sent it: asked again, it costs no call.
	ClassNoData
)

func (c Class) String() string {
	switch c {
	case ClassFailure:
		return "upstream failure"
	case ClassAccount:
		return "account failure"
	case ClassRefusal:
		return "refusal"
	case ClassNoData:
		return "no data"
	}
	return "unknown"
}

// VendorCode is one row of the vendor's error table.
type VendorCode struct {
	Code   string
	Status int    // the HTTP status the vendor documents for it
	Words  string // the vendor's message
	Class  Class
}

// VendorCodes is the vendor's error table (the X Layer data API's "error
// codes" page, data/error, general and authentication sections; 50101,
// 50108-50110, 50114 and 50125 from the vendor's sibling API pages), each
// code with the class the edge gives it whatever HTTP status carries it.
// The edge decides every upstream envelope by this table alone
// (ClassOf). Where the vendor's English and Chinese pages disagree on a
// status (50012: 200 and 429) the English one is listed; the class holds
// for both.
var VendorCodes = []VendorCode{
	// General.
	{"50000", 400, "Body can not be empty.", ClassFailure}, // the edge sends GETs without a body: the upstream misreads the edge's call, not the client's question
	{"50001", 503, "Service temporarily unavailable, please try again later.", ClassFailure},
	{"50002", 400, "Json data format error.", ClassFailure}, // as 50000
	{"50004", 400, "Endpoint request timeout (does not mean that the request was successful or failed, please check the request result).", ClassFailure},
	{"50005", 410, "API is offline or unavailable.", ClassFailure}, // every account gets it: counted failing, alerted through the breaker, a stale copy serves
	{"50006", 400, "Invalid Content_Type, please use \"application/json\" format.", ClassFailure},
	{"50007", 200, "Account blocked.", ClassAccount},
	{"50008", 200, "User does not exist.", ClassAccount},
	{"50009", 200, "Account is suspended due to ongoing liquidation.", ClassAccount},
	{"50010", 200, "User ID can not be empty.", ClassAccount},
	{"50011", 429, "Requests too frequent.", ClassFailure},  // also a lock-out for the Retry-After (ErrThrottled)
	{"50012", 200, "Account status invalid.", ClassAccount}, // 429 on the Chinese page
	{"50013", 200, "System is busy, please try again later.", ClassFailure},
	{"50014", 400, "Parameter {0} can not be empty.", ClassRefusal},
	{"50015", 400, "Either parameter {0} or {1} is required.", ClassRefusal},
	{"50016", 400, "Parameter {0} does not match parameter {1}.", ClassRefusal},
	{"50024", 200, "Parameter {0} and {1} can not exist at the same time.", ClassRefusal},
	{"50025", 200, "Parameter {0} count exceeds the limit {1}.", ClassRefusal},
	{"50026", 500, "System error.", ClassFailure},
	{"50030", 403, "No permission to use this API. You need to upgrade your account's payment level.", ClassAccount},
	{"50036", 400, "Parameter %s error.", ClassRefusal},
	{"50037", 200, "Token does not exist.", ClassNoData},
	{"50038", 200, "This chain does not currently support.", ClassNoData},
	{"50039", 200, "This alert has no history of processing.", ClassNoData},
	{"50040", 200, "No data for this block height.", ClassNoData},
	{"50041", 200, "Historical balance query is not supported for this token.", ClassRefusal},
	{"50042", 200, "This token does not support risk scanning.", ClassRefusal},
	{"50043", 200, "Your account behavior has triggered risk control, and the API function has been frozen.", ClassAccount},
	{"50044", 400, "Data does not exist.", ClassNoData},
	{"50045", 400, "Client operation error.", ClassRefusal},
	{"50047", 400, "Due to laws and regulations, X Layer API services are not available in your country or region.", ClassAccount}, // the account's (or its egress's) region: another account may be elsewhere
	// Authentication.
	{"50100", 400, "API frozen, please contact customer service.", ClassAccount},
	{"50101", 401, "APIKey does not match current environment.", ClassAccount},
	{"50102", 401, "Timestamp request expired.", ClassAccount},
	{"50103", 401, "Request header \"OK_ACCESS_KEY\" can not be empty.", ClassAccount},
	{"50104", 401, "Request header \"OK_ACCESS_PASSPHRASE\" can not be empty.", ClassAccount},
	{"50105", 401, "Request header \"OK_ACCESS_PASSPHRASE\" incorrect.", ClassAccount},
	{"50106", 401, "Request header \"OK_ACCESS_SIGN\" can not be empty.", ClassAccount},
	{"50107", 401, "Request header \"OK_ACCESS_TIMESTAMP\" can not be empty.", ClassAccount},
	{"50108", 401, "Exchange ID does not exist.", ClassAccount},
	{"50109", 401, "Exchange domain does not exist.", ClassAccount},
	{"50110", 401, "Invalid IP.", ClassAccount},
	{"50111", 401, "Invalid OK_ACCESS_KEY.", ClassAccount},
	{"50112", 401, "Invalid OK_ACCESS_TIMESTAMP.", ClassAccount},
	{"50113", 401, "Invalid signature.", ClassAccount},
	{"50114", 401, "Invalid authority.", ClassAccount},
	{"50125", 401, "Your API key or region has no access to the current service.", ClassAccount},
}

// vendorCodes indexes VendorCodes by code.
var vendorCodes = func() map[string]*VendorCode {
	m := make(map[string]*VendorCode, len(VendorCodes))
	for i := range VendorCodes {
		m[VendorCodes[i].Code] = &VendorCodes[i]
	}
	return m
}()

// Vendor returns the vendor's row for code, or nil.
func Vendor(code string) *VendorCode { return vendorCodes[code] }

// ClassOf classes an upstream answer of HTTP status and envelope code
// that is not a success:
//
//   - a code of an account failure (VendorCodes) or HTTP 401 whatever the
//     code: ClassAccount (50043 with 200 and 50100 with 400 included);
//   - HTTP 5xx or 429 otherwise: ClassFailure, whatever the code says (a
//     parameter code with 500 is the upstream failing, not the question);
//   - any other status: the code's class in VendorCodes (50013 with 200 is
//     a failure, 50040 with 200 is no data), ClassUnknown for a code
//     outside it.
//
// HTTP 404 is the caller's to decide first (no such path: base_url).
func ClassOf(status int, code string) Class {
	v := vendorCodes[code]
	switch {
	case v != nil && v.Class == ClassAccount, status == fasthttp.StatusUnauthorized:
		return ClassAccount
	case status >= 500 || status == fasthttp.StatusTooManyRequests:
		return ClassFailure
	case v != nil:
		return v.Class
	}
	return ClassUnknown
}

// Failure is the edge's own failure for an upstream envelope of status
// and code that says the upstream failed (ClassFailure) when no other
// account and no stale copy could stand in: the envelope of the edge's
// error table for that failure (README, Errors), naming the upstream's
// code and words, never the upstream's envelope as if it were an answer
// (50013 "system busy" comes with HTTP 200): 504 50004 for the
// upstream's timeout, 503 50001 for "unavailable, busy, too many
// requests: try again later", 502 50026 for the rest.
func Failure(status int, code string) *Error {
	e := *ErrFailingEnvelope
	switch code {
	case "50004":
		e.Status, e.Code, e.Msg = ErrTimeout.Status, ErrTimeout.Code, ErrTimeout.Msg
	case "50001", "50011", "50013":
		e.Status, e.Code, e.Msg = ErrUnreachable.Status, ErrUnreachable.Code, "Service temporarily unavailable"
	}
	e.Msg += ": the upstream answered " + code
	if v := vendorCodes[code]; v != nil {
		e.Msg += " (" + v.Words + ")"
	} else {
		e.Msg += " with HTTP " + strconv.Itoa(status)
	}
	return &e
}
