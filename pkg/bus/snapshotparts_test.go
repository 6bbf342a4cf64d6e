package bus

import (
	"bytes"
	"testing"
)

// The head of a parted snapshot decodes from any bytes without
// panicking; what it takes names 1 to maxSnapshotParts parts, and
// encodes back to the same bytes.
func FuzzParseParts(f *testing.F) {
	f.Add(appendParts(nil, partsHead{id: 7, parts: 3, total: 3 << 20, sum: 42}))
	f.Add(append(bytes.Clone(partsMagic), 1, 2, 3))
	f.Add(bytes.Clone(partsMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		data := append(bytes.Clone(partsMagic), b...)
		h, err := parseParts(data)
		if err != nil {
			return
		}
		if h.parts < 1 || h.parts > maxSnapshotParts || h.total < 0 {
			t.Fatalf("head taken with %d parts, %d bytes", h.parts, h.total)
		}
		if h2, err := parseParts(appendParts(nil, h)); err != nil || h2 != h {
			t.Fatalf("head %+v does not read back: %+v, %v", h, h2, err)
		}
	})
}
