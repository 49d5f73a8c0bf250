package disk

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/bbolt"

	"explorer-edge/cache"
)

// An entry is two records in the store's file: the entry itself under its
// key (bucket "e"), and an index record under its stored time and key
// (bucket "o"), which eviction walks oldest first and Delete scans without
// reading a body. Both begin with the same head:
//
//	version  1 byte   formatVersion; any other value is corrupt, never a guess
//	class    1 byte   cache.Class
//	stored   8 bytes  unix ns, big endian
//	fresh    8 bytes  unix ns
//	swr      8 bytes  ns past fresh
//	sie      8 bytes  ns past fresh
//	route    1 byte   cache.Tags, what a purge selects by
//	chain    1 byte
//	lo, hi   8 bytes each
//	hashes   uvarint count, 8 bytes each
//	key      uvarint length, bytes
//
// The entry record goes on with
//
//	flags    1 byte   flagGzip: the payload is the gzip of the body
//	source   1 byte   cache.Source, as it was when the entry was made
//	status   uvarint
//	size     uvarint  length of the identity body
//	etag     uvarint length, bytes
//	payload  the gzip bytes when the entry has them, else the body
//
// and the index record with
//
//	cost     8 bytes  what the entry counts against MaxBytes (cost)
//
// Each ends with the xxhash64 of everything before it (8 bytes, big
// endian): a record that does not match it, or does not parse, is corrupt.
// The payload is the entry's one copy of the answer, as in Redis
// (fleet/entry.go): nothing is compressed or inflated here.
const formatVersion = 1

const (
	flagGzip   = 1 << 0
	knownFlags = flagGzip
	headLen    = 2 + 4*8 + 2 + 2*8 // up to the hashes
	sumLen     = 8
	// storedAt is the offset of stored in a head: an index record's key
	// is found from an entry record this way even when the record is
	// corrupt.
	storedAt = 2
)

var errCorrupt = errors.New("disk cache: corrupt record")

// appendHead appends e's head.
func appendHead(b []byte, e *cache.Entry) []byte {
	b = append(b, formatVersion, byte(e.Class))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Stored))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Fresh))
	b = binary.BigEndian.AppendUint64(b, uint64(e.StaleWhileRevalidate))
	b = binary.BigEndian.AppendUint64(b, uint64(e.StaleIfError))
	b = append(b, e.Tags.Route, e.Tags.Chain)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Tags.Lo))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Tags.Hi))
	b = binary.AppendUvarint(b, uint64(len(e.Tags.Hashes)))
	for _, h := range e.Tags.Hashes {
		b = binary.BigEndian.AppendUint64(b, h)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	return append(b, e.Key...)
}

