package record

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// The binary form of a record value: what snapshots store values in. A
// value is a tag byte and its data: a string's or number literal's
// length (uvarint) and bytes, an int64 (varint), a uint64 (uvarint), a
// float64's bits (big-endian), an array's count and values, a map's
// count and members (a key's length and bytes, then its value). It
// carries every value a record holds exactly, a Number beyond float64
// included, which msgpack cannot. BinaryReader reads it, and the
// uvarints, counts and byte strings a snapshot puts around values.

// Tags of the binary form.
const (
	binNil = iota
	binFalse
	binTrue
	binString
	binInt
	binUint
	binFloat
	binNumber
	binArray
	binMap
)

// AppendBinary appends the binary form of v, a record value (what
// decoding a record gives: nil, bool, string, int64, uint64, float64,
// Number, []any, *Map). Any other type is a bug, and a form without
// the value would read back as another value: it panics.
func AppendBinary(buf []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(buf, binNil)
	case bool:
		if x {
			return append(buf, binTrue)
		}
		return append(buf, binFalse)
	case string:
		buf = binary.AppendUvarint(append(buf, binString), uint64(len(x)))
		return append(buf, x...)
	case int64:
		return binary.AppendVarint(append(buf, binInt), x)
	case uint64:
		return binary.AppendUvarint(append(buf, binUint), x)
	case float64:
		return binary.BigEndian.AppendUint64(append(buf, binFloat), math.Float64bits(x))
	case Number:
		buf = binary.AppendUvarint(append(buf, binNumber), uint64(len(x)))
		return append(buf, x...)
	case []any:
		buf = binary.AppendUvarint(append(buf, binArray), uint64(len(x)))
		for _, e := range x {
			buf = AppendBinary(buf, e)
		}
		return buf
	case *Map:
		if x == nil {
			return append(buf, binNil)
		}
		buf = binary.AppendUvarint(append(buf, binMap), uint64(len(x.Members)))
		for _, m := range x.Members {
			buf = binary.AppendUvarint(buf, uint64(len(m.Key)))
			buf = append(buf, m.Key...)
			buf = AppendBinary(buf, m.Value)
		}
		return buf
	}
	panic(fmt.Sprintf("record: the binary form of a %T, not a record value", v))
}

// BinaryReader reads a buffer front to back: uvarints, counts, byte
// strings and values in the binary form, each read checked against the
// bytes left and failing with an error that names what was read. The
// strings of the values it reads share one copy of the buffer, as a
// decoded record's share its input.
type BinaryReader struct {
	b   []byte
	s   string // string(b), made at the first string read
	pos int
	// reserved counts the bytes the containers being read still need for
	// their remaining elements, one at least each, so that nested
	// containers cannot each promise the same bytes: what a count makes
	// the reader allocate stays within a small multiple of the input.
	reserved int
}

// NewBinaryReader returns a reader of b.
func NewBinaryReader(b []byte) *BinaryReader { return &BinaryReader{b: b} }

// Left returns the bytes not read yet.
func (r *BinaryReader) Left() int { return len(r.b) - r.pos }

// Uvarint reads a uvarint.
func (r *BinaryReader) Uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos : len(r.b)-r.reserved])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("%s: truncated at byte %d", what, r.pos)
		}
		return 0, fmt.Errorf("%s: varint overflows 64 bits at byte %d", what, r.pos)
	}
	r.pos += n
	return v, nil
}

// Count reads a count of items taking min bytes at least each.
func (r *BinaryReader) Count(what string, min int) (int, error) {
	v, err := r.Uvarint(what)
	if err != nil {
		return 0, err
	}
	if left := r.Left() - r.reserved; v > uint64(left/min) {
		return 0, fmt.Errorf("%s: %d, more than the %d bytes left can hold", what, v, left)
	}
	return int(v), nil
}

// Take reads the next n bytes; they are the buffer's.
func (r *BinaryReader) Take(n int, what string) ([]byte, error) {
	if n < 0 || n > r.Left()-r.reserved {
		return nil, fmt.Errorf("%s: %d bytes, %d left", what, n, r.Left()-r.reserved)
	}
	b := r.b[r.pos : r.pos+n : r.pos+n]
	r.pos += n
	return b, nil
}

// Bytes reads a byte string: its length, a uvarint, and its bytes.
func (r *BinaryReader) Bytes(what string) ([]byte, error) {
	n, err := r.Count(what+" length", 1)
	if err != nil {
		return nil, err
	}
	return r.Take(n, what)
}

