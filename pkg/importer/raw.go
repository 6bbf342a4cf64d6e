package importer

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

// Most of a record is a value of the source passed through unchanged: a
// pi message, a Claude Code message's content. Its JSON is then the
// source's own bytes, which is cheaper than encoding the decoded value
// again and keeps every byte as the tool wrote it. The functions here find
// a value's bytes in a line; a record keeps them in place of an encoding.

// span returns the bytes of the value at a path of keys in a JSON object,
// or nil when the path is not there or the input is not what the decoder
// accepted. Like the decoder, it takes the last of repeated keys. Keys
// written with escapes are not matched: the caller then encodes the value.
func span(data []byte, path ...string) []byte {
	v := bytes.TrimSpace(data)
	for _, key := range path {
		v = member(v, key)
		if v == nil {
			return nil
		}
	}
	return v
}

// capture names keys of an object whose values a validating scan keeps:
// vals[i] gets the bytes of the value of keys[i] (of the last, for a
// repeated key, as the decoder takes it), and sub[i], when not nil,
// captures inside that value.
type capture struct {
	keys []string
	sub  []*capture
	vals [][]byte
}

func (c *capture) reset() {
	clear(c.vals)
	for _, s := range c.sub {
		if s != nil {
			s.reset()
		}
	}
}

// validCapture reports whether b is one JSON value, with nothing around
// it but white space, that the record decoder accepts with at most
// maxDepth levels of nesting: strings of valid UTF-8 without control
// characters and with valid escapes, numbers as JSON spells them. It never
// accepts what the decoder refuses, so that bytes it passes can be
// published without being decoded. With c, it also keeps the bytes of
// values of the top-level object (a captured key spelled with escapes
// fails the check, which leaves the value to the decoder).
func validCapture(b []byte, maxDepth int, c *capture) bool {
	if c != nil {
		c.reset()
	}
	v := jsonValidator{b: b, maxDepth: maxDepth}
	i := v.value(skipSpace(b, 0), 0, c)
	return i >= 0 && skipSpace(b, i) == len(b)
}

type jsonValidator struct {
	b        []byte
	maxDepth int
}

// value returns the index after the value at i, -1 when it is not valid,
// filling c when the value is an object.
func (v *jsonValidator) value(i, depth int, c *capture) int {
	b := v.b
	if i >= len(b) {
		return -1
	}
	switch ch := b[i]; {
	case ch == '"':
		return v.str(i)
	case ch == '{' || ch == '[':
		if depth >= v.maxDepth {
			return -1
		}
		end := byte('}')
		if ch == '[' {
			end = ']'
			c = nil
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == end {
			return i + 1
		}
		for {
			at := -1 // the captured key this member's value goes to
			if ch == '{' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				ks := i
				if i = v.str(i); i < 0 {
					return -1
				}
				if c != nil {
					key := b[ks+1 : i-1]
					for j, k := range c.keys {
						if string(key) == k {
							at = j
						}
					}
					if at < 0 && bytes.IndexByte(key, '\\') >= 0 {
						return -1 // it may spell a captured key
					}
				}
				if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
					return -1
				}
				i = skipSpace(b, i+1)
			}
			var sub *capture
			if at >= 0 && at < len(c.sub) {
				if sub = c.sub[at]; sub != nil {
					sub.reset() // a repeated key: the last one counts
				}
			}
			start := i
			if i = v.value(i, depth+1, sub); i < 0 {
				return -1
			}
			if at >= 0 {
				c.vals[at] = b[start:i]
			}
			if i = skipSpace(b, i); i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case end:
				return i + 1
			default:
				return -1
			}
		}
	case ch == '-' || ch >= '0' && ch <= '9':
		return v.number(i)
	case ch == 't':
		return literal(b, i, "true")
	case ch == 'f':
		return literal(b, i, "false")
	case ch == 'n':
		return literal(b, i, "null")
	}
	return -1
}

// plainRun returns the end of the run of plain string bytes at b[i:]:
// printable ASCII other than '"' and '\\'. It looks at eight bytes at a
// time: in a word with none of the others, every byte has its high bit
// clear, is at least 0x20, and differs from both.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// A high bit set where a byte is below 0x20, is zero after the
		// xor (a quote, a backslash), or is not ASCII.
		if ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs|x)&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && b[i] >= 0x20 && b[i] < utf8.RuneSelf && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

func literal(b []byte, i int, word string) int {
	if bytes.HasPrefix(b[i:], []byte(word)) {
		return i + len(word)
	}
	return -1
}

// number checks -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (v *jsonValidator) number(i int) int {
	b := v.b
	digits := func(i int) (int, bool) {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i, i > start
	}
	if b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else {
		var ok bool
		if i, ok = digits(i); !ok {
			return -1
		}
	}
	if i < len(b) && b[i] == '.' {
		var ok bool
		if i, ok = digits(i + 1); !ok {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		var ok bool
		if i, ok = digits(i); !ok {
			return -1
		}
	}
	return i
}

