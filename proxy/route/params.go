package route

import (
	"bytes"
	"explorer-edge/proxy/envelope"
	"strings"

	"github.com/valyala/fasthttp"
)

// Params are one request's parameters after checking and normalization.
// The canonical query doubles as cache key and upstream request target, so
// equal questions are one key by construction. They live in a pooled value
// of the request core: the hit path builds the key without allocating.
type Params struct {
	Route  *Route
	Key    []byte // canonical "path?name=value&...": cache key and upstream target
	Chain  []byte // canonical chainShortName (upper case)
	Height int64  // kindHeight value; -1 when absent
	// hashes are the de-duplicated hashes of a txId/txid parameter, as
	// offsets into Key (lower-cased there).
	hashes      [MaxHashes][2]uint16
	NHashes     int
	Page, Limit int64 // kindPage and kindLimit values (1 and 0 when absent)
	// Head is the kindPin value, the head a pinned block list was started
	// at (head=H); -1 when absent.
	Head int64
}

// PinHeight is what IsHeadList takes as the height: Height, or for a
// pinned list (which is never the newest page) its pin.
func (q *Params) PinHeight() int64 { return max(q.Height, q.Head) }

// Hash is the i-th hash asked, lower case.
func (q *Params) Hash(i int) []byte { return q.Key[q.hashes[i][0]:q.hashes[i][1]] }

// Parse checks args against the route's parameters and builds the canonical
// query. Parameters the route does not name are dropped: they neither reach
// the upstream nor split the cache. chains are the configured chain names in
// upper case.
func (q *Params) Parse(r *Route, args *fasthttp.Args, chains []string) *envelope.Error {
	q.Route = r
	q.Height, q.Head = -1, -1
	q.NHashes = 0
	q.Chain = q.Chain[:0]
	q.Page, q.Limit = 1, 0
	k := append(q.Key[:0], r.Path...)
	sep := byte('?')
	present := 0
	for i := range r.params {
		p := &r.params[i]
		raw := args.Peek(p.name)
		if raw != nil {
			present++
		}
		var err *envelope.Error
		if k, sep, err = q.appendParam(k, sep, p, raw, chains); err != nil {
			q.Key = k
			if repeatedDiffering(args, p.name) {
				return errRepeated(p.name)
			}
			return err
		}
	}
	q.Key = k
	// More arguments than parameters found: unknown ones (dropped) or a
	// parameter given twice. Twice with values that normalize differently
	// is ambiguous (other servers take the last), so it is refused.
	if args.Len() > present {
		if err := conflicting(r, args, chains, k); err != nil {
			return err
		}
	}
	if q.Head >= 0 && q.Height >= 0 {
		return envelope.Invalid("head", "a pinned list (head) cannot be asked at a height too")
	}
	// Only the newest rows are reachable (spec, Limits): asking beyond them
	// is the client's error, not an upstream call.
	if r.Window > 0 && q.Limit > 0 && (q.Page-1)*q.Limit >= int64(r.Window) {
		return envelope.Invalid("page", "page starts beyond the reachable 10000 rows")
	}
	return nil
}

// appendParam checks p's raw value and appends sep, its name, "=" and its
// canonical value to k; an absent optional parameter without a default
// appends nothing. It returns the separator of the next parameter.
func (q *Params) appendParam(k []byte, sep byte, p *param, raw []byte, chains []string) ([]byte, byte, *envelope.Error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		if p.required {
			return k, sep, envelope.Missing(p.name)
		}
		if p.def == "" {
			return k, sep, nil
		}
		v = []byte(p.def) // does not escape: the compiler does not allocate here
	}
	k = append(k, sep)
	k = append(k, p.name...)
	k = append(k, '=')
	var err *envelope.Error
	switch p.kind {
	case kindChain:
		k, err = AppendChain(k, v, chains, p.name)
		q.Chain = append(q.Chain, k[len(k)-chainLen(k):]...)
	case kindAddress:
		k, err = AppendHex(k, v, 40, p.name)
	case kindHash:
		start := len(k)
		k, err = AppendHex(k, v, 64, p.name)
		if err == nil {
			q.hashes[0] = [2]uint16{uint16(start), uint16(len(k))}
			q.NHashes = 1
		}
	case kindHashList:
		k, err = q.appendHashList(k, v, p)
	case kindHeight:
		k, q.Height, err = appendDecimal(k, v, 0, 1e15, p.name)
	case kindPin:
		k, q.Head, err = appendDecimal(k, v, 0, 1e15, p.name)
	case kindPage:
		k, q.Page, err = appendDecimal(k, v, 1, 1e6, p.name)
	case kindLimit:
		hi := int64(p.max)
		if p.maxOf != nil {
			hi = p.maxOf.Load()
		}
		k, q.Limit, err = appendDecimal(k, v, 1, hi, p.name)
	case kindEnum:
		k, err = appendEnum(k, v, p)
	}
	return k, '&', err
}

func errRepeated(name string) *envelope.Error {
	return envelope.Invalid(name, "given more than once with different values")
}

