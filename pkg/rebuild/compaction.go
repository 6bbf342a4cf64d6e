package rebuild

import (
	"bytes"

	"github.com/ctxd/ctxd/pkg/store"
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

// Resets reports whether a record restarts its session under lim, as the
// service decides it (store.Limits.Resets of the decoded record). It
// decodes only the records that could be compactions, and answers exactly
// as decoding every record would.
func Resets(lim store.Limits, data []byte) bool {
	if !mayBeCompaction(data) {
		return false
	}
	v, err := lim.Decoder().Decode(data)
	return err == nil && lim.Resets(v, len(data))
}
