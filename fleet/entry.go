package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"

	"explorer-edge/cache"
)

// An entry in Redis is one string:
//
//	version  1 byte   formatVersion; any other value is a miss, never a guess
//	class    1 byte   cache.Class
//	flags    1 byte   flagGzip: the payload is the gzip of the body
//	stored   8 bytes  unix ns, big endian (absolute, so Age carries over)
//	fresh    8 bytes  unix ns
//	swr      8 bytes  ns past fresh
//	sie      8 bytes  ns past fresh
//	key      uvarint length, bytes (checked on read against hash-tag collisions)
//	etag     uvarint length, bytes
//	payload  the rest: the gzip bytes when the entry has them, else the body
//
// The payload is the one copy the entry holds (cache.Entry: its gzip when
// that is smaller, else the body), and the entry read back holds the same
// bytes: nothing is inflated or compressed again here. (The proxy inflates
// it once, into a reused buffer, to check it: proxy/tier.go, sharedTier.) A format change
// takes a new version byte; nodes of the old version then miss on the new
// entries (and overwrite them) instead of misreading.
const formatVersion = 1

const (
	flagGzip   = 1 << 0
	knownFlags = flagGzip
	headerLen  = 3 + 4*8
)

var errVersion = errors.New("unknown entry format version")

// encode returns the Redis value of e.
func encode(e *cache.Entry) []byte {
	payload, flags := e.Body, byte(0)
	if len(e.Gzip) > 0 {
		payload, flags = e.Gzip, flagGzip
	}
	b := make([]byte, headerLen, headerLen+2*binary.MaxVarintLen16+len(e.Key)+len(e.ETag)+len(payload))
	b[0], b[1], b[2] = formatVersion, byte(e.Class), flags
	binary.BigEndian.PutUint64(b[3:], uint64(e.Stored))
	binary.BigEndian.PutUint64(b[11:], uint64(e.Fresh))
	binary.BigEndian.PutUint64(b[19:], uint64(e.StaleWhileRevalidate))
	binary.BigEndian.PutUint64(b[27:], uint64(e.StaleIfError))
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	b = append(b, e.Key...)
	b = binary.AppendUvarint(b, uint64(len(e.ETag)))
	b = append(b, e.ETag...)
	return append(b, payload...)
}

// decode parses a value written by encode. b is owned by the entry from
// then on (the gzip payload aliases it).
func decode(b []byte, maxBody int) (*cache.Entry, error) {
	if len(b) == 0 || b[0] != formatVersion {
		return nil, errVersion
	}
	if len(b) < headerLen {
		return nil, fmt.Errorf("entry of %d bytes is shorter than its header", len(b))
	}
	class, flags := cache.Class(b[1]), b[2]
	if class > cache.Negative || flags&^knownFlags != 0 {
		return nil, fmt.Errorf("entry has class %d, flags %#x", class, flags)
	}
	e := &cache.Entry{
		Class:                class,
		Stored:               int64(binary.BigEndian.Uint64(b[3:])),
		Fresh:                int64(binary.BigEndian.Uint64(b[11:])),
		StaleWhileRevalidate: int64(binary.BigEndian.Uint64(b[19:])),
		StaleIfError:         int64(binary.BigEndian.Uint64(b[27:])),
	}
	rest := b[headerLen:]
	key, rest, ok := field(rest)
	if !ok {
		return nil, errors.New("entry key truncated")
	}
	etag, rest, ok := field(rest)
	if !ok {
		return nil, errors.New("entry etag truncated")
	}
	e.Key, e.ETag = string(key), etag
	if flags&flagGzip == 0 {
		if len(rest) > maxBody {
			return nil, fmt.Errorf("body of %d bytes, more than %d", len(rest), maxBody)
		}
		e.Body, e.Size = rest, len(rest)
		return e, nil
	}
	size, err := gzipSize(rest, maxBody)
	if err != nil {
		return nil, fmt.Errorf("entry gzip: %w", err)
	}
	e.Gzip, e.Size = rest, size
	return e, nil
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

// gzipMaxRatio is the most deflate can expand: about 1032:1. A value whose
// trailer claims more than that of its own size lies.
const gzipMaxRatio = 1032

// gzipSize is the size the gzip z declares it inflates to (its trailer,
// RFC 1952 ISIZE), checked against maxBody and against what deflate can
// make of z: whoever can write to Redis can write any trailer, and the
// buffer z is later inflated into is sized from it (a 60-byte value
// claiming 64 MiB must not allocate 64 MiB). Inflating checks that z does
// inflate to exactly that.
func gzipSize(z []byte, maxBody int) (int, error) {
	if len(z) < 18 || z[0] != 0x1f || z[1] != 0x8b {
		return 0, errors.New("not a gzip member")
	}
	size := binary.LittleEndian.Uint32(z[len(z)-4:])
	if int64(size) > int64(maxBody) {
		return 0, fmt.Errorf("declares %d bytes, more than %d", size, maxBody)
	}
	if int64(size) > int64(len(z))*gzipMaxRatio {
		return 0, fmt.Errorf("declares %d bytes from %d: more than deflate can make", size, len(z))
	}
	return int(size), nil
}
