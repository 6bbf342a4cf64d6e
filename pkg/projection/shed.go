package projection

import (
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// A session holds what its context can still need. The images of a
// trimmed screenshot can never come back into the context: a browser
// result is trimmed because a later browser result with images exists,
// that one never leaves the session (nothing is removed from a session
// but by a compaction, which replaces every message), and an id once a
// browser call's stays one, once paired stays paired. So the moment a
// result is trimmed, its message is replaced by the message with that
// result's images replaced by the omission notice, as the rendering
// does: what the session holds of a browsing session is about its
// context, not every screenshot it was sent. The result keeps its image
// count, which the Dropped report counts and a snapshot stores (see
// snapshot.go, trimmed results).
//
// The new message is a copy that shares no memory with the record: a
// decoded record's maps, arrays and short strings share blocks, and a
// long string may be the input buffer itself (record.Decoder.ShareInput),
// so a message that kept any part of the record would keep its images
// alive too.
//
// Nothing else is let go. An image anywhere else (a user's upload, an
// extension message, a non-browser result, the latest screenshot) may
// stay in the context for as long as the session lasts, and an orphan
// result, though never in the context, is stored whole, as it was sent.

// shed replaces entry i's message by the message with the images of its
// trimmed results omitted, when it still holds some; the entry must be
// stale (touched), as its rendering is recomputed from the new message.
func (s *Session) shed(i int) {
	e := &s.entries[i]
	if e.msg == nil || len(e.results) == 0 {
		return
	}
	actual := resultsOf(e.msg) // the images the message still holds
	all := func(result) bool { return true }
	out := rewrite(e.msg, e.calls, actual, func(call) bool { return true }, all,
		func(r result) bool {
			// A result after the latest is one of this entry's that
			// Apply has not come to yet: it may be the next latest.
			return s.paired(r.id) && s.trimmed(i, r) && !(site{i, r.block}).after(s.latest)
		})
	if out == nil || out == e.msg {
		return
	}
	s.msgBytes -= e.size
	e.msg, e.out = detach(out).(*record.Map), nil
	e.size = sizeOf(out)
	s.msgBytes += e.size
}

// detach returns a deep copy of a record value that shares no memory
// with it.
func detach(v any) any {
	switch x := v.(type) {
	case string:
		return strings.Clone(x)
	case record.Number:
		return record.Number(strings.Clone(string(x)))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = detach(e)
		}
		return out
	case *record.Map:
		if x == nil {
			return x
		}
		out := &record.Map{Members: make([]record.Member, len(x.Members))}
		for i, m := range x.Members {
			out.Members[i] = record.Member{Key: strings.Clone(m.Key), Value: detach(m.Value)}
		}
		return out
	}
	return v
}

// sizeOf estimates the bytes a decoded value holds: its strings and
// the headers of its strings, slices, maps and interfaces.
func sizeOf(v any) int64 {
	switch x := v.(type) {
	case string:
		return 16 + int64(len(x))
	case record.Number:
		return 16 + int64(len(x))
	case []any:
		n := int64(24)
		for _, e := range x {
			n += 16 + sizeOf(e)
		}
		return n
	case *record.Map:
		if x == nil {
			return 0
		}
		n := int64(8 + 24)
		for _, m := range x.Members {
			n += 16 + int64(len(m.Key)) + 16 + sizeOf(m.Value)
		}
		return n
	}
	return 8
}

// Size returns an estimate of the bytes the session holds: the messages
// it keeps decoded, its cached renderings, and its indexes. It changes
// as records are applied and as renderings are built (a settled message
// is then held once, as its JSON bytes), never with the session's
// history alone: a trimmed screenshot's images are not held.
func (s *Session) Size() int64 {
	const (
		perEntry = 128 // an entry, its calls and results
		perID    = 128 // an id's state, map slot and name
	)
	n := s.msgBytes + int64(len(s.json.bytes)+len(s.msgpack.bytes))
	if h := s.list.held; len(h) > 0 {
		n += h[len(h)-1]
	}
	n += perEntry*int64(len(s.entries)) + perID*int64(len(s.idSlab))
	return n
}
