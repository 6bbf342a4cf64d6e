package projection

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

// appendValue appends the value encoding of a record value. Sessions hold
// only record values: any other type is a bug, and a snapshot without
// the value would restore a different session.
func appendValue(buf []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(buf, tagNil)
	case bool:
		if x {
			return append(buf, tagTrue)
		}
		return append(buf, tagFalse)
	case string:
		buf = binary.AppendUvarint(append(buf, tagString), uint64(len(x)))
		return append(buf, x...)
	case int64:
		return binary.AppendVarint(append(buf, tagInt), x)
	case uint64:
		return binary.AppendUvarint(append(buf, tagUint), x)
	case float64:
		return binary.BigEndian.AppendUint64(append(buf, tagFloat), math.Float64bits(x))
	case record.Number:
		buf = binary.AppendUvarint(append(buf, tagNumber), uint64(len(x)))
		return append(buf, x...)
	case []any:
		buf = binary.AppendUvarint(append(buf, tagArray), uint64(len(x)))
		for _, e := range x {
			buf = appendValue(buf, e)
		}
		return buf
	case *record.Map:
		if x == nil {
			return append(buf, tagNil)
		}
		buf = binary.AppendUvarint(append(buf, tagMap), uint64(len(x.Members)))
		for _, m := range x.Members {
			buf = binary.AppendUvarint(buf, uint64(len(m.Key)))
			buf = append(buf, m.Key...)
			buf = appendValue(buf, m.Value)
		}
		return buf
	}
	panic(fmt.Sprintf("projection: snapshot of a session holding a %T", v))
}

// valueReader decodes the value encoding of one message. Its strings
// share s, one copy of the message's bytes, as a decoded record's
// strings share a few blocks.
type valueReader struct {
	b   []byte
	s   string
	pos int
	// reserved counts the bytes the containers being read still need for
	// their remaining elements, one at least each, so that nested
	// containers cannot each promise the same bytes: what a count makes
	// the reader allocate stays within a small multiple of the input.
	reserved int
}

func (r *valueReader) avail() int { return len(r.b) - r.pos - r.reserved }

func (r *valueReader) fail(format string, args ...any) error {
	return fmt.Errorf("message byte %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *valueReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos : len(r.b)-r.reserved])
	if n <= 0 {
		return 0, r.fail("bad varint")
	}
	r.pos += n
	return v, nil
}

// length reads a count of items of min bytes at least each.
func (r *valueReader) length(min int) (int, error) {
	v, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if v > uint64(r.avail()/min) {
		return 0, r.fail("%d items of %d bytes at least, in %d bytes", v, min, r.avail())
	}
	return int(v), nil
}

// str reads a length and that many bytes of valid UTF-8.
func (r *valueReader) str() (string, error) {
	n, err := r.length(1)
	if err != nil {
		return "", err
	}
	s := r.s[r.pos : r.pos+n]
	if !utf8.ValidString(s) {
		return "", r.fail("invalid UTF-8 in a string")
	}
	r.pos += n
	return s, nil
}

func (r *valueReader) value(depth int) (any, error) {
	if r.avail() < 1 {
		return nil, r.fail("truncated: expected a value")
	}
	tag := r.b[r.pos]
	r.pos++
	switch tag {
	case tagNil:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagString:
		return r.str()
	case tagInt:
		v, n := binary.Varint(r.b[r.pos : len(r.b)-r.reserved])
		if n <= 0 {
			return nil, r.fail("bad varint")
		}
		r.pos += n
		return v, nil
	case tagUint:
		return r.uvarint()
	case tagFloat:
		if r.avail() < 8 {
			return nil, r.fail("truncated float")
		}
		f := math.Float64frombits(binary.BigEndian.Uint64(r.b[r.pos:]))
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, r.fail("non-finite float")
		}
		r.pos += 8
		return f, nil
	case tagNumber:
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		if _, ok := record.Float(record.Number(s)); !ok {
			return nil, r.fail("invalid number literal %.40q", s)
		}
		return record.Number(s), nil
	case tagArray, tagMap:
		if depth >= snapshotMaxDepth {
			return nil, r.fail("nested deeper than %d", snapshotMaxDepth)
		}
		if tag == tagArray {
			return r.array(depth)
		}
		return r.mapValue(depth)
	}
	return nil, r.fail("unknown tag %d", tag)
}

func (r *valueReader) array(depth int) (any, error) {
	n, err := r.length(1)
	if err != nil {
		return nil, err
	}
	a := make([]any, n)
	outer := r.reserved
	for i := range a {
		r.reserved = outer + n - 1 - i
		if a[i], err = r.value(depth + 1); err != nil {
			return nil, err
		}
	}
	r.reserved = outer
	return a, nil
}

func (r *valueReader) mapValue(depth int) (any, error) {
	// A member takes two bytes at least: its key's length and a value.
	n, err := r.length(2)
	if err != nil {
		return nil, err
	}
	m := &record.Map{Members: make([]record.Member, 0, n)}
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
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m.Members = append(m.Members, record.Member{Key: key, Value: v})
	}
	r.reserved = outer
	return m, nil
}