// str checks the string starting at b[i] ('"') and returns the index
// after it.
func (v *jsonValidator) str(i int) int {
	b := v.b
	i++
	for i < len(b) {
		i = plainRun(b, i)
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return -1
			}
			i += size
		}
	}
	return -1
}

// member returns the bytes of the value under key in the object obj.
func member(obj []byte, key string) []byte {
	var out [1][]byte
	members(obj, []string{key}, out[:])
	return out[0]
}

// members finds the values of several keys of the object obj in one scan:
// out[i] gets the bytes of the value of keys[i], nil when it is absent. It
// reports false, with out cleared, when obj is not an object it can read
// as the decoder would (a key spelled with escapes, for one).
func members(obj []byte, keys []string, out [][]byte) (ok bool) {
	clear(out)
	if len(obj) == 0 || obj[0] != '{' {
		return false
	}
	fail := func() { clear(out) }
	i := skipSpace(obj, 1)
	if i < len(obj) && obj[i] == '}' {
		return true
	}
	for i < len(obj) {
		if obj[i] != '"' {
			fail()
			return false
		}
		end := skipString(obj, i)
		if end < 0 {
			fail()
			return false
		}
		k := obj[i+1 : end-1]
		if bytes.IndexByte(k, '\\') >= 0 {
			fail() // a key spelled with escapes: leave it to the decoder
			return false
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			fail()
			return false
		}
		i = skipSpace(obj, i+1)
		vend := skipValue(obj, i)
		if vend < 0 {
			fail()
			return false
		}
		for j, key := range keys {
			if string(k) == key {
				out[j] = obj[i:vend] // the last of repeated keys wins, as in the decoder
			}
		}
		i = skipSpace(obj, vend)
		if i >= len(obj) {
			fail()
			return false
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return true
		default:
			fail()
			return false
		}
	}
	fail()
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'):
// the first quote not escaped, one preceded by an even number of
// backslashes.
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		k := i
		for k > 0 && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if i == start {
				return -1 // no value
			}
			return i
		}
	}
	return i
}

// splice encodes m with the members named in raw written as those bytes:
// m's JSON, where the raw bytes are the source's own for those members.
// It returns nil when a raw value is missing, so that m is encoded whole.
func splice(m *record.Map, raw map[string][]byte) []byte {
	p := newParts(m, raw)
	if p == nil {
		return nil
	}
	return p.json()
}

// spliceSize returns the length of splice(m, raw) without building it,
// and false when splice would fail.
func spliceSize(m *record.Map, raw map[string][]byte) (int, bool) {
	var buf [256]byte
	size := 2 + max(len(m.Members)-1, 0)
	for _, mem := range m.Members {
		size += len(record.AppendJSONString(buf[:0], mem.Key)) + 1
		if r, ok := raw[mem.Key]; ok {
			if r == nil {
				return 0, false
			}
			size += len(r)
			continue
		}
		b, err := record.AppendJSON(buf[:0], mem.Value)
		if err != nil {
			return 0, false
		}
		size += len(b)
	}
	return size, true
}

// parts is a record whose JSON is spliced when it is asked for: the
// encoding of its members around the source's bytes, made once, and those
// bytes. An import builds each record's bytes as it publishes it, rather
// than all of them first; until then a record holds a few objects, not
// its decoded members, which the garbage collector would trace while the
// import publishes.
type parts struct {
	segs [][]byte // in order: encoded members, a raw value, encoded members, ...
	size int      // the length of the JSON
}

// newParts returns the parts of splice(m, raw), nil when a raw value is
// missing.
func newParts(m *record.Map, raw map[string][]byte) *parts {
	size, ok := spliceSize(m, raw)
	if !ok {
		return nil
	}
	rawSize := 0
	for _, mem := range m.Members {
		if r, ok := raw[mem.Key]; ok {
			rawSize += len(r)
		}
	}
	enc := make([]byte, 0, size-rawSize)
	var cuts []int // where a raw value goes in enc
	var values [][]byte
	enc = append(enc, '{')
	for i, mem := range m.Members {
		if i > 0 {
			enc = append(enc, ',')
		}
		enc = record.AppendJSONString(enc, mem.Key)
		enc = append(enc, ':')
		if r, ok := raw[mem.Key]; ok {
			cuts, values = append(cuts, len(enc)), append(values, r)
			continue
		}
		enc, _ = record.AppendJSON(enc, mem.Value) // spliceSize encoded it
	}
	enc = append(enc, '}')
	p := &parts{segs: make([][]byte, 0, 2*len(cuts)+1), size: size}
	at := 0
	for i, c := range cuts {
		p.segs = append(p.segs, enc[at:c:c], values[i])
		at = c
	}
	p.segs = append(p.segs, enc[at:])
	return p
}

// json returns the record's JSON: its parts joined.
func (p *parts) json() []byte {
	out := make([]byte, 0, p.size)
	for _, s := range p.segs {
		out = append(out, s...)
	}
	return out
}
