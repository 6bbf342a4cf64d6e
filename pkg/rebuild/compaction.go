package rebuild

import (
	"bytes"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

var (
	compactionWord = []byte("compaction")
	unicodeEscape  = []byte(`\u`)
)

// mayBeCompaction reports whether a record's bytes could decode to a
// valid compaction. A valid compaction has the string "compaction" as its
// type (CONTEXT.md section 4). A msgpack str holds its bytes verbatim, and
// neither bin (decoded to base64, whose length is a multiple of four, not
// ten) nor a timestamp can decode to that word. A JSON string holds it
// verbatim unless some of its letters are written as \u escapes, the only
// escapes that can stand for a letter. So a record holding neither the
// word nor a \u is certainly not a compaction. Looking for \u in msgpack
// too only costs a needless decode now and then.
func mayBeCompaction(data []byte) bool {
	return bytes.Contains(data, compactionWord) || bytes.Contains(data, unicodeEscape)
}

// IsCompaction reports whether data decodes, with dec, to a valid
// compaction. It decodes only the records that could be one, and answers
// exactly as decoding every record would.
func IsCompaction(dec record.Decoder, data []byte) bool {
	if !mayBeCompaction(data) {
		return false
	}
	v, err := dec.Decode(data)
	return err == nil && projection.IsValidCompaction(v)
}
