package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// query is one request's parameters after checking and normalization. The
// canonical query doubles as cache key and upstream request target, so equal
// questions are one key by construction. Queries are pooled: the hit path
// builds the key without allocating.
type query struct {
	route  *route
	key    []byte // canonical "path?name=value&...": cache key and upstream target
	chain  []byte // canonical chainShortName (upper case)
	height int64  // kindHeight value; -1 when absent
	// hashes are the de-duplicated hashes of a txId/txid parameter, as
	// offsets into key (lower-cased there).
	hashes  [maxHashes][2]uint16
	nHashes int
	scratch []byte // header values of the response being written
}

func (q *query) hash(i int) []byte { return q.key[q.hashes[i][0]:q.hashes[i][1]] }

// parse checks args against the route's parameters and builds the canonical
// query. Parameters the route does not name are dropped: they neither reach
// the upstream nor split the cache. chains are the configured chain names in
// upper case.
func (q *query) parse(r *route, args *fasthttp.Args, chains []string) *Error {
	q.route = r
	q.height = -1
	q.nHashes = 0
	q.chain = q.chain[:0]
	k := append(q.key[:0], r.path...)
	sep := byte('?')
	page, limit := int64(1), int64(0)
	present := 0
	for i := range r.params {
		p := &r.params[i]
		raw := args.Peek(p.name)
		if raw != nil {
			present++
		}
		v := bytes.TrimSpace(raw)
		if len(v) == 0 {
			if p.required {
				return errMissing(p.name)
			}
			if p.def == "" {
				continue
			}
			v = []byte(p.def) // constant: the compiler does not allocate here
		}
		k = append(k, sep)
		sep = '&'
		k = append(k, p.name...)
		k = append(k, '=')
		var err *Error
		switch p.kind {
		case kindChain:
			k, err = appendChain(k, v, chains, p.name)
			q.chain = append(q.chain, k[len(k)-chainLen(k):]...)
		case kindAddress:
			k, err = appendHex(k, v, 40, p.name)
		case kindHash:
			start := len(k)
			k, err = appendHex(k, v, 64, p.name)
			if err == nil {
				q.hashes[0] = [2]uint16{uint16(start), uint16(len(k))}
				q.nHashes = 1
			}
		case kindHashList:
			k, err = q.appendHashList(k, v, p)
		case kindHeight:
			var n int64
			k, n, err = appendDecimal(k, v, 0, 1e15, p.name)
			q.height = n
		case kindPage:
			k, page, err = appendDecimal(k, v, 1, 1e6, p.name)
		case kindLimit:
			k, limit, err = appendDecimal(k, v, 1, int64(p.max), p.name)
		case kindEnum:
			k, err = appendEnum(k, v, p)
		}
		if err != nil {
			q.key = k
			return err
		}
	}
	q.key = k
	// More arguments than parameters found: unknown ones (dropped) or a
	// parameter given twice. Twice with different values is ambiguous (other
	// servers take the last), so it is refused rather than guessed.
	if args.Len() > present {
		if err := conflicting(r, args, chains, k); err != nil {
			return err
		}
	}
	// Only the newest rows are reachable (spec, Limits): asking beyond them
	// is the client's error, not an upstream call.
	if r.window > 0 && limit > 0 && (page-1)*limit >= int64(r.window) {
		return errInvalid("page", "page starts beyond the reachable 10000 rows")
	}
	return nil
}

// conflicting finds a route parameter given again with a value that does
// not normalize as its first one did (key is the first values' canonical
// query). Only requests with more arguments than parameters come here.
func conflicting(r *route, args *fasthttp.Args, chains []string, key []byte) *Error {
	var err *Error
	args.VisitAll(func(k, v []byte) {
		for i := range r.params {
			p := &r.params[i]
			if err != nil || p.name != string(k) || bytes.Equal(v, args.Peek(p.name)) {
				continue
			}
			var alt fasthttp.Args // the first values, with v for p
			for j := range r.params {
				if o := &r.params[j]; o == p {
					alt.AddBytesV(o.name, v)
				} else if x := args.Peek(o.name); x != nil {
					alt.AddBytesV(o.name, x)
				}
			}
			var q query
			if e := q.parse(r, &alt, chains); e != nil || !bytes.Equal(q.key, key) {
				err = errInvalid(p.name, "given more than once with different values")
			}
		}
	})
	return err
}

// chainLen is the length of the chain value just appended after '='.
func chainLen(k []byte) int { return len(k) - bytes.LastIndexByte(k, '=') - 1 }

func appendChain(k, v []byte, chains []string, name string) ([]byte, *Error) {
	for _, c := range chains {
		if len(c) == len(v) && bytes.EqualFold([]byte(c), v) {
			return append(k, c...), nil
		}
	}
	return k, errInvalid(name, "unknown chain")
}

// appendHex checks "0x" + n hex digits and appends them in lower case.
func appendHex(k, v []byte, n int, name string) ([]byte, *Error) {
	if len(v) != n+2 || v[0] != '0' || (v[1] != 'x' && v[1] != 'X') {
		if n == 40 {
			return k, errInvalid(name, "not an address (0x and 40 hex digits)")
		}
		return k, errInvalid(name, "not a hash (0x and 64 hex digits)")
	}
	k = append(k, '0', 'x')
	for _, c := range v[2:] {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return k, errInvalid(name, "not hexadecimal")
		}
		k = append(k, c)
	}
	return k, nil
}

// appendDecimal checks a decimal in [lo, hi], drops leading zeros and
// appends it.
func appendDecimal(k, v []byte, lo, hi int64, name string) ([]byte, int64, *Error) {
	var n int64
	if len(v) > 19 {
		return k, 0, errInvalid(name, "out of range")
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return k, 0, errInvalid(name, "not a non-negative integer")
		}
		n = n*10 + int64(c-'0')
	}
	if n < lo || n > hi {
		return k, 0, errInvalid(name, "out of range")
	}
	return appendInt(k, n), n, nil
}

func appendInt(k []byte, n int64) []byte {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(k, b[i:]...)
}

func appendEnum(k, v []byte, p *param) ([]byte, *Error) {
	for _, e := range p.enum {
		if len(e) == len(v) && bytes.EqualFold([]byte(e), v) {
			return append(k, e...), nil
		}
	}
	return k, errInvalid(p.name, "not one of the allowed values")
}

// appendHashList appends the hashes of a comma-separated list, lower-cased
// and without duplicates, in the order asked.
func (q *query) appendHashList(k, v []byte, p *param) ([]byte, *Error) {
	first := true
	for len(v) > 0 || first {
		item := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
			if len(v) == 0 {
				return k, errInvalid(p.name, "empty hash in list")
			}
		} else {
			v = nil
		}
		item = bytes.TrimSpace(item)
		if len(item) == 0 {
			return k, errInvalid(p.name, "empty hash in list")
		}
		mark := len(k)
		if !first {
			k = append(k, ',')
		}
		start := len(k)
		var err *Error
		if k, err = appendHex(k, item, 64, p.name); err != nil {
			return k, err
		}
		dup := false
		for i := 0; i < q.nHashes; i++ {
			if bytes.Equal(k[q.hashes[i][0]:q.hashes[i][1]], k[start:]) {
				dup = true
				break
			}
		}
		if dup {
			k = k[:mark]
			continue
		}
		if q.nHashes == p.max {
			return k, errTooMany(p.name, p.max)
		}
		q.hashes[q.nHashes] = [2]uint16{uint16(start), uint16(len(k))}
		q.nHashes++
		first = false
	}
	return k, nil
}
