package record

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeJSON decodes exactly one JSON value (surrounding white space
// allowed) into a record value. Strings must be valid UTF-8; an escaped
// lone surrogate, which has no UTF-8 form, becomes U+FFFD as in
// encoding/json.
func (d Decoder) DecodeJSON(data []byte) (any, error) {
	v, _, err := d.decodeJSON(data)
	return v, err
}

// decodeJSON is DecodeJSON, and reports whether data is canonical: the
// bytes AppendJSON writes for the value, byte for byte (no white space,
// no repeated key, no escape that AppendJSONString would not write).
func (d Decoder) decodeJSON(data []byte) (any, bool, error) {
	maxBytes, maxDepth := d.limits()
	if len(data) > maxBytes {
		return nil, false, &DecodeError{Format: "json", Offset: maxBytes, Err: ErrTooLarge,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), maxBytes)}
	}
	if err := byteOrderMark(data); err != nil {
		return nil, false, err
	}
	p := jsonParsers.Get().(*jsonParser)
	defer p.release()
	p.data, p.maxDepth, p.trusted, p.canonical, p.backslash = data, maxDepth, d.Trusted, true, -1
	p.strs.share, p.strs.all = d.ShareInput, d.ShareShort
	p.skipSpace()
	if p.pos == len(data) {
		return nil, false, p.fail(ErrEmpty, "")
	}
	v, err := p.value(0)
	if err != nil {
		return nil, false, err
	}
	p.skipSpace()
	if p.pos != len(data) {
		return nil, false, p.fail(ErrSyntax, "unexpected "+p.describe()+" after the value")
	}
	return v, p.canonical, nil
}

// jsonParsers keeps parsers, and the scratch space they have grown, for
// the next record.
var jsonParsers = sync.Pool{New: func() any { return new(jsonParser) }}

type jsonParser struct {
	data     []byte
	pos      int
	maxDepth int
	strs     arena
	buf      []byte   // a string being unescaped
	elems    []any    // elements of the arrays being read, innermost last
	members  []Member // members of the maps being read, innermost last
	keys     []span   // DecodeShape: keys of the objects being read, innermost last
	// The most elements and members the scratch space held, which
	// release clears.
	elemsHigh, membersHigh int
	mapSlab                slab[Map] // where the maps, members and elements read go
	memberSlab             slab[Member]
	elemSlab               slab[any]
	boxes                  boxes // the strings and integers read
	trusted                bool  // see Decoder.Trusted
	backslash              int   // trusted: where the next backslash is, if at or after the string read
	// canonical: nothing read so far differs from what AppendJSON
	// writes for the values read.
	canonical bool
	// sparse: DecodeShape builds a few of the values it reads, and sizes
	// new blocks for a few more (see left).
	sparse bool
	// transient: a ShapeReader's, whose blocks are handed out again at
	// every decode, and so are as large as blocks get.
	transient bool
}

// left returns the input bytes from i on, which bound the values still to
// come and so size a new block for them; a shaped decode (sparse) builds
// few of those, about one in eight.
func (p *jsonParser) left(i int) int {
	n := len(p.data) - i
	switch {
	case p.transient:
		n = 1 << 20
	case p.sparse:
		n /= 8
	}
	return n
}

// maxKept bounds the scratch space a pooled parser keeps, in elements.
const maxKept = 1 << 16

func (p *jsonParser) release() {
	p.clearScratch()
	*p = jsonParser{buf: p.buf[:0], elems: p.elems[:0], members: p.members[:0], keys: p.keys[:0]}
	if cap(p.buf) > maxKept {
		p.buf = nil
	}
	if cap(p.elems) > maxKept {
		p.elems = nil
	}
	if cap(p.members) > maxKept {
		p.members = nil
	}
	if cap(p.keys) > maxKept {
		p.keys = nil
	}
	jsonParsers.Put(p)
}

// clearScratch clears what the maps and arrays read left in the scratch
// space, so that a parser kept for the next record holds none of this
// one, and empties it.
func (p *jsonParser) clearScratch() {
	clear(p.elems[:max(len(p.elems), p.elemsHigh)])
	clear(p.members[:max(len(p.members), p.membersHigh)])
	p.elems, p.members, p.keys, p.buf = p.elems[:0], p.members[:0], p.keys[:0], p.buf[:0]
	p.elemsHigh, p.membersHigh = 0, 0
}

func (p *jsonParser) fail(err error, detail string) error {
	return &DecodeError{Format: "json", Offset: p.pos, Err: err, Detail: detail}
}

func (p *jsonParser) describe() string {
	if p.pos >= len(p.data) {
		return "end of input"
	}
	c := p.data[p.pos]
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *jsonParser) unexpected(want string) error {
	if p.pos >= len(p.data) {
		return p.fail(ErrTruncated, "expected "+want)
	}
	return p.fail(ErrSyntax, "expected "+want+", found "+p.describe())
}

func (p *jsonParser) skipSpace() {
	// Most records have no white space between tokens.
	if p.pos < len(p.data) && p.data[p.pos] > ' ' {
		return
	}
	p.skipSpaces()
}