// conflicting finds a route parameter given again with a value that does
// not normalize to the one in key (the canonical query of the first
// values). Each repeated value is normalized alone, once: the cost is
// linear in the query, whatever the client repeats.
func conflicting(r *Route, args *fasthttp.Args, chains []string, key []byte) *envelope.Error {
	var scratch Params
	var buf []byte
	for k, v := range args.All() {
		p := r.param(k)
		if p == nil || bytes.Equal(v, args.Peek(p.name)) {
			continue
		}
		scratch.NHashes, scratch.Chain = 0, scratch.Chain[:0]
		var e *envelope.Error
		buf, _, e = scratch.appendParam(buf[:0], '&', p, v, chains)
		val := buf
		if len(val) > 0 {
			val = val[1:] // the '&'
		}
		if e != nil || !bytes.Equal(val, keyParam(key, p.name)) {
			return errRepeated(p.name)
		}
	}
	return nil
}

// keyParam is "name=value" of name in a canonical key, or nil when key
// has none.
func keyParam(key []byte, name string) []byte {
	_, q, _ := bytes.Cut(key, []byte{'?'})
	for len(q) > 0 {
		var kv []byte
		kv, q, _ = bytes.Cut(q, []byte{'&'})
		if len(kv) > len(name) && kv[len(name)] == '=' && string(kv[:len(name)]) == name {
			return kv
		}
	}
	return nil
}

// repeatedDiffering reports whether name is given more than once with
// values that differ (error path only).
func repeatedDiffering(args *fasthttp.Args, name string) bool {
	first, differ := args.Peek(name), false
	for k, v := range args.All() {
		differ = differ || (string(k) == name && !bytes.Equal(bytes.TrimSpace(v), bytes.TrimSpace(first)))
	}
	return differ
}

// chainLen is the length of the chain value just appended after '='.
func chainLen(k []byte) int { return len(k) - bytes.LastIndexByte(k, '=') - 1 }

func AppendChain(k, v []byte, chains []string, name string) ([]byte, *envelope.Error) {
	for _, c := range chains {
		if equalFold(c, v) {
			return append(k, c...), nil
		}
	}
	return k, envelope.Invalid(name, "unknown chain")
}

// equalFold is bytes.EqualFold for ASCII without converting s (which
// allocated where the compiler could not keep the copy on the stack).
func equalFold(s string, b []byte) bool {
	if len(s) != len(b) {
		return false
	}
	for i := 0; i < len(s); i++ {
		x, y := s[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// AppendHex checks "0x" + n hex digits and appends them in lower case.
func AppendHex(k, v []byte, n int, name string) ([]byte, *envelope.Error) {
	if len(v) != n+2 || v[0] != '0' || (v[1] != 'x' && v[1] != 'X') {
		if n == 40 {
			return k, envelope.Invalid(name, "not an address (0x and 40 hex digits)")
		}
		return k, envelope.Invalid(name, "not a hash (0x and 64 hex digits)")
	}
	k = append(k, '0', 'x')
	for _, c := range v[2:] {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return k, envelope.Invalid(name, "not hexadecimal")
		}
		k = append(k, c)
	}
	return k, nil
}

// appendDecimal checks a decimal in [lo, hi], drops leading zeros and
// appends it.
func appendDecimal(k, v []byte, lo, hi int64, name string) ([]byte, int64, *envelope.Error) {
	var n int64
	if len(v) > 19 {
		return k, 0, envelope.Invalid(name, "out of range")
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return k, 0, envelope.Invalid(name, "not a non-negative integer")
		}
		n = n*10 + int64(c-'0')
	}
	if n < lo || n > hi {
		return k, 0, envelope.Invalid(name, "out of range")
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

func appendEnum(k, v []byte, p *param) ([]byte, *envelope.Error) {
	for _, e := range p.enum {
		if equalFold(e, v) {
			return append(k, e...), nil
		}
	}
	return k, envelope.Invalid(p.name, "not one of the allowed values")
}

// appendHashList appends the hashes of a comma-separated list, lower-cased
// and without duplicates, in the order asked.
func (q *Params) appendHashList(k, v []byte, p *param) ([]byte, *envelope.Error) {
	first := true
	for len(v) > 0 || first {
		item := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
			if len(v) == 0 {
				return k, envelope.Invalid(p.name, "empty hash in list")
			}
		} else {
			v = nil
		}
		item = bytes.TrimSpace(item)
		if len(item) == 0 {
			return k, envelope.Invalid(p.name, "empty hash in list")
		}
		mark := len(k)
		if !first {
			k = append(k, ',')
		}
		start := len(k)
		var err *envelope.Error
		if k, err = AppendHex(k, item, 64, p.name); err != nil {
			return k, err
		}
		dup := false
		for i := 0; i < q.NHashes; i++ {
			if bytes.Equal(k[q.hashes[i][0]:q.hashes[i][1]], k[start:]) {
				dup = true
				break
			}
		}
		if dup {
			k = k[:mark]
			continue
		}
		if q.NHashes == p.max {
			return k, envelope.TooMany(p.name, p.max)
		}
		q.hashes[q.NHashes] = [2]uint16{uint16(start), uint16(len(k))}
		q.NHashes++
		first = false
	}
	return k, nil
}

// ParseKey rebuilds the parsed query of a canonical key. The tagger needs
// it: the cache tags every entry it stores, from whatever source (a fetch,
// the shared tier, an assembled batch), and has only the entry.
func (q *Params) ParseKey(r *Route, key string) {
	var args fasthttp.Args
	if _, query, ok := strings.Cut(key, "?"); ok {
		args.Parse(query)
	}
	var chains []string
	if c := args.Peek("chainShortName"); c != nil {
		chains = []string{string(c)}
	}
	q.Parse(r, &args, chains)
}
