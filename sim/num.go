package sim

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// mix is the splitmix64 finalizer: a cheap, well-spread bijection on uint64.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// rng is a splitmix64 stream. Every synthetic value comes from one, seeded
// from the chain key and the coordinates of the value, so nothing is stored.
type rng struct{ s uint64 }

func newRng(key, kind, a, b uint64) rng {
	return rng{s: mix(mix(mix(key^kind)^a) ^ b)}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// n returns a value in [0, n).
func (r *rng) n(n uint64) uint64 { return r.next() % n }

// fnv64 hashes a string (FNV-1a).
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// feistel is a keyed bijection on uint64 (four rounds on 32-bit halves). It
// hides the coordinates encoded in the tail of a hash while keeping them
// recoverable with unfeistel.
func feistel(key, x uint64) uint64 {
	l, r := uint32(x>>32), uint32(x)
	for i := uint64(0); i < 4; i++ {
		l, r = r, l^uint32(mix(key^i<<40^uint64(r)))
	}
	return uint64(l)<<32 | uint64(r)
}

func unfeistel(key, x uint64) uint64 {
	l, r := uint32(x>>32), uint32(x)
	for i := uint64(4); i > 0; i-- {
		l, r = r^uint32(mix(key^(i-1)<<40^uint64(l))), l
	}
	return uint64(l)<<32 | uint64(r)
}

// sealed builds an n-byte identifier (32 for hashes, 20 for addresses) whose
// last 8 bytes carry payload, encrypted under (key, kind), and whose first
// bytes are a keyed digest of the same. open reverses it, so a lookup needs
// no table: decode the tail, recompute the head, compare.
func sealed(key, kind, payload uint64, n int) string {
	var b [32]byte
	r := newRng(key, kind, payload, 0x5ea1)
	for i := 0; i < n-8; i += 8 {
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], r.next())
		copy(b[i:n-8], w[:])
	}
	binary.BigEndian.PutUint64(b[n-8:n], feistel(key^kind, payload))
	return "0x" + hex.EncodeToString(b[:n])
}

// open returns the payload of a sealed identifier of n bytes, or false when
// s is not one of (key, kind). s may use any hex case.
func open(key, kind uint64, s string, n int) (uint64, bool) {
	if !isHex(s, n) {
		return 0, false
	}
	tail, err := strconv.ParseUint(s[len(s)-16:], 16, 64)
	if err != nil {
		return 0, false
	}
	payload := unfeistel(key^kind, tail)
	return payload, strings.EqualFold(sealed(key, kind, payload, n), s)
}

// isHex reports whether s is 0x followed by 2n hex digits (any case).
func isHex(s string, n int) bool {
	if len(s) != 2+2*n || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

var pow10 = [...]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// dec formats v smallest units as a decimal with up to decimals fraction
// digits, trailing zeros trimmed: dec(1500000, 6) = "1.5".
func dec(v uint64, decimals int) string {
	if decimals == 0 {
		return strconv.FormatUint(v, 10)
	}
	p := pow10[decimals]
	whole, frac := v/p, v%p
	if frac == 0 {
		return strconv.FormatUint(whole, 10)
	}
	f := strconv.FormatUint(frac+p, 10)[1:] // zero-padded to decimals digits
	return strconv.FormatUint(whole, 10) + "." + strings.TrimRight(f, "0")
}

// sdec is dec for a signed difference a-b.
func sdec(a, b uint64, decimals int) string {
	if a >= b {
		return dec(a-b, decimals)
	}
	return "-" + dec(b-a, decimals)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func utoa(v uint64) string { return strconv.FormatUint(v, 10) }

// floorDiv divides rounding toward negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