// Value reads a value in the binary form, nested at most maxDepth deep.
func (r *BinaryReader) Value(maxDepth int) (any, error) {
	return r.value(0, maxDepth)
}

func (r *BinaryReader) fail(format string, args ...any) error {
	return fmt.Errorf("value byte %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *BinaryReader) avail() int { return len(r.b) - r.pos - r.reserved }

// uvarintIn reads a uvarint in a value.
func (r *BinaryReader) uvarintIn() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos : len(r.b)-r.reserved])
	if n <= 0 {
		return 0, r.fail("bad varint")
	}
	r.pos += n
	return v, nil
}

// length reads a count of items of min bytes at least each, in a value.
func (r *BinaryReader) length(min int) (int, error) {
	v, err := r.uvarintIn()
	if err != nil {
		return 0, err
	}
	if v > uint64(r.avail()/min) {
		return 0, r.fail("%d items of %d bytes at least, in %d bytes", v, min, r.avail())
	}
	return int(v), nil
}

// str reads a length and that many bytes of valid UTF-8.
func (r *BinaryReader) str() (string, error) {
	n, err := r.length(1)
	if err != nil {
		return "", err
	}
	if r.s == "" && len(r.b) > 0 {
		r.s = string(r.b)
	}
	s := r.s[r.pos : r.pos+n]
	if !utf8.ValidString(s) {
		return "", r.fail("invalid UTF-8 in a string")
	}
	r.pos += n
	return s, nil
}

func (r *BinaryReader) value(depth, maxDepth int) (any, error) {
	if r.avail() < 1 {
		return nil, r.fail("truncated: expected a value")
	}
	tag := r.b[r.pos]
	r.pos++
	switch tag {
	case binNil:
		return nil, nil
	case binFalse:
		return false, nil
	case binTrue:
		return true, nil
	case binString:
		return r.str()
	case binInt:
		v, n := binary.Varint(r.b[r.pos : len(r.b)-r.reserved])
		if n <= 0 {
			return nil, r.fail("bad varint")
		}
		r.pos += n
		return v, nil
	case binUint:
		return r.uvarintIn()
	case binFloat:
		if r.avail() < 8 {
			return nil, r.fail("truncated float")
		}
		f := math.Float64frombits(binary.BigEndian.Uint64(r.b[r.pos:]))
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, r.fail("non-finite float")
		}
		r.pos += 8
		return f, nil
	case binNumber:
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		if _, ok := Float(Number(s)); !ok {
			return nil, r.fail("invalid number literal %.40q", s)
		}
		return Number(s), nil
	case binArray, binMap:
		if depth >= maxDepth {
			return nil, r.fail("nested deeper than %d", maxDepth)
		}
		if tag == binArray {
			return r.array(depth, maxDepth)
		}
		return r.mapValue(depth, maxDepth)
	}
	return nil, r.fail("unknown tag %d", tag)
}

func (r *BinaryReader) array(depth, maxDepth int) (any, error) {
	n, err := r.length(1)
	if err != nil {
		return nil, err
	}
	a := make([]any, n)
	outer := r.reserved
	for i := range a {
		r.reserved = outer + n - 1 - i
		if a[i], err = r.value(depth+1, maxDepth); err != nil {
			return nil, err
		}
	}
	r.reserved = outer
	return a, nil
}

func (r *BinaryReader) mapValue(depth, maxDepth int) (any, error) {
	// A member takes two bytes at least: its key's length and a value.
	n, err := r.length(2)
	if err != nil {
		return nil, err
	}
	m := &Map{Members: make([]Member, 0, n)}
	var seen map[string]bool // for long maps; short ones are scanned
	outer := r.reserved
	for i := range n {
		r.reserved = outer + 2*(n-1-i) + 1 // the members after this one, and its value
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		dup := false
		if n <= 16 {
			_, dup = m.Get(key)
		} else {
			if seen == nil {
				seen = map[string]bool{} // grown by the keys read, not the count claimed
			}
			dup, seen[key] = seen[key], true
		}
		if dup {
			return nil, r.fail("key %.40q repeated", key)
		}
		r.reserved--
		v, err := r.value(depth+1, maxDepth)
		if err != nil {
			return nil, err
		}
		m.Members = append(m.Members, Member{Key: key, Value: v})
	}
	r.reserved = outer
	return m, nil
}