func (p *jsonParser) skipSpaces() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
			p.canonical = false
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.unexpected("a value")
	}
	switch c := p.data[p.pos]; {
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return p.boxes.str(s, p.left(p.pos)), nil
	case c == '{':
		if depth >= p.maxDepth {
			return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
		}
		return p.object(depth + 1)
	case c == '[':
		if depth >= p.maxDepth {
			return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
		}
		return p.array(depth + 1)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	}
	return nil, p.unexpected("a value")
}

func (p *jsonParser) literal(word string, v any) (any, error) {
	for i := 0; i < len(word); i++ {
		if p.pos >= len(p.data) {
			return nil, p.fail(ErrTruncated, "in "+word)
		}
		if p.data[p.pos] != word[i] {
			return nil, p.fail(ErrSyntax, "invalid literal, found "+p.describe())
		}
		p.pos++
	}
	return v, nil
}

func (p *jsonParser) object(depth int) (any, error) {
	p.pos++ // '{'
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return &Map{}, nil
	}
	base := len(p.members)
	var keys keyIndex
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.unexpected("a string key")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.unexpected("':'")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		// A repeated key keeps its first position and takes the last value,
		// as most JSON readers do.
		if i := keys.lookup(p.members[base:], key); i >= 0 {
			p.members[base+i].Value = v
			p.canonical = false
		} else {
			p.members = append(p.members, Member{Key: key, Value: v})
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected("',' or '}'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return p.mapOf(base), nil
		default:
			return nil, p.unexpected("',' or '}'")
		}
	}
}

// mapOf returns a map of the members read since base, taking them off
// the scratch space.
func (p *jsonParser) mapOf(base int) *Map {
	left := p.left(p.pos)
	members := p.memberSlab.take(len(p.members)-base, left/24)
	copy(members, p.members[base:])
	p.membersHigh = max(p.membersHigh, len(p.members)) // cleared by release
	p.members = p.members[:base]
	m := &p.mapSlab.take(1, left/96)[0]
	m.Members = members
	return m
}

// arrayOf returns the elements read since base, taking them off the
// scratch space.
func (p *jsonParser) arrayOf(base int) []any {
	a := p.elemSlab.take(len(p.elems)-base, p.left(p.pos)/24)
	copy(a, p.elems[base:])
	p.elemsHigh = max(p.elemsHigh, len(p.elems)) // cleared by release
	p.elems = p.elems[:base]
	return a
}

func (p *jsonParser) array(depth int) (any, error) {
	p.pos++ // '['
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return []any{}, nil
	}
	base := len(p.elems)
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected("',' or ']'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return p.arrayOf(base), nil
		default:
			return nil, p.unexpected("',' or ']'")
		}
	}
}