// encodeEntry returns e's entry record.
func encodeEntry(e *cache.Entry) []byte {
	payload, flags := e.Body, byte(0)
	if len(e.Gzip) > 0 {
		payload, flags = e.Gzip, flagGzip
	}
	n := headLen + 8*len(e.Tags.Hashes) + len(e.Key) + len(e.ETag) + len(payload) + 2 + 4*binary.MaxVarintLen64 + sumLen
	b := appendHead(make([]byte, 0, n), e)
	b = append(b, flags, byte(e.Source))
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = binary.AppendUvarint(b, uint64(e.Size))
	b = binary.AppendUvarint(b, uint64(len(e.ETag)))
	b = append(b, e.ETag...)
	b = append(b, payload...)
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

// encodeIndex returns e's index record, cost being what the entry counts.
func encodeIndex(e *cache.Entry, cost int64) []byte {
	b := appendHead(make([]byte, 0, headLen+8*len(e.Tags.Hashes)+binary.MaxVarintLen64*2+len(e.Key)+8+sumLen), e)
	b = binary.BigEndian.AppendUint64(b, uint64(cost))
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

// indexKey is the key of an entry's index record: stored, big endian (so
// the bucket is in stored order), and the entry's key.
func indexKey(dst []byte, stored int64, key string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(stored))
	return append(dst, key...)
}

// checked returns rec without its checksum, if the checksum holds.
func checked(rec []byte) ([]byte, bool) {
	if len(rec) < headLen+sumLen {
		return nil, false
	}
	body := rec[:len(rec)-sumLen]
	return body, xxhash.Sum64(body) == binary.BigEndian.Uint64(rec[len(body):])
}

// decodeHead fills e from a head and returns the rest. The key aliases b;
// the digests are copied into hashes (reused when it has room).
func decodeHead(b []byte, e *cache.Entry, hashes []uint64) ([]byte, error) {
	if len(b) < headLen || b[0] != formatVersion || cache.Class(b[1]) > cache.Negative {
		return nil, errCorrupt
	}
	e.Class = cache.Class(b[1])
	e.Stored = int64(binary.BigEndian.Uint64(b[2:]))
	e.Fresh = int64(binary.BigEndian.Uint64(b[10:]))
	e.StaleWhileRevalidate = int64(binary.BigEndian.Uint64(b[18:]))
	e.StaleIfError = int64(binary.BigEndian.Uint64(b[26:]))
	e.Tags.Route, e.Tags.Chain = b[34], b[35]
	e.Tags.Lo = int64(binary.BigEndian.Uint64(b[36:]))
	e.Tags.Hi = int64(binary.BigEndian.Uint64(b[44:]))
	rest := b[headLen:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w)/8 {
		return nil, errCorrupt
	}
	rest = rest[w:]
	if uint64(cap(hashes)) < n {
		hashes = make([]uint64, 0, n)
	}
	hashes = hashes[:0]
	for i := 0; i < int(n); i++ {
		hashes = append(hashes, binary.BigEndian.Uint64(rest[8*i:]))
	}
	e.Tags.Hashes = hashes
	rest = rest[8*n:]
	key, rest, ok := field(rest)
	if !ok || len(key) > maxKeyLen {
		return nil, errCorrupt
	}
	e.Key = unsafe.String(unsafe.SliceData(key), len(key))
	return rest, nil
}

// Bounds on what a record claims. Whoever can write to the file can write
// any record with a checksum that holds (xxhash is no secret): nothing
// read from it is sized, allocated or served on its word alone, as
// nothing read from Redis is (fleet/entry.go).
const (
	// maxKeyLen is the longest key written (txn.put: bbolt's bound on an
	// index key, the stored time before it).
	maxKeyLen = bbolt.MaxKeySize - 8
	// gzipMaxRatio is the most deflate can expand: about 1032:1. A gzip
	// payload claiming more than that of its own size lies.
	gzipMaxRatio = 1032
	// etagLen is the length of every ETag an entry is made with
	// (cache.Entry.ComputeETag): a quote, 16 hex digits, a quote.
	etagLen = 18
)

// decodeEntry parses an entry record, refusing any identity size above
// maxBody (upstream.max_response_bytes: the edge never stored a larger
// answer). rec is owned by the entry from then on: its key, ETag and
// payload alias it.
//
// The identity size is what a request later allocates to inflate the
// payload into (cache.Entry.Inflate), so it is checked against maxBody,
// against what deflate can make of the payload and against the gzip's own
// trailer (ISIZE) before it is believed; an identity body must be its
// ETag's (the xxhash64 ComputeETag makes), a gzip's ETag at least of that
// shape: the proxy checks the body it inflates (proxy/tier.go).
func decodeEntry(rec []byte, maxBody int) (*cache.Entry, error) {
	b, ok := checked(rec)
	if !ok {
		return nil, errCorrupt
	}
	e := &cache.Entry{}
	rest, err := decodeHead(b, e, nil)
	if err != nil || len(rest) < 2 || rest[0]&^knownFlags != 0 {
		return nil, errCorrupt
	}
	flags := rest[0]
	e.Source = cache.Source(rest[1])
	rest = rest[2:]
	status, w := binary.Uvarint(rest)
	if w <= 0 || status > 999 {
		return nil, errCorrupt
	}
	rest = rest[w:]
	size, w := binary.Uvarint(rest)
	if w <= 0 || size > uint64(max(maxBody, 0)) {
		return nil, errCorrupt
	}
	rest = rest[w:]
	etag, payload, ok := field(rest)
	if !ok || !wellFormedETag(etag) {
		return nil, errCorrupt
	}
	e.Status, e.Size, e.ETag = int(status), int(size), etag
	if flags&flagGzip != 0 {
		if len(payload) < 18 || payload[0] != 0x1f || payload[1] != 0x8b ||
			size > uint64(len(payload))*gzipMaxRatio ||
			binary.LittleEndian.Uint32(payload[len(payload)-4:]) != uint32(size) {
			return nil, errCorrupt
		}
		e.Gzip = payload
	} else {
		if len(payload) != e.Size || !etagOf(etag, payload) {
			return nil, errCorrupt
		}
		e.Body = payload
	}
	return e, nil
}

// wellFormedETag says whether etag is of the shape ComputeETag makes.
func wellFormedETag(etag []byte) bool {
	if len(etag) != etagLen || etag[0] != '"' || etag[etagLen-1] != '"' {
		return false
	}
	for _, c := range etag[1 : etagLen-1] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// etagOf says whether etag (well formed) is body's ETag.
func etagOf(etag, body []byte) bool {
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], xxhash.Sum64(body))
	var want [16]byte
	hex.Encode(want[:], sum[:])
	return string(etag[1:etagLen-1]) == string(want[:])
}

// decodeIndex parses an index record into e (reused: its key aliases rec,
// its digests are copied into e's Tags.Hashes) and returns the cost.
func decodeIndex(rec []byte, e *cache.Entry) (int64, error) {
	b, ok := checked(rec)
	if !ok {
		return 0, errCorrupt
	}
	rest, err := decodeHead(b, e, e.Tags.Hashes)
	if err != nil || len(rest) != 8 {
		return 0, errCorrupt
	}
	return int64(binary.BigEndian.Uint64(rest)), nil
}

// storedOf reads the stored time of a head without checking anything but
// its length: enough to find the index record of a corrupt entry record.
func storedOf(rec []byte) (int64, bool) {
	if len(rec) < storedAt+8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(rec[storedAt:])), true
}

// field reads one uvarint-length-prefixed field, capped to its length.
func field(b []byte) (f, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return b[w:end:end], b[end:], true
}
