package record

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// DecodeMsgpack decodes exactly one msgpack value into a record value.
//
// A timestamp extension becomes an RFC 3339 string in UTC with nanoseconds,
// bin becomes its standard base64 string. Any other extension type, a
// timestamp outside the years 0 to 9999, a map key that is not a str (bin
// included), a string that is not valid UTF-8 and a non-finite float are
// errors, since JSON's data model has no place for them.
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
	p.strs.share, p.strs.all = d.ShareInput, d.ShareShort
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
	strs     arena
	// reserved counts the input bytes the arrays and maps being read still
	// need for their remaining elements, at least one byte each. A length
	// is checked against what is left beside them, so that nested
	// containers cannot each promise the same bytes: what the decoder
	// allocates on the word of length fields stays within a small multiple
	// of the input.
	reserved   int
	mapSlab    slab[Map]
	memberSlab slab[Member]
	elemSlab   slab[any]
	boxes      boxes // the strings and integers read
}

// avail returns the bytes left for the value being read.
func (p *mpParser) avail() int { return len(p.data) - p.pos - p.reserved }

func (p *mpParser) fail(err error, detail string) error {
	return &DecodeError{Format: "msgpack", Offset: p.pos, Err: err, Detail: detail}
}

// take returns the next n bytes.
func (p *mpParser) take(n int) ([]byte, error) {
	if n < 0 || n > p.avail() {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("need %d bytes, have %d", n, p.avail()))
	}
	b := p.data[p.pos : p.pos+n]
	p.pos += n
	return b, nil
}

// uint reads a big-endian unsigned integer of n bytes (1, 2, 4 or 8).
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

// length reads a length field of n bytes, clamped to what an int holds
// everywhere; no input is that long, so the clamped value still fails.
func (p *mpParser) length(n int) (int, error) {
	u, err := p.uint(n)
	return int(min(u, math.MaxInt32)), err
}

func (p *mpParser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail(ErrTruncated, "expected a value")
	}
	start := p.pos
	c := p.data[p.pos]
	p.pos++
	switch {
	case c&0xe0 == 0xa0: // fixstr
		s, err := p.strN(int(c & 0x1f))
		if err != nil {
			return nil, err
		}
		return p.boxes.str(s, len(p.data)-p.pos), nil
	case c <= 0x7f: // positive fixint
		return int64(c), nil
	case c >= 0xe0: // negative fixint
		return int64(int8(c)), nil
	case c&0xf0 == 0x80: // fixmap
		return p.mapN(int(c&0x0f), depth, start)
	case c&0xf0 == 0x90: // fixarray
		return p.arrayN(int(c&0x0f), depth, start)
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		n, err := p.length(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		b, err := p.take(n)
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32
		n, err := p.length(1 << (c - 0xc7))
		if err != nil {
			return nil, err
		}
		return p.ext(n, start)
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
		return p.boxes.int(int64(u), len(p.data)-p.pos), nil
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8/16/32/64
		size := 1 << (c - 0xd0)
		u, err := p.uint(size)
		if err != nil {
			return nil, err
		}
		shift := 64 - 8*size
		return p.boxes.int(int64(u<<shift)>>shift, len(p.data)-p.pos), nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16
		return p.ext(1<<(c-0xd4), start)
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		n, err := p.length(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		s, err := p.strN(n)
		if err != nil {
			return nil, err
		}
		return p.boxes.str(s, len(p.data)-p.pos), nil
	case 0xdc, 0xdd: // array 16/32
		n, err := p.length(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return p.arrayN(n, depth, start)
	case 0xde, 0xdf: // map 16/32
		n, err := p.length(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return p.mapN(n, depth, start)
	}
	p.pos = start
	return nil, p.fail(ErrSyntax, fmt.Sprintf("invalid type byte 0x%02x", c))
}

// key reads a map key, which must be a str.
func (p *mpParser) key() (string, error) {
	if p.pos >= len(p.data) {
		return "", p.fail(ErrTruncated, "expected a map key")
	}
	c := p.data[p.pos]
	if c&0xe0 == 0xa0 {
		p.pos++
		return p.strN(int(c & 0x1f))
	}
	switch c {
	case 0xd9, 0xda, 0xdb:
		p.pos++
		n, err := p.length(1 << (c - 0xd9))
		if err != nil {
			return "", err
		}
		return p.strN(n)
	case 0xc1:
		return "", p.fail(ErrSyntax, "invalid type byte 0xc1")
	}
	return "", p.fail(ErrUnsupported, "map key is "+mpTypeName(c)+", not a string")
}

// mpTypeName names the msgpack type a byte starts, for error messages.
func mpTypeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3:
		return "an integer"
	case c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		return "a map"
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
		return "an array"
	case c == 0xc0:
		return "nil"
	case c == 0xc2 || c == 0xc3:
		return "a boolean"
	case c == 0xca || c == 0xcb:
		return "a float"
	case c >= 0xc4 && c <= 0xc6:
		return "binary"
	case c >= 0xc7 && c <= 0xc9 || c >= 0xd4 && c <= 0xd8:
		return "an extension"
	}
	return "a string"
}

func (p *mpParser) float(f float64, start int) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		p.pos = start
		return nil, p.fail(ErrUnsupported, "non-finite float")
	}
	return f, nil
}

