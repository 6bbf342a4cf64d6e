package projection

import (
	"fmt"
	"slices"

	"github.com/ctxd/ctxd/pkg/record"
)

// cache is one rendering of the view, as a list of messages or as encoded
// bytes, kept with the offsets of every entry so that a change rebuilds
// only from the first entry it touched. What it has handed out is never
// written again: a rebuild that would overwrite handed-out data copies
// the untouched prefix to a fresh buffer instead.
type cache struct {
	built uint64 // the session version this rendering reflects; 0 never
	from  int    // first entry that changed since; valid prefix below it

	msgs  []any  // the list rendering
	bytes []byte // the encoded renderings: each kept message, then a separator
	offs  []int  // offs[i]: where entry i starts in msgs or bytes
	count int    // messages rendered

	// held[i] is the estimated size of what the list rendering alone
	// holds before entry i (the messages decoded from packed entries),
	// and held[len(offs)] of all of it.
	held []int64

	failed []failure // entries whose message did not encode, in order

	// shared is set once bytes has been handed out, and cleared when a
	// rebuild by Apply starts a new buffer: until then a rebuild never
	// writes the bytes in place.
	shared bool

	// room is the capacity a rendering may keep since its session last
	// started over (restart), whatever its size.
	room int

	// reserve is the length of the records' JSON (raws, with their
	// separators) the next build copies in, which it makes room for in
	// one step when it must grow (see settle); 0 leaves growing to
	// append.
	reserve int
}

// failure is a message an encoding has no form for.
type failure struct {
	entry int
	err   error
}

func (c *cache) reset() { *c = cache{} }

// restart empties an encoded rendering whose session starts over (a
// compaction replaced its messages). A session that compacts mostly
// grows back to about the size it had: its new rendering may take the
// room the old one had (its bytes and the slack settle keeps), reusing
// the old buffer when nobody holds its bytes, rather than growing by
// steps from nothing, each step a copy of all the bytes so far. The room
// is counted as the session's memory while it is kept (see settle), and
// set again at every restart.
func (c *cache) restart() {
	b, shared := c.bytes, c.shared
	*c = cache{}
	if len(b) > 0 {
		c.room = len(b) + len(b)/4 + settleBytes
	}
	if !shared && b != nil {
		c.bytes = b[:0]
	}
}

func (c *cache) dirty(i int) {
	if i < c.from {
		c.from = i
	}
}

// Result returns the session's context and what the passes removed: what
// Build returns over every record applied so far. The result shares
// memory with the cache: read it, don't modify it. An unchanged session
// answers from the cache at no cost.
func (s *Session) Result() Result {
	return Result{Messages: s.Messages(), Dropped: s.Dropped()}
}

// Messages returns the model context; see Result.
func (s *Session) Messages() []any {
	c := &s.list
	if c.built == s.version && c.msgs != nil {
		return c.msgs[:len(c.msgs):len(c.msgs)]
	}
	from := min(c.from, len(c.offs))
	msgs := c.msgs
	if from < len(c.offs) {
		// Entries from `from` on may render differently: copy the prefix
		// rather than overwrite what callers hold.
		keep := c.offs[from]
		msgs = slices.Grow(c.msgs[:keep:keep], len(c.msgs)-keep+16)
		c.offs = c.offs[:from]
	}
	if msgs == nil {
		msgs = make([]any, 0, len(s.entries))
	}
	if len(c.held) == 0 {
		c.held = append(c.held, 0)
	}
	c.held = c.held[:from+1]
	for i := from; i < len(s.entries); i++ {
		c.offs = append(c.offs, len(msgs))
		held := c.held[i]
		if out := s.outOf(i); out != nil {
			msgs = append(msgs, out)
			if e := &s.entries[i]; e.packed || e.lazy {
				held += sizeOf(out) // decoded for the list alone
			}
		}
		c.held = append(c.held, held+16)
	}
	c.msgs, c.built, c.from, c.count = msgs, s.version, len(s.entries), len(msgs)
	return msgs[:len(msgs):len(msgs)]
}

// AppendJSON appends the model context as a JSON array to dst.
func (s *Session) AppendJSON(dst []byte) []byte {
	body, _ := s.JSONBody()
	dst = append(dst, '[')
	dst = append(dst, body...)
	return append(dst, ']')
}

// JSONBody returns the JSON encodings of the context's messages, joined
// by commas, without the enclosing brackets, and the number of messages.
// Record values always have a JSON form. The bytes are shared with the
// cache: read them, don't modify them.
func (s *Session) JSONBody() ([]byte, int) {
	b := s.encoded(&s.json, appendMessageJSON, ',')
	return b[:len(b):len(b)], s.json.count
}

