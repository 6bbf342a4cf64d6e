package record

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeJSON decodes exactly one JSON value (surrounding white space
// allowed) into a record value.
func (d Decoder) DecodeJSON(data []byte) (any, error) {
	maxBytes, maxDepth := d.limits()
	if len(data) > maxBytes {
		return nil, &DecodeError{Format: "json", Offset: maxBytes, Err: ErrTooLarge,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), maxBytes)}
	}
	p := jsonParser{data: data, maxDepth: maxDepth}
	p.skipSpace()
	if p.pos == len(data) {
		return nil, p.fail(ErrEmpty, "")
	}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(data) {
		return nil, p.fail(ErrSyntax, "unexpected "+p.describe()+" after the value")
	}
	return v, nil
}

type jsonParser struct {
	data     []byte
	pos      int
	maxDepth int
	buf      []byte
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
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
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
	case c == '"':
		return p.str()
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
	m := &Map{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return m, nil
	}
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
		m.Set(key.(string), v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected("',' or '}'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return m, nil
		default:
			return nil, p.unexpected("',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.pos++ // '['
	a := make([]any, 0, 4)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected("',' or ']'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return a, nil
		default:
			return nil, p.unexpected("',' or ']'")
		}
	}
}

func (p *jsonParser) number() (any, error) {
	start := p.pos
	data := p.data
	isInt := true
	if data[p.pos] == '-' {
		p.pos++
	}
	if p.pos >= len(data) {
		return nil, p.fail(ErrTruncated, "in a number")
	}
	switch c := data[p.pos]; {
	case c == '0':
		p.pos++
	case c >= '1' && c <= '9':
		for p.pos < len(data) && data[p.pos] >= '0' && data[p.pos] <= '9' {
			p.pos++
		}
	default:
		return nil, p.unexpected("a digit")
	}
	if p.pos < len(data) && data[p.pos] == '.' {
		isInt = false
		p.pos++
		if !p.digits() {
			return nil, p.unexpected("a digit after '.'")
		}
	}
	if p.pos < len(data) && (data[p.pos] == 'e' || data[p.pos] == 'E') {
		isInt = false
		p.pos++
		if p.pos < len(data) && (data[p.pos] == '+' || data[p.pos] == '-') {
			p.pos++
		}
		if !p.digits() {
			return nil, p.unexpected("a digit in the exponent")
		}
	}
	lit := data[start:p.pos]
	if isInt && len(lit) <= 20 {
		// Most integers fit int64; larger ones stay literals.
		if n, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
			return n, nil
		}
	}
	return Number(lit), nil
}

func (p *jsonParser) digits() bool {
	start := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return p.pos > start
}

func (p *jsonParser) str() (any, error) {
	p.pos++ // opening quote
	start := p.pos
	data := p.data
	// Fast path: no escapes, all ASCII or valid UTF-8.
	for p.pos < len(data) {
		c := data[p.pos]
		if c == '"' {
			s := data[start:p.pos]
			p.pos++
			return string(s), nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
		p.pos++
	}
	buf := append(p.buf[:0], data[start:p.pos]...)
	for {
		if p.pos >= len(data) {
			return nil, p.fail(ErrTruncated, "in a string")
		}
		c := data[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.buf = buf
			return string(buf), nil
		case c < 0x20:
			return nil, p.fail(ErrSyntax, fmt.Sprintf("control character 0x%02x in a string", c))
		case c == '\\':
			p.pos++
			if p.pos >= len(data) {
				return nil, p.fail(ErrTruncated, "in an escape")
			}
			e := data[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
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
				r, err := p.hex4()
				if err != nil {
					return nil, err
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.pos+1 < len(data) && data[p.pos] == '\\' && data[p.pos+1] == 'u' {
						save := p.pos
						p.pos += 2
						r2, err = p.hex4()
						if err != nil {
							return nil, err
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							continue
						}
						p.pos = save
					}
					// A lone surrogate has no UTF-8 form; like Go's
					// encoding/json, it becomes U+FFFD.
					r = utf8.RuneError
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.pos--
				return nil, p.fail(ErrSyntax, "invalid escape \\"+string(rune(e)))
			}
		case c < 0x80:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				if !utf8.FullRune(data[p.pos:]) {
					return nil, p.fail(ErrTruncated, "in a UTF-8 sequence")
				}
				return nil, p.fail(ErrInvalidUTF8, "")
			}
			buf = append(buf, data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

func (p *jsonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		p.pos = len(p.data)
		return 0, p.fail(ErrTruncated, "in a \\u escape")
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := p.data[p.pos]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.fail(ErrSyntax, "invalid \\u escape")
		}
		p.pos++
	}
	return r, nil
}
