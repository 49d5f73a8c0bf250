package sim

import (
	"net/http"
	"slices"
)

// VendorCode is one row of the vendor's error-code table: the code, the
// HTTP status the vendor documents for it, and its message. Many come with
// HTTP 200: the envelope's code is all that says the answer failed.
type VendorCode struct {
	Code   string `json:"code"`
	Status int    `json:"status"`
	Msg    string `json:"msg"`
}

// vendorCodes is the vendor's error-code table of the explorer's data API
// (English page https://web3.okx.com/onchainos/dev-docs/data/error; the
// rows its English excerpt does not show, 50039 to 50047 and 50100, are
// translated from the Chinese page .../zh-hans/onchainos/dev-docs/data/error;
// the words of 50101-50125 follow the vendor's sibling API pages, with the
// SVC-ACCESS- prefix of this API's headers; 50101, 50108, 50109, 50114 and
// 50125 are from those pages only, kept so a test can inject every code
// the edge's own table classes). Where the two pages disagree
// (50012: 200 in English, 429 in Chinese) the English page is followed.
// docs/explorer-readings.md keeps the same table with its sources.
var vendorCodes = []VendorCode{
	{"50000", http.StatusBadRequest, "Body can not be empty."},
	{"50001", http.StatusServiceUnavailable, "Service temporarily unavailable, please try again later."},
	{"50002", http.StatusBadRequest, "Json data format error."},
	{"50004", http.StatusBadRequest, "Endpoint request timeout (does not mean that the request was successful or failed, please check the request result)."},
	{"50005", http.StatusGone, "API is offline or unavailable."},
	{"50006", http.StatusBadRequest, "Invalid Content_Type, please use \"application/json\" format."},
	{"50007", http.StatusOK, "Account blocked."},
	{"50008", http.StatusOK, "User does not exist."},
	{"50009", http.StatusOK, "Account is suspended due to ongoing liquidation."},
	{"50010", http.StatusOK, "User ID can not be empty."},
	{"50011", http.StatusTooManyRequests, "Requests too frequent."},
	{"50012", http.StatusOK, "Account status invalid."},
	{"50013", http.StatusOK, "System is busy, please try again later."},
	{"50014", http.StatusBadRequest, "Parameter {0} can not be empty."},
	{"50015", http.StatusBadRequest, "Either parameter {0} or {1} is required."},
	{"50016", http.StatusBadRequest, "Parameter {0} does not match parameter {1}."},
	{"50024", http.StatusOK, "Parameter {0} and {1} can not exist at the same time."},
	{"50025", http.StatusOK, "Parameter {0} count exceeds the limit {1}."},
	{"50026", http.StatusInternalServerError, "System error."},
	{"50030", http.StatusForbidden, "No permission to use this API. You need to upgrade your account's payment level."},
	{"50036", http.StatusBadRequest, "Parameter %s error."},
	{"50037", http.StatusOK, "Token does not exist."},
	{"50038", http.StatusOK, "This chain does not currently support."},
	{"50039", http.StatusOK, "This alert has no history of processing."},
	{"50040", http.StatusOK, "No data for this block height."},
	{"50041", http.StatusOK, "Historical balance queries for this token are not supported at present."},
	{"50042", http.StatusOK, "This token does not support risk scanning."},
	{"50043", http.StatusOK, "Your account behavior has triggered risk control; the API function is frozen."},
	{"50044", http.StatusBadRequest, "Data does not exist."},
	{"50045", http.StatusBadRequest, "Client operation error."},
	{"50047", http.StatusBadRequest, "Under laws and regulations, the X Layer API service is not available in your country or region."},
	{"50100", http.StatusBadRequest, "API frozen, please contact customer service."},
	{"50101", http.StatusUnauthorized, "APIKey does not match current environment."},
	{"50102", http.StatusUnauthorized, "Request timestamp expired."},
	{"50103", http.StatusUnauthorized, "Request header \"SVC-ACCESS-KEY\" can not be empty."},
	{"50104", http.StatusUnauthorized, "Request header \"SVC-ACCESS-PASSPHRASE\" can not be empty."},
	{"50105", http.StatusUnauthorized, "Request header \"SVC-ACCESS-PASSPHRASE\" incorrect."},
	{"50106", http.StatusUnauthorized, "Request header \"SVC-ACCESS-SIGN\" can not be empty."},
	{"50107", http.StatusUnauthorized, "Request header \"SVC-ACCESS-TIMESTAMP\" can not be empty."},
	{"50108", http.StatusUnauthorized, "Exchange ID does not exist."},
	{"50109", http.StatusUnauthorized, "Exchange domain does not exist."},
	{"50110", http.StatusUnauthorized, "Invalid IP."},
	{"50111", http.StatusUnauthorized, "Invalid SVC-ACCESS-KEY."},
	{"50112", http.StatusUnauthorized, "Invalid SVC-ACCESS-TIMESTAMP."},
	{"50113", http.StatusUnauthorized, "Invalid signature."},
	{"50114", http.StatusUnauthorized, "Invalid authority."},
	{"50125", http.StatusUnauthorized, "Your API key or region has no access to the current service."},
}

// VendorCodes returns the vendor's error-code table, by code.
func VendorCodes() []VendorCode { return slices.Clone(vendorCodes) }

// LookupVendorCode returns the vendor's row for code, if it has one.
func LookupVendorCode(code string) (VendorCode, bool) {
	for _, v := range vendorCodes {
		if v.Code == code {
			return v, true
		}
	}
	return VendorCode{}, false
}

// vendorStatus is the vendor's HTTP status for code, or def when its
// table has no row for it.
func vendorStatus(code string, def int) int {
	if v, ok := LookupVendorCode(code); ok {
		return v.Status
	}
	return def
}
