package disk

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"explorer-edge/cache"
)

// FuzzDiskRecord feeds the decoders arbitrary records, given a checksum
// that holds so that the parsing behind it is reached: a miss or an entry,
// never a panic; an entry decoded has sizes within the bounds (MaxBody,
// deflate's ratio), a well-formed ETag, inflates (or fails to) without
// allocating past them, and encodes to a record that decodes the same.
func FuzzDiskRecord(f *testing.F) {
	const maxBody = 1 << 16
	stored := time.Unix(1_800_000_000, 0)
	for _, e := range []*cache.Entry{
		final("/k", []byte(`{"code":"0"}`), stored, 1, 7),
		final("/z", bytes.Repeat([]byte(`{"state":"done"},`), 100), stored, 2, 9),
		cache.NewItem("", nil, cache.Final, stored, time.Hour, 0, 0),
	} {
		for _, rec := range [][]byte{encodeEntry(e), encodeIndex(e, 4096)} {
			f.Add(rec[:len(rec)-sumLen])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := binary.BigEndian.AppendUint64(bytes.Clone(body), xxhash.Sum64(body))
		storedOf(rec)
		var scratch cache.Entry
		decodeIndex(rec, &scratch)
		e, err := decodeEntry(bytes.Clone(rec), maxBody)
		if err != nil {
			return
		}
		if e.Size > maxBody || len(e.Key) > maxKeyLen || !wellFormedETag(e.ETag) ||
			e.Gzip != nil && e.Size > len(e.Gzip)*gzipMaxRatio || e.Gzip == nil && len(e.Body) != e.Size {
			t.Fatalf("decoded past the bounds: key %d bytes, size %d, gzip %d, body %d, etag %q",
				len(e.Key), e.Size, len(e.Gzip), len(e.Body), e.ETag)
		}
		if out, err := e.Inflate(nil); err == nil && len(out) != e.Size {
			t.Fatalf("inflated %d bytes, size %d", len(out), e.Size)
		}
		// Encoded again (uvarints may come back shorter), it decodes the same.
		again, err := decodeEntry(encodeEntry(e), maxBody)
		if err != nil {
			t.Fatalf("decoded %+v; encoded again it does not decode: %v", e, err)
		}
		if again.Key != e.Key || !bytes.Equal(again.Body, e.Body) || !bytes.Equal(again.Gzip, e.Gzip) ||
			!bytes.Equal(again.ETag, e.ETag) || again.Size != e.Size || again.Status != e.Status ||
			again.Fresh != e.Fresh || again.Tags.Lo != e.Tags.Lo || len(again.Tags.Hashes) != len(e.Tags.Hashes) {
			t.Fatalf("decoded %+v\nencoded again: %+v", e, again)
		}
	})
}
