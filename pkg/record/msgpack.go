package record

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// DecodeMsgpack decodes exactly one msgpack value into a record value.
//
// A timestamp extension becomes an RFC 3339 string in UTC with nanoseconds,
// bin becomes its standard base64 string; any other extension type, a map
// key that is not a string, a string that is not valid UTF-8 and a
// non-finite float are errors, since JSON's data model has no place for
// them.
func (d Decoder) DecodeMsgpack(data []byte) (any, error) {
	maxBytes, maxDepth := d.limits()
	if len(data) > maxBytes {
		return nil, &DecodeError{Format: "msgpack", Offset: maxBytes, Err: ErrTooLarge,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), maxBytes)}
	}
	if len(data) == 0 {
		return nil, &DecodeError{Format: "msgpack", Err: ErrEmpty}
	}
	p := mpParser{data: data, maxDepth: maxDepth}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(data) {
		return nil, p.fail(ErrSyntax, fmt.Sprintf("%d bytes after the value", len(data)-p.pos))
	}
	return v, nil
}

type mpParser struct {
	data     []byte
	pos      int
	maxDepth int
}

func (p *mpParser) fail(err error, detail string) error {
	return &DecodeError{Format: "msgpack", Offset: p.pos, Err: err, Detail: detail}
}

// take returns the next n bytes.
func (p *mpParser) take(n int) ([]byte, error) {
	if n < 0 || n > len(p.data)-p.pos {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("need %d bytes, have %d", n, len(p.data)-p.pos))
	}
	b := p.data[p.pos : p.pos+n]
	p.pos += n
	return b, nil
}

func (p *mpParser) uint(n int) (uint64, error) {
	b, err := p.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	default:
		return binary.BigEndian.Uint64(b), nil
	}
}

func (p *mpParser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail(ErrTruncated, "expected a value")
	}
	start := p.pos
	c := p.data[p.pos]
	p.pos++
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xf0 == 0x80:
		return p.mapN(int(c&0x0f), depth, start)
	case c&0xf0 == 0x90:
		return p.arrayN(int(c&0x0f), depth, start)
	case c&0xe0 == 0xa0:
		return p.strN(int(c & 0x1f))
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		n, err := p.uint(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		b, err := p.take(int(min(n, math.MaxInt32)))
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32
		n, err := p.uint(1 << (c - 0xc7))
		if err != nil {
			return nil, err
		}
		return p.ext(int(min(n, math.MaxInt32)), start)
	case 0xca:
		u, err := p.uint(4)
		if err != nil {
			return nil, err
		}
		return p.float(float64(math.Float32frombits(uint32(u))), start)
	case 0xcb:
		u, err := p.uint(8)
		if err != nil {
			return nil, err
		}
		return p.float(math.Float64frombits(u), start)
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8/16/32/64
		u, err := p.uint(1 << (c - 0xcc))
		if err != nil {
			return nil, err
		}
		if u > math.MaxInt64 {
			return u, nil
		}
		return int64(u), nil
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8/16/32/64
		size := 1 << (c - 0xd0)
		u, err := p.uint(size)
		if err != nil {
			return nil, err
		}
		shift := 64 - 8*size
		return int64(u<<shift) >> shift, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16
		return p.ext(1<<(c-0xd4), start)
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		n, err := p.uint(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return p.strN(int(min(n, math.MaxInt32)))
	case 0xdc, 0xdd: // array 16/32
		n, err := p.uint(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return p.arrayN(int(min(n, math.MaxInt32)), depth, start)
	case 0xde, 0xdf: // map 16/32
		n, err := p.uint(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return p.mapN(int(min(n, math.MaxInt32)), depth, start)
	}
	p.pos = start
	return nil, p.fail(ErrSyntax, fmt.Sprintf("invalid type byte 0x%02x", c))
}

func (p *mpParser) float(f float64, start int) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		p.pos = start
		return nil, p.fail(ErrUnsupported, "non-finite float")
	}
	return f, nil
}

func (p *mpParser) strN(n int) (any, error) {
	b, err := p.take(n)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(b) {
		p.pos -= n
		return nil, p.fail(ErrInvalidUTF8, "")
	}
	return string(b), nil
}

func (p *mpParser) arrayN(n, depth, start int) (any, error) {
	if depth >= p.maxDepth {
		p.pos = start
		return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
	}
	// Every element takes at least one byte: a declared length beyond the
	// bytes left is truncated input, found before allocating anything.
	if n > len(p.data)-p.pos {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("array of %d elements in %d bytes", n, len(p.data)-p.pos))
	}
	a := make([]any, n)
	for i := range a {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	return a, nil
}

func (p *mpParser) mapN(n, depth, start int) (any, error) {
	if depth >= p.maxDepth {
		p.pos = start
		return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
	}
	if 2*n > len(p.data)-p.pos {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("map of %d entries in %d bytes", n, len(p.data)-p.pos))
	}
	m := &Map{Members: make([]Member, 0, n)}
	for i := 0; i < n; i++ {
		keyAt := p.pos
		k, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		key, ok := k.(string)
		if !ok {
			p.pos = keyAt
			return nil, p.fail(ErrUnsupported, "map key is a "+TypeName(k)+", not a string")
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m.Set(key, v)
	}
	return m, nil
}

// ext decodes an extension of n data bytes; only the timestamp type (-1)
// has a place in the data model.
func (p *mpParser) ext(n, start int) (any, error) {
	tb, err := p.take(1)
	if err != nil {
		return nil, err
	}
	typ := int8(tb[0])
	b, err := p.take(n)
	if err != nil {
		return nil, err
	}
	if typ != -1 {
		p.pos = start
		return nil, p.fail(ErrUnsupported, fmt.Sprintf("extension type %d", typ))
	}
	var t time.Time
	switch n {
	case 4:
		t = time.Unix(int64(binary.BigEndian.Uint32(b)), 0)
	case 8:
		v := binary.BigEndian.Uint64(b)
		nsec := int64(v >> 34)
		if nsec > 999999999 {
			p.pos = start
			return nil, p.fail(ErrSyntax, "timestamp nanoseconds out of range")
		}
		t = time.Unix(int64(v&(1<<34-1)), nsec)
	case 12:
		nsec := int64(binary.BigEndian.Uint32(b[:4]))
		if nsec > 999999999 {
			p.pos = start
			return nil, p.fail(ErrSyntax, "timestamp nanoseconds out of range")
		}
		t = time.Unix(int64(binary.BigEndian.Uint64(b[4:])), nsec)
	default:
		p.pos = start
		return nil, p.fail(ErrSyntax, fmt.Sprintf("timestamp of %d bytes", n))
	}
	return FormatTime(t), nil
}

// FormatTime formats an instant the way a msgpack timestamp decodes: RFC
// 3339 in UTC with nine fraction digits.
func FormatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
}
