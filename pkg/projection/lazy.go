package projection

import (
	"fmt"
	"math"
	"sort"

	"github.com/ctxd/ctxd/pkg/record"
)

// A message applied from its canonical JSON (ApplyShaped) is held as that
// JSON until something needs it decoded: most messages pass through the
// passes as they are, settle into the JSON rendering as the same bytes,
// and are never decoded whole. What the passes read of a message (its
// role, its calls and results, whether its content stands on its own) is
// all Shape names, and the record is decoded to that alone.
//
// Such an entry is lazy: it holds no message, its record's JSON is held
// in raws, and while it is lazy its rendering is its message. The
// skeleton the record decoded to is read while the record is applied,
// for the entry's role, calls and results and whether it stands alone
// (standsAlone), and let go of. Rendering a lazy entry asks keptAsIs,
// from those alone, whether rewrite would keep the message as it is.
// When it would not (a call not yet answered, a result dropped or
// trimmed), or when anything else needs the message (a trim, a rendering
// other than JSON), the entry is materialized: its message is decoded
// from the record's JSON and it is an entry like any other. Settling
// into the JSON rendering copies a lazy entry's JSON and packs it.

// Shape is what the passes read of a record: pass 1's keyFields and
// ruleOf, callsOf, resultsOf, standsAlone, and rewrite. A function of
// the passes that reads more of a message must add it here, or read it
// from a materialized entry: TestShape_ReadsWhatThePassesRead holds the
// skeleton to the whole record for every pass.
var Shape = func() *record.Shape {
	whole := func(names ...string) []record.ShapeKey {
		keys := make([]record.ShapeKey, len(names))
		for i, n := range names {
			keys[i] = record.ShapeKey{Name: n, Shape: record.WholeShape}
		}
		return keys
	}
	images := &record.Shape{Elems: &record.Shape{Keys: whole("type")}}
	block := &record.Shape{Keys: append(whole("type", "id", "toolCallId", "tool_call_id", "tool_call_id$", "name", "providerExecuted", "tool_use_id"),
		record.ShapeKey{Name: "content", Shape: images})}
	openAICall := &record.Shape{Keys: append(whole("id", "name", "providerExecuted"),
		record.ShapeKey{Name: "function", Shape: &record.Shape{Keys: whole("name")}})}
	return &record.Shape{Keys: append(whole("kind", "role", "type", "toolCallId", "tool_call_id", "tool_call_id$"),
		record.ShapeKey{Name: "content", Shape: &record.Shape{Scalars: true, Elems: block}},
		record.ShapeKey{Name: "tool_calls", Shape: &record.Shape{Elems: openAICall}})}
}()

// PassesThrough reports whether a record decoded to Shape is a message
// that pass 1 keeps as it is, and so one ApplyShaped holds as its JSON;
// never a compaction.
func PassesThrough(skel *record.Map) bool {
	kind, role, typ := keyFields(skel)
	return typ != "compaction" && ruleOf(kind, role, typ) == rulePassThrough
}

// ApplyShaped is ApplyJSON for a record given by its JSON raw, which
// record.Decoder.DecodeShape (or a ShapeReader) found canonical and
// decoded to Shape as skel: a message holds raw, which must not change,
// rather than its decoded form, until something needs that (see above).
// skel is read only during the call, and nothing of it is kept. A record
// that PassesThrough refuses is decoded whole and applied as ApplyJSON
// does.
func (s *Session) ApplyShaped(seq uint64, skel *record.Map, raw []byte) bool {
	if !PassesThrough(skel) {
		return s.ApplyJSON(seq, decodeRaw(raw, seq), raw)
	}
	if seq <= s.seq {
		return false
	}
	s.seq = seq
	i := len(s.entries)
	s.raws = append(s.raws, rawJSON{entry: i, b: raw, alone: standsAlone(skel)})
	s.rawBytes += int64(len(raw))
	s.lazyBytes += int64(len(raw))
	s.msgBytes += int64(len(raw))
	s.appendWith(seq, skel, resultsOf(skel), true)
	s.settle()
	return true
}

// rawDecoder decodes a record's JSON that DecodeShape checked: valid
// UTF-8 without control characters in its strings, within the limits it
// was read with, held by the session as long as what it decodes to.
var rawDecoder = record.Decoder{MaxBytes: math.MaxInt, MaxDepth: math.MaxInt32, ShareInput: true, ShareShort: true, Trusted: true}

// decodeRaw decodes the JSON of the record at seq, which DecodeShape
// checked. It cannot fail: if it did, going on would serve another
// context.
func decodeRaw(raw []byte, seq uint64) *record.Map {
	m, err := rawDecoder.Decode(raw)
	if err != nil {
		panic(fmt.Sprintf("projection: record from seq %d does not decode: %v", seq, err))
	}
	return m
}

// rawAt returns the index in raws of entry i's record JSON, which a lazy
// entry has.
func (s *Session) rawAt(i int) int {
	r := sort.Search(len(s.raws), func(k int) bool { return s.raws[k].entry >= i })
	if r == len(s.raws) || s.raws[r].entry != i {
		panic(fmt.Sprintf("projection: entry %d of seq %d has no JSON", i, s.entries[i].seq))
	}
	return r
}

// renderLazy renders lazy entry i, without decoding it, when its message
// is kept as it is, and reports whether it did; otherwise it materializes
// the entry, which then renders as any other.
func (s *Session) renderLazy(i int) bool {
	e := &s.entries[i]
	if keptAsIs(e.role, e.calls, e.results, s.raws[s.rawAt(i)].alone,
		func(c call) bool { return s.paired(c.id) },
		func(r result) bool { return s.paired(r.id) },
		func(r result) bool { return s.trimmed(i, r) }) {
		e.stale, e.kept = false, true
		return true
	}
	s.materialize(i)
	return false
}

// materialize decodes lazy entry i's message from its record's JSON.
func (s *Session) materialize(i int) {
	e := &s.entries[i]
	if !e.lazy {
		return
	}
	r := s.rawAt(i)
	m := decodeRaw(s.raws[r].b, e.seq)
	s.raws[r].msg = m
	s.lazyBytes -= int64(len(s.raws[r].b))
	e.msg, e.lazy = m, false
	e.size = sizeOf(m)
	s.msgBytes += e.size
	if !e.stale && e.kept {
		e.out = m // rendered as itself
	}
}

// lazyMessage returns lazy entry i's message, decoded for the caller
// alone: the entry stays lazy.
func (s *Session) lazyMessage(i int) *record.Map {
	return decodeRaw(s.raws[s.rawAt(i)].b, s.entries[i].seq)
}
