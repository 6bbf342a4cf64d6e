package projection

import (
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
		msgs = append(make([]any, 0, max(2*keep, 16)), c.msgs[:keep]...)
		c.offs = c.offs[:from]
	}
	if msgs == nil {
		msgs = make([]any, 0, len(s.entries))
	}
	for i := from; i < len(s.entries); i++ {
		s.render(i)
		c.offs = append(c.offs, len(msgs))
		if out := s.entries[i].out; out != nil {
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
// The bytes are shared with the cache: read them, don't modify them.
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
func (s *Session) MsgpackBody() ([]byte, int) {
	b := s.encoded(&s.msgpack, appendMessageMsgpack)
	return b[:len(b):len(b)], s.msgpack.count
}

// AppendMsgpack appends the model context as a msgpack array to dst.
func (s *Session) AppendMsgpack(dst []byte) []byte {
	body, n := s.MsgpackBody()
	dst = record.AppendMsgpackArrayLen(dst, n)
	return append(dst, body...)
}

func appendMessageJSON(dst []byte, m *record.Map) []byte {
	// Pass-1 messages are decoded values: they always encode.
	dst, _ = record.AppendJSON(dst, m)
	return append(dst, ',')
}

func appendMessageMsgpack(dst []byte, m *record.Map) []byte {
	dst, _ = record.AppendMsgpack(dst, m)
	return dst
}

func (s *Session) encoded(c *cache, enc func([]byte, *record.Map) []byte) []byte {
	if c.built == s.version && c.bytes != nil {
		return c.bytes
	}
	from := min(c.from, len(c.offs))
	old, oldOffs := c.bytes, c.offs
	buf := c.bytes
	count := c.count
	if from < len(c.offs) {
		cut := c.offs[from]
		buf = append(make([]byte, 0, max(len(old)+len(old)/4, 1024)), old[:cut]...)
		// Count the messages kept in the prefix.
		count = 0
		for i := 0; i < from; i++ {
			if s.entries[i].out != nil {
				count++
			}
		}
	}
	if buf == nil {
		buf = make([]byte, 0, 1024)
	}
	offs := oldOffs
	if from < len(oldOffs) {
		offs = append(make([]int, 0, len(s.entries)), oldOffs[:from]...)
	}
	for i := from; i < len(s.entries); i++ {
		e := s.entries[i]
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
			}
		} else {
			s.render(i)
			if e.out != nil {
				buf = enc(buf, e.out)
				count++
			}
		}
		offs = append(offs, start)
	}
	c.bytes, c.offs, c.built, c.from, c.count = buf, offs, s.version, len(s.entries), count
	return buf
}
