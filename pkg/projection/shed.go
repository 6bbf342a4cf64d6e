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

// A session settles as it is applied, not only when it is read. Until
// its JSON rendering is built, every message is held decoded, which
// takes several times its JSON (a short message about five times; a
// screenshot's base64 about 1.15 times, counted with the block it is
// allocated in): a session applied and never read would be held at
// about twice its context. So Apply builds the JSON rendering once the
// messages decoded since it last did hold settleBytes, or an eighth of
// the rendering if more, and the entries that settled are packed (see
// pack.go). A session is then held at about its context plus its
// indexes whether it has been read or not. Building it in steps of an
// eighth of its size keeps the copying of a rebuild's prefix (a
// screenshot trimmed behind the tail) to a few bytes per byte applied.
//
// A lazy entry (lazy.go) is held as its record's JSON, which takes what
// its bytes in the rendering would: settling it saves nothing, and
// copying it into a rendering that grows an eighth at a time would copy
// every byte about four times more, at the cost of a fresh block of
// memory each time. So lazy entries settle when their JSON is as long
// as the rendering (or settleBytes), and the rendering then grows in one
// step by what they hold: it doubles at most once per such settle, and
// every byte applied is copied about once more. What they hold beyond
// their JSON (rawOverhead each) settles them too when it reaches a
// quarter of the rendering: records of under 128 bytes or so, whose list
// would otherwise take more than their bytes.
//
// A variable only so that tests can settle small sessions often.
var settleBytes = 16 << 10

// rawOverhead is what a record's JSON held for its entry (raws) takes
// beyond its length: its place in the list, and its buffer's rounding to
// a size class.
const rawOverhead = 64

// settle builds the JSON rendering, packing the entries it settles, when
// the messages decoded since it was last built hold enough, or its lazy
// entries do; see above.
func (s *Session) settle() {
	decoded := s.msgBytes - s.lazyBytes
	s.settled = min(s.settled, decoded) // a read packed them meanwhile
	n := int64(len(s.json.bytes))
	lazy := s.lazyBytes >= max(int64(settleBytes), n) || rawOverhead*int64(len(s.raws)) >= max(int64(settleBytes), n/4)
	if !lazy && decoded-s.settled < max(int64(settleBytes), n/8) {
		return
	}
	if lazy {
		s.json.reserve = int(s.rawBytes) + len(s.raws) // their bytes and separators
	}
	c := s.settleAll()
	// The rendering's room to grow is memory the session is counted at:
	// what append leaves (a quarter at most), or the room the rendering
	// had before the session last started over (restart), is kept; more
	// is given back.
	if n := len(c.bytes); !c.shared && cap(c.bytes) > max(n+n/4+settleBytes, c.room) {
		c.bytes = append(make([]byte, 0, n+n/8+settleBytes), c.bytes...)
	}
}

// settleAll builds the JSON rendering for Apply, which hands nothing
// out, packing the entries it settles, and returns it.
func (s *Session) settleAll() *cache {
	c := &s.json
	s.settling = true
	s.encoded(c, appendMessageJSON, ',')
	s.settling = false
	s.settled = s.msgBytes - s.lazyBytes
	return c
}

// Fit settles the whole session and gives back the room its JSON
// rendering keeps to grow in (see settle), when nobody holds its bytes:
// for a session loaded whole, which may be read and never grow again. A
// session that grows after pays one copy of its rendering more.
func (s *Session) Fit() {
	if s.json.shared {
		return
	}
	c := s.settleAll()
	// Built for Apply, the bytes are still not handed out.
	if n := len(c.bytes); cap(c.bytes) > n {
		c.bytes = append(make([]byte, 0, n), c.bytes...)
	}
	c.room = 0
}

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
	out := rewrite(e.msg, e.role, e.calls, actual, func(call) bool { return true }, all,
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

// sizeOf estimates the bytes a decoded message holds: its strings and
// the headers of its strings, slices, maps and interfaces, and what the
// decoder's allocation adds to them. A decoder copies a long string
// (over 512 bytes) to an allocation of its own, rounded up to a size
// class, and the short ones of a record to blocks of up to 4 KiB sized
// for the input left to read, which a long string then leaves mostly
// empty: up to 4 KiB a record more, counted here against its long
// strings; and its maps, members and elements come from blocks of a few
// of each, about 128 bytes a record more.
func sizeOf(m *record.Map) int64 {
	n, long := valueSize(m)
	return n + min(long, 4096) + 128
}

// valueSize returns the bytes of a value's strings and headers, and of
// its long strings alone.
func valueSize(v any) (n, long int64) {
	str := func(s int) (int64, int64) {
		if s > 512 {
			return 16 + int64(s) + int64(s)/8, int64(s)
		}
		return 16 + int64(s), 0
	}
	switch x := v.(type) {
	case string:
		return str(len(x))
	case record.Number:
		return str(len(x))
	case []any:
		n = 24
		for _, e := range x {
			en, el := valueSize(e)
			n, long = n+16+en, long+el
		}
		return n, long
	case *record.Map:
		if x == nil {
			return 0, 0
		}
		n = 8 + 24
		for _, m := range x.Members {
			en, el := valueSize(m.Value)
			n, long = n+16+int64(len(m.Key))+16+en, long+el
		}
		return n, long
	}
	return 8, 0
}

// Size returns an estimate of the bytes the session holds: the messages
// it keeps decoded, its cached renderings, and its indexes. It changes
// as records are applied and as renderings are built (a settled message
// is then held once, as its JSON bytes), never with the session's
// history alone: a trimmed screenshot's images are not held.
func (s *Session) Size() int64 {
	const (
		// An entry with its calls, results and offsets in the caches,
		// and an id's state, map slot and name, as a heap profile of
		// text-only sessions measures them.
		perEntry = 200
		perID    = 150
	)
	n := s.msgBytes + int64(cap(s.json.bytes)+cap(s.msgpack.bytes)) + rawOverhead*int64(len(s.raws))
	if h := s.list.held; len(h) > 0 {
		n += h[len(h)-1]
	}
	n += perEntry*int64(len(s.entries)) + perID*int64(len(s.idSlab))
	return n
}