// MsgpackBody returns the msgpack encodings of the context's messages,
// concatenated (a msgpack array's elements), and their number. The bytes
// are shared with the cache: read them, don't modify them.
//
// A JSON record may hold a number msgpack cannot carry (1E400 is beyond
// float64); a context with such a number has no msgpack form, and
// MsgpackBody returns an error wrapping record.ErrUnsupported. The body
// then holds only the messages that encode: it is not the context and
// must not be served as it.
func (s *Session) MsgpackBody() ([]byte, int, error) {
	b := s.encoded(&s.msgpack, appendMessageMsgpack, 0)
	var err error
	if len(s.msgpack.failed) > 0 {
		f := s.msgpack.failed[0]
		err = fmt.Errorf("message from seq %d: %w", s.entries[f.entry].seq, f.err)
	}
	return b[:len(b):len(b)], s.msgpack.count, err
}

// AppendMsgpack appends the model context as a msgpack array to dst. When
// the context has no msgpack form (see MsgpackBody) it returns dst
// unchanged: a partial array would be read as a different context.
func (s *Session) AppendMsgpack(dst []byte) []byte {
	body, n, err := s.MsgpackBody()
	if err != nil {
		return dst
	}
	dst = record.AppendMsgpackArrayLen(dst, n)
	return append(dst, body...)
}

func appendMessageJSON(dst []byte, m *record.Map) ([]byte, error) {
	return record.AppendJSON(dst, m)
}

func appendMessageMsgpack(dst []byte, m *record.Map) ([]byte, error) {
	return record.AppendMsgpack(dst, m)
}

// encoder appends one message's encoding.
type encoder func(dst []byte, m *record.Map) ([]byte, error)

