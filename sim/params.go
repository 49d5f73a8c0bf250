package sim

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Explorer error codes (sim/README.md, Errors; README.md, Errors).
const (
	codeMissing      = "50014"
	codeInvalid      = "50036"
	codeTooMany      = "50025"
	codeMethod       = "50115"
	codeServer       = "50026"
	codeRateLimit    = "50011"
	codeNotFound     = "50000" // unknown path; the table gives no code, only "envelope too"
	codeAuthExpired  = "50102"
	codeNoKey        = "50103"
	codeNoPassphrase = "50104"
	codePassphrase   = "50105"
	codeNoSign       = "50106"
	codeNoTimestamp  = "50107"
	codeUnknownKey   = "50111"
	codeTimestamp    = "50112"
	codeSign         = "50113"
)

// Error is an answer other than success: the HTTP status and the envelope's
// code and msg.
type Error struct {
	Status int    // HTTP status
	Code   string // explorer code, e.g. "50036"
	Msg    string // names the parameter and says why
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

func missing(name string) *Error {
	return &Error{http.StatusBadRequest, codeMissing, "Parameter " + name + " can not be empty"}
}

func invalid(name, format string, args ...any) *Error {
	return &Error{http.StatusBadRequest, codeInvalid, "Parameter " + name + " error: " + fmt.Sprintf(format, args...)}
}

// params reads the query of one request. Values are trimmed; an empty
// optional value means its default; unknown parameters are ignored.
type params struct{ q url.Values }

func (p params) get(name string) string { return strings.TrimSpace(p.q.Get(name)) }

func (p params) required(name string) (string, *Error) {
	v := p.get(name)
	if v == "" {
		return "", missing(name)
	}
	return v, nil
}

// int parses a decimal integer in [min, max], or returns def when absent.
// Leading zeros are accepted ("020" is 20).
func (p params) int(name string, def, min, max int64) (int64, *Error) {
	v := p.get(name)
	if v == "" {
		return def, nil
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, invalid(name, "%q is not a non-negative decimal integer", v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min || n > max {
		return 0, invalid(name, "%s is out of range [%d, %d]", v, min, max)
	}
	return n, nil
}

// page reads page and limit with the route's default and maximum limit.
func (p params) page(defLimit, maxLimit int64) (page, limit int64, err *Error) {
	if page, err = p.int("page", 1, 1, 1<<40); err != nil {
		return 0, 0, err
	}
	if limit, err = p.int("limit", defLimit, 1, maxLimit); err != nil {
		return 0, 0, err
	}
	return page, limit, nil
}

// hashes reads a comma-separated list of at most 20 transaction hashes, each
// 0x + 64 hex digits in any case. Duplicates are answered once, where first
// asked.
func (p params) hashes(name string, maxN int) ([]string, *Error) {
	v, err := p.required(name)
	if err != nil {
		return nil, err
	}
	items := strings.Split(v, ",")
	if len(items) > maxN {
		return nil, &Error{http.StatusBadRequest, codeTooMany, fmt.Sprintf("Parameter %s error: %d hashes, at most %d", name, len(items), maxN)}
	}
	out := make([]string, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, h := range items {
		h = strings.TrimSpace(h)
		if !isHex(h, 32) {
			return nil, invalid(name, "%q is not a transaction hash (0x and 64 hex digits)", h)
		}
		h = strings.ToLower(h)
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out, nil
}

// countHashes is the number of hashes a request asks for, as stats count them:
// the non-empty comma-separated items of the parameter, valid or not.
func countHashes(v string) int64 {
	n := int64(0)
	for item := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(item) != "" {
			n++
		}
	}
	return n
}