func (p *mpParser) strN(n int) (string, error) {
	b, err := p.take(n)
	if err != nil {
		return "", err
	}
	if !validUTF8(b) {
		p.pos -= n
		return "", p.fail(ErrInvalidUTF8, "")
	}
	return p.strs.input(b, len(p.data)-p.pos), nil
}

func (p *mpParser) arrayN(n, depth, start int) (any, error) {
	if depth >= p.maxDepth {
		p.pos = start
		return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
	}
	// Every element takes at least one byte: a declared length beyond the
	// bytes left is truncated input, found before allocating anything.
	if n > p.avail() {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("array of %d elements in %d bytes", n, p.avail()))
	}
	if n == 0 {
		return []any{}, nil
	}
	a := p.elemSlab.take(n, p.avail()/24)
	outer := p.reserved
	for i := range a {
		p.reserved = outer + n - 1 - i
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	p.reserved = outer
	return a, nil
}

func (p *mpParser) mapN(n, depth, start int) (any, error) {
	if depth >= p.maxDepth {
		p.pos = start
		return nil, p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
	}
	// A member takes two bytes at least.
	if n > p.avail()/2 {
		return nil, p.fail(ErrTruncated, fmt.Sprintf("map of %d entries in %d bytes", n, p.avail()))
	}
	ms := p.memberSlab.take(n, p.avail()/24)[:0]
	var keys keyIndex
	outer := p.reserved
	for i := range n {
		p.reserved = outer + 2*(n-1-i) + 1 // the members after this one, and its value
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		p.reserved--
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		// A repeated key keeps its first position and takes the last value.
		if i := keys.lookup(ms, key); i >= 0 {
			ms[i].Value = v
		} else {
			ms = append(ms, Member{Key: key, Value: v})
		}
	}
	p.reserved = outer
	m := &p.mapSlab.take(1, p.avail()/96)[0]
	m.Members = ms
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
	var sec, nsec int64
	switch n {
	case 4:
		sec = int64(binary.BigEndian.Uint32(b))
	case 8:
		v := binary.BigEndian.Uint64(b)
		sec, nsec = int64(v&(1<<34-1)), int64(v>>34)
	case 12:
		sec, nsec = int64(binary.BigEndian.Uint64(b[4:])), int64(binary.BigEndian.Uint32(b[:4]))
	default:
		p.pos = start
		return nil, p.fail(ErrSyntax, fmt.Sprintf("timestamp of %d bytes", n))
	}
	if nsec > 999999999 {
		p.pos = start
		return nil, p.fail(ErrSyntax, "timestamp nanoseconds out of range")
	}
	// RFC 3339 has four-digit years.
	if sec < minTimestamp || sec > maxTimestamp {
		p.pos = start
		return nil, p.fail(ErrUnsupported, fmt.Sprintf("timestamp %d s is outside years 0 to 9999", sec))
	}
	return FormatTime(time.Unix(sec, nsec)), nil
}

// The first and last second RFC 3339 can write: 0000-01-01T00:00:00Z and
// 9999-12-31T23:59:59Z.
const (
	minTimestamp = -62167219200
	maxTimestamp = 253402300799
)

// FormatTime formats an instant the way a msgpack timestamp decodes: RFC
// 3339 in UTC with nine fraction digits.
func FormatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
}
