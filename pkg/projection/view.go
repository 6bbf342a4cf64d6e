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

	failed []failure // entries whose message did not encode, in order
}

// failure is a message an encoding has no form for.
type failure struct {
	entry int
	err   error
}

func (c *cache) reset() { *c = cache{} }

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
	for i := from; i < len(s.entries); i++ {
		c.offs = append(c.offs, len(msgs))
		if out := s.outOf(i); out != nil {
			msgs = append(msgs, out)
		}
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
	b := s.encoded(&s.json, appendMessageJSON)
	if len(b) > 0 {
		b = b[:len(b)-1] // the separator after the last message
	}
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
	b := s.encoded(&s.msgpack, appendMessageMsgpack)
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
	dst, err := record.AppendJSON(dst, m)
	return append(dst, ','), err
}

func appendMessageMsgpack(dst []byte, m *record.Map) ([]byte, error) {
	return record.AppendMsgpack(dst, m)
}

// encoded brings an encoded rendering up to date and returns its bytes. A
// message that fails to encode leaves no bytes and is listed in
// c.failed.
func (s *Session) encoded(c *cache, enc func([]byte, *record.Map) ([]byte, error)) []byte {
	if c.built == s.version && c.bytes != nil {
		return c.bytes
	}
	from := min(c.from, len(c.offs))
	old, oldOffs, oldFailed := c.bytes, c.offs, c.failed
	buf := c.bytes
	count := c.count
	failed := c.failed
	if from < len(c.offs) {
		cut := c.offs[from]
		// A fresh buffer holding the prefix; growing a capped slice copies
		// without first zeroing the copy.
		buf = slices.Grow(old[:cut:cut], len(old)-cut+len(old)/4+1024)
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
	if buf == nil {
		buf = make([]byte, 0, 1024)
	}
	// offs is rewritten in place: iteration i reads oldOffs[i] and
	// oldOffs[i+1] before it writes offs[i].
	offs := oldOffs[:from]
	var settled []int
	for i := from; i < len(s.entries); i++ {
		e := &s.entries[i]
		start := len(buf)
		if i < len(oldOffs) && e.changed <= c.built {
			// Unchanged since this rendering: copy its bytes.
			end := len(old)
			if i+1 < len(oldOffs) {
				end = oldOffs[i+1]
			}
			buf = append(buf, old[oldOffs[i]:end]...)
			if end > oldOffs[i] {
				count++
			} else if f, ok := failureOf(oldFailed, i); ok {
				failed = append(failed, f)
			}
		} else {
			// A packed entry is unchanged since the JSON rendering, so
			// only the other renderings come here for it.
			if out := s.outOf(i); out != nil {
				var err error
				if buf, err = enc(buf, out); err != nil {
					buf = buf[:start] // no partial message
					failed = append(failed, failure{entry: i, err: err})
				} else {
					count++
					if c == &s.json {
						settled = append(settled, i)
					}
				}
			}
		}
		offs = append(offs, start)
	}
	c.bytes, c.offs, c.built, c.from, c.count, c.failed = buf, offs, s.version, len(s.entries), count, failed
	// Now that the JSON cache holds them, the entries it rendered may be
	// let go of.
	for _, i := range settled {
		s.pack(i)
	}
	return buf
}

func failureOf(failed []failure, entry int) (failure, bool) {
	for _, f := range failed {
		if f.entry == entry {
			return f, true
		}
	}
	return failure{}, false
}