func (p *jsonParser) number() (any, error) {
	data := p.data
	start := p.pos
	i := start
	neg := data[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i >= len(data):
		p.pos = i
		return nil, p.fail(ErrTruncated, "in a number")
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		i++
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		p.pos = i
		return nil, p.unexpected("a digit")
	}
	intEnd := i
	isInt := true
	if i < len(data) && data[i] == '.' {
		isInt = false
		i++
		if i = skipDigits(data, i); i == intEnd+1 {
			p.pos = i
			return nil, p.unexpected("a digit after '.'")
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		isInt = false
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		expStart := i
		if i = skipDigits(data, i); i == expStart {
			p.pos = i
			return nil, p.unexpected("a digit in the exponent")
		}
	}
	p.pos = i
	// Integers that fit int64 become int64, except -0, which only a
	// literal keeps.
	if n := intEnd - intStart; isInt && n <= 19 && !(neg && data[intStart] == '0') {
		var u uint64
		for _, c := range data[intStart:intEnd] {
			u = u*10 + uint64(c-'0') // 19 digits fit a uint64
		}
		switch {
		case !neg && u <= 1<<63-1:
			return p.boxes.int(int64(u), p.left(i)), nil
		case neg && u <= 1<<63:
			return p.boxes.int(-int64(u), p.left(i)), nil // -(1<<63) wraps to itself, as wanted
		}
	}
	return Number(p.strs.string(data[start:i], p.left(i))), nil
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

// str reads a string literal starting at its opening quote.
func (p *jsonParser) str() (string, error) {
	data := p.data
	start := p.pos + 1
	if p.trusted {
		// Valid UTF-8 without control characters: a string without
		// escapes ends at the first quote. Where the next backslash is
		// is kept from string to string, so that input without escapes
		// (a screenshot's base64) is searched for them once.
		if q := bytes.IndexByte(data[start:], '"'); q >= 0 {
			if p.backslash < start {
				p.backslash = len(data)
				if k := bytes.IndexByte(data[start:], '\\'); k >= 0 {
					p.backslash = start + k
				}
			}
			if end := start + q; p.backslash > end {
				p.pos = end + 1
				return p.strs.input(data[start:end], p.left(p.pos)), nil
			}
		}
	}
	end, ascii := scanJSONString(data, start)
	if end < len(data) && data[end] == '"' {
		// No escapes: the common case.
		if !ascii && !utf8.Valid(data[start:end]) {
			return "", p.badUTF8(start)
		}
		p.pos = end + 1
		return p.strs.input(data[start:end], p.left(p.pos)), nil
	}
	buf := p.buf[:0]
	for i := start; ; {
		if !ascii && !utf8.Valid(data[i:end]) {
			return "", p.badUTF8(i)
		}
		buf = append(buf, data[i:end]...)
		p.pos = end
		if end >= len(data) {
			return "", p.fail(ErrTruncated, "in a string")
		}
		switch c := data[end]; {
		case c == '"':
			p.pos++
			p.buf = buf
			return p.strs.string(buf, p.left(p.pos)), nil
		case c < 0x20:
			return "", p.fail(ErrSyntax, fmt.Sprintf("control character 0x%02x in a string", c))
		}
		var err error
		if buf, err = p.escape(buf); err != nil {
			return "", err
		}
		i = p.pos
		end, ascii = scanJSONString(data, i)
	}
}

// badUTF8 reports the first invalid UTF-8 sequence at or after i.
func (p *jsonParser) badUTF8(i int) error {
	for {
		r, size := utf8.DecodeRune(p.data[i:])
		if r == utf8.RuneError && size <= 1 {
			p.pos = i
			if !utf8.FullRune(p.data[i:]) {
				return p.fail(ErrTruncated, "in a UTF-8 sequence")
			}
			return p.fail(ErrInvalidUTF8, "")
		}
		i += size
	}
}

// escape appends the character of the escape sequence at p.pos to buf.
func (p *jsonParser) escape(buf []byte) ([]byte, error) {
	data := p.data
	if p.pos+1 >= len(data) {
		p.pos = len(data)
		return buf, p.fail(ErrTruncated, "in an escape")
	}
	e := data[p.pos+1]
	switch e {
	case '/':
		buf = append(buf, e)
		p.canonical = false // AppendJSONString writes '/' as it is
	case '"', '\\':
		buf = append(buf, e)
	case 'b':
		buf = append(buf, '\b')
	case 'f':
		buf = append(buf, '\f')
	case 'n':
		buf = append(buf, '\n')
	case 'r':
		buf = append(buf, '\r')
	case 't':
		buf = append(buf, '\t')
	case 'u':
		p.pos += 2
		r, err := p.hex4()
		if err != nil {
			return buf, err
		}
		if !canonicalEscape(r, data[p.pos-4:p.pos]) {
			p.canonical = false
		}
		if utf16.IsSurrogate(r) {
			if p.pos+1 < len(data) && data[p.pos] == '\\' && data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				r2, err := p.hex4()
				if err != nil {
					return buf, err
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					return utf8.AppendRune(buf, dec), nil
				}
				p.pos = save // r2 starts over on its own
			}
			// A lone surrogate has no UTF-8 form; like Go's encoding/json,
			// it becomes U+FFFD.
			r = utf8.RuneError
		}
		return utf8.AppendRune(buf, r), nil
	default:
		return buf, p.fail(ErrSyntax, "invalid escape \\"+string(rune(e)))
	}
	p.pos += 2
	return buf, nil
}

// canonicalEscape reports whether the \u escape of r with the hex digits
// hex is the one AppendJSONString writes: only control characters without
// a short escape are written as \u, in lower case.
func canonicalEscape(r rune, hex []byte) bool {
	switch r {
	case '\b', '\f', '\n', '\r', '\t':
		return false
	}
	return r < 0x20 && hex[0] == '0' && hex[1] == '0' && hex[2] == hexDigits[r>>4] && hex[3] == hexDigits[r&0xf]
}

// hex4 reads the four hex digits of a \u escape.
func (p *jsonParser) hex4() (rune, error) {
	var r rune
	for range 4 {
		if p.pos >= len(p.data) {
			return 0, p.fail(ErrTruncated, "in a \\u escape")
		}
		c := p.data[p.pos]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.fail(ErrSyntax, "invalid \\u escape, found "+p.describe())
		}
		p.pos++
	}
	return r, nil
}

// keyIndex finds repeated keys while a map is decoded: by a linear scan
// while the map is small, by a hash index once it is not, so that a map of
// many keys costs linear time.
type keyIndex struct {
	pos map[string]int
}

const linearKeys = 16

// lookup returns the position of key among ms, or -1 when key is new; the
// caller then appends it at len(ms).
func (x *keyIndex) lookup(ms []Member, key string) int {
	if x.pos == nil {
		for i := range ms {
			if ms[i].Key == key {
				return i
			}
		}
		if len(ms) < linearKeys {
			return -1
		}
		x.pos = make(map[string]int, 2*len(ms))
		for i := range ms {
			x.pos[ms[i].Key] = i
		}
	}
	if i, ok := x.pos[key]; ok {
		return i
	}
	x.pos[key] = len(ms)
	return -1
}