// encoded brings an encoded rendering up to date. sep, unless 0, goes
// between messages: an entry's bytes start with it when a kept message
// comes before. A message that fails to encode leaves no bytes and is
// listed in c.failed.
//
// It returns the rendering's bytes, appending to them in place when
// entries were only added.
//
// What the cache has handed out is never written again: a rebuild that
// would overwrite handed-out bytes starts a new buffer with the unchanged
// prefix instead.
func (s *Session) encoded(c *cache, enc encoder, sep byte) []byte {
	if c.built == s.version && c.bytes != nil {
		c.reserve = 0
		c.shared = c.shared || !s.settling
		return c.bytes
	}
	old, oldOffs, oldFailed := c.bytes, c.offs, c.failed
	// src holds the old bytes of the entries from `from` on, at
	// src[off-srcBase]: old itself, or a copy of its tail when the
	// rebuild writes over old in place.
	src, srcBase := old, 0
	// inPlace: buf is old's own array, and src is old, so a write must
	// not reach the bytes of an entry not yet read. The entries are
	// written at or below where they were read from when a changed one
	// shrank (a screenshot trimmed); a write that would go past the
	// bytes already read copies the rest of the tail to src first.
	inPlace := false
	spill := func(at int) {
		if inPlace {
			src, srcBase, inPlace = slices.Clone(old[at:]), at, false
		}
	}
	var scratch []byte
	from := min(c.from, len(oldOffs))
	cut := len(old)
	if from < len(oldOffs) {
		cut = oldOffs[from]
	}
	var buf []byte
	switch {
	case from < len(oldOffs) && !c.shared:
		// Nobody holds these bytes (Apply built them since the last read):
		// rebuild from the changed entry in place, moving the entries
		// after it down within the buffer (see inPlace below), rather
		// than copying the whole prefix every time Apply settles the
		// session.
		buf, inPlace = old[:cut], true
	case from < len(oldOffs):
		// Growing a capped slice copies the prefix without first zeroing
		// the copy.
		// Room for a sixteenth more: the slack is memory the session
		// is counted at.
		buf = slices.Grow(old[:cut:cut], len(old)-cut+len(old)/16+1024)
	case old != nil:
		buf = old
	default:
		buf = make([]byte, 0, max(1024, c.room))
	}
	// rawLeft is what the records' JSON still to be copied in takes,
	// when the build reserves room for it (see cache.reserve).
	rawLeft := c.reserve
	c.reserve = 0
	count, failed := c.count, c.failed
	if from < len(oldOffs) {
		failed = nil
		for _, f := range oldFailed {
			if f.entry < from {
				failed = append(failed, f)
			}
		}
		// Count the messages kept in the prefix.
		count = 0
		for i := 0; i < from; i++ {
			if s.entries[i].kept {
				count++
			}
		}
		count -= len(failed)
	}
	// offs is rewritten in place: iteration i reads oldOffs[i] and
	// oldOffs[i+1] before it writes offs[i].
	offs := oldOffs[:from]
	// settled lists the entries the JSON rendering encoded, and whether
	// from their records' JSON (see ApplyJSON), which needs no check that
	// JSON carries the message exactly.
	type settledEntry struct {
		i       int
		fromRaw bool
	}
	var settled []settledEntry
	// rawOf returns the record's JSON of entry i when it is the encoding
	// of out, its rendering (see ApplyJSON); i only grows.
	r := 0
	rawOf := func(i int, out *record.Map) []byte {
		if c != &s.json {
			return nil
		}
		for r < len(s.raws) && s.raws[r].entry < i {
			r++
		}
		if r < len(s.raws) && s.raws[r].entry == i && s.raws[r].msg == out {
			return s.raws[r].b
		}
		return nil
	}
	for i := from; i < len(s.entries); i++ {
		e := &s.entries[i]
		start := len(buf)
		end := len(old) // where entry i's old bytes end
		if i+1 < len(oldOffs) {
			end = oldOffs[i+1]
		}
		if i < len(oldOffs) && e.changed <= c.built {
			// Unchanged since this rendering: copy its bytes, with a
			// separator if a kept message now comes before it.
			bytesOf := func() []byte {
				b := src[oldOffs[i]-srcBase : end-srcBase]
				if sep != 0 && len(b) > 0 && b[0] == sep {
					b = b[1:]
				}
				return b
			}
			if b := bytesOf(); len(b) > 0 {
				withSep := sep != 0 && count > 0
				if n := len(buf) + len(b); inPlace && (n > end || withSep && n+1 > end) {
					spill(oldOffs[i])
					b = bytesOf()
				}
				if inPlace {
					// Move first, then write the separator: it may lie
					// where b started.
					n := len(buf)
					if withSep {
						n++
					}
					buf = buf[:n+len(b)]
					copy(buf[n:], b)
					if withSep {
						buf[n-1] = sep
					}
				} else {
					if withSep {
						buf = append(buf, sep)
					}
					buf = append(buf, b...)
				}
				count++
			} else if f, ok := failureOf(oldFailed, i); ok {
				failed = append(failed, f)
			}
		} else if raw, out := s.renderingOf(i, c == &s.json, rawOf); raw != nil || out != nil {
			// A packed entry is unchanged since the JSON rendering, so
			// only the other renderings come here for it.
			aside := inPlace && i < len(oldOffs)
			dst := buf
			if aside {
				// Its old bytes and those after it are still to be read:
				// encode aside, then copy in if it fits.
				dst = scratch[:0]
			}
			if sep != 0 && count > 0 {
				dst = append(dst, sep)
			}
			var err error
			if raw != nil {
				if rawLeft > 0 && !aside && cap(dst)-len(dst) < len(raw) {
					// Grown once for all of it, rather than by append's
					// steps of a quarter, each a copy of the bytes so
					// far. Grown here, past the entries rebuilt before
					// the new ones, which a trimmed screenshot may have
					// shrunk; the old bytes are all read (raws are only
					// the new entries').
					nb := make([]byte, len(dst), len(dst)+rawLeft+rawLeft/16)
					copy(nb, dst)
					dst, inPlace = nb, false
				}
				rawLeft -= len(raw) + 1
				dst = append(dst, raw...)
			} else {
				dst, err = enc(dst, out)
			}
			switch {
			case err != nil:
				failed = append(failed, failure{entry: i, err: err})
				if !aside {
					buf = buf[:start] // no partial message
				}
			case aside:
				scratch = dst
				if len(buf)+len(dst) > end {
					spill(end)
				}
				buf = append(buf, dst...)
			default:
				buf = dst
			}
			if err == nil {
				count++
				if c == &s.json {
					settled = append(settled, settledEntry{i, raw != nil})
				}
			}
		}
		offs = append(offs, start)
	}
	c.bytes, c.offs, c.built, c.from, c.count, c.failed = buf, offs, s.version, len(s.entries), count, failed
	// A build for Apply hands nothing out: its bytes stay unshared when
	// it started a new buffer, or wrote one nobody held.
	sameBuf := cap(buf) > 0 && cap(old) > 0 && &buf[:1][0] == &old[:1][0]
	c.shared = !s.settling || (c.shared && sameBuf)
	if c == &s.json {
		// Now that the JSON cache holds them, the entries it rendered
		// may be let go of, and the records' JSON of those appended.
		for _, e := range settled {
			s.pack(e.i, e.fromRaw)
		}
		s.dropRaws()
	}
	return buf
}

// renderingOf returns entry i's rendering for encoded: the JSON that
// stands for it (json says the JSON rendering is built, and rawOf finds
// a record's JSON), or else the message to encode; both nil when the
// passes drop it. A lazy entry rendered as itself gives its record's
// JSON without being decoded.
func (s *Session) renderingOf(i int, json bool, rawOf func(int, *record.Map) []byte) ([]byte, *record.Map) {
	if json && s.entries[i].lazy {
		s.render(i)
		if s.entries[i].lazy {
			return s.raws[s.rawAt(i)].b, nil
		}
	}
	out := s.outOf(i)
	if out == nil || !json {
		return nil, out
	}
	return rawOf(i, out), out
}

func failureOf(failed []failure, entry int) (failure, bool) {
	for _, f := range failed {
		if f.entry == entry {
			return f, true
		}
	}
	return failure{}, false
}
