package record

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// MarshalJSON encodes a record value as JSON.
func MarshalJSON(v any) ([]byte, error) { return AppendJSON(nil, v) }

// MarshalMsgpack encodes a record value as msgpack.
func MarshalMsgpack(v any) ([]byte, error) { return AppendMsgpack(nil, v) }

// AppendJSON appends the JSON encoding of a record value to dst. Map keys
// keep their order and numbers their exact value; a float is written as
// encoding/json writes it and a nil *Map as null. A non-finite float, a
// Number that is not a JSON number literal and a Go type outside the data
// model are ErrUnsupported.
func AppendJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return AppendJSONString(dst, x), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, fmt.Errorf("encode json: %w: non-finite float", ErrUnsupported)
		}
		return appendFloat(dst, x), nil
	case Number:
		if !validNumber(string(x)) {
			return dst, fmt.Errorf("encode json: %w: invalid number literal %.40q", ErrUnsupported, string(x))
		}
		return append(dst, x...), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendJSON(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case *Map:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '{')
		for i, m := range x.Members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, m.Key)
			dst = append(dst, ':')
			var err error
			if dst, err = AppendJSON(dst, m.Value); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("encode json: %w: Go type %T", ErrUnsupported, v)
}

// JSONLen returns the length of v's JSON encoding, len(AppendJSON(nil, v)),
// without making it: strings are scanned, not copied. Its error is the
// one AppendJSON would return.
func JSONLen(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return len("null"), nil
	case bool:
		if x {
			return len("true"), nil
		}
		return len("false"), nil
	case string:
		return jsonStringLen(x), nil
	case int64:
		var buf [20]byte
		return len(strconv.AppendInt(buf[:0], x, 10)), nil
	case uint64:
		var buf [20]byte
		return len(strconv.AppendUint(buf[:0], x, 10)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("encode json: %w: non-finite float", ErrUnsupported)
		}
		var buf [32]byte
		return len(appendFloat(buf[:0], x)), nil
	case Number:
		if !validNumber(string(x)) {
			return 0, fmt.Errorf("encode json: %w: invalid number literal %.40q", ErrUnsupported, string(x))
		}
		return len(x), nil
	case []any:
		n := 2 + max(len(x)-1, 0) // brackets and commas
		for _, e := range x {
			k, err := JSONLen(e)
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	case *Map:
		if x == nil {
			return len("null"), nil
		}
		n := 2 + max(len(x.Members)-1, 0) // braces and commas
		for _, m := range x.Members {
			k, err := JSONLen(m.Value)
			if err != nil {
				return 0, err
			}
			n += jsonStringLen(m.Key) + 1 + k
		}
		return n, nil
	}
	return 0, fmt.Errorf("encode json: %w: Go type %T", ErrUnsupported, v)
}

// jsonStringLen is len(AppendJSONString(nil, s)).
func jsonStringLen(s string) int {
	n := 2
	for len(s) > 0 {
		k := plainASCII(s)
		n += k
		s = s[k:]
		if len(s) == 0 {
			break
		}
		c := s[0]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s)
			if r == utf8.RuneError && size == 1 {
				n += len(`\ufffd`)
			} else {
				n += size
			}
			s = s[size:]
			continue
		}
		switch c {
		case '"', '\\', '\n', '\r', '\t', '\b', '\f':
			n += 2
		default:
			n += len(`\u0000`)
		}
		s = s[1:]
	}
	return n
}

// appendFloat writes the shortest text that reads back as the same
// float64, exactly as encoding/json does.
func appendFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
		// Shorten e-09 to e-9; positive exponents stay e+21.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
		return dst
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string literal. Invalid UTF-8
// bytes, which decoders never produce, become U+FFFD as in encoding/json.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for len(s) > 0 {
		n := plainASCII(s)
		dst = append(dst, s[:n]...)
		s = s[n:]
		if len(s) == 0 {
			break
		}
		c := s[0]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s)
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[:size]...)
			}
			s = s[size:]
			continue
		}
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		s = s[1:]
	}
	return append(dst, '"')
}

// AppendMsgpack appends the msgpack encoding of a record value to dst,
// using the smallest encoding of each value. A Number literal becomes an
// integer when it is one that fits 64 bits, else the nearest float64
// (msgpack has no wider number); one beyond float64's range is
// ErrUnsupported, as are the values AppendJSON refuses. A nil *Map is nil.
func AppendMsgpack(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, 0xc0), nil
	case bool:
		if x {
			return append(dst, 0xc3), nil
		}
		return append(dst, 0xc2), nil
	case string:
		return AppendMsgpackString(dst, x), nil
	case int64:
		return AppendMsgpackInt(dst, x), nil
	case uint64:
		if x <= math.MaxInt64 {
			return AppendMsgpackInt(dst, int64(x)), nil
		}
		return binary.BigEndian.AppendUint64(append(dst, 0xcf), x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, fmt.Errorf("encode msgpack: %w: non-finite float", ErrUnsupported)
		}
		return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(x)), nil
	case Number:
		if !validNumber(string(x)) {
			return dst, fmt.Errorf("encode msgpack: %w: invalid number literal %.40q", ErrUnsupported, string(x))
		}
		if s, ok := IntegerString(x); ok {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return AppendMsgpackInt(dst, i), nil
			}
			if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				return binary.BigEndian.AppendUint64(append(dst, 0xcf), u), nil
			}
		}
		f, _ := Float(x)
		if math.IsInf(f, 0) {
			return dst, fmt.Errorf("encode msgpack: %w: number %.40s is beyond float64", ErrUnsupported, string(x))
		}
		return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f)), nil
	case []any:
		dst = AppendMsgpackArrayLen(dst, len(x))
		for _, e := range x {
			var err error
			if dst, err = AppendMsgpack(dst, e); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case *Map:
		if x == nil {
			return append(dst, 0xc0), nil
		}
		dst = AppendMsgpackMapLen(dst, len(x.Members))
		for _, m := range x.Members {
			dst = AppendMsgpackString(dst, m.Key)
			var err error
			if dst, err = AppendMsgpack(dst, m.Value); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("encode msgpack: %w: Go type %T", ErrUnsupported, v)
}

// AppendMsgpackInt appends an integer in its smallest msgpack form.
func AppendMsgpackInt(dst []byte, i int64) []byte {
	switch {
	case i >= 0 && i <= 0x7f:
		return append(dst, byte(i))
	case i < 0 && i >= -32:
		return append(dst, byte(int8(i)))
	case i >= 0 && i <= math.MaxUint8:
		return append(dst, 0xcc, byte(i))
	case i >= 0 && i <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(i))
	case i >= 0 && i <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(i))
	case i >= 0:
		return binary.BigEndian.AppendUint64(append(dst, 0xcf), uint64(i))
	case i >= math.MinInt8:
		return append(dst, 0xd0, byte(int8(i)))
	case i >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(int16(i)))
	case i >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(int32(i)))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(i))
}

// AppendMsgpackString appends a msgpack str. Invalid UTF-8 bytes, which
// decoders never produce, become U+FFFD, as AppendJSONString writes them:
// a decoder refuses a str that is not UTF-8.
func AppendMsgpackString(dst []byte, s string) []byte {
	// Short ASCII strings, most keys and many values, take a path small
	// enough to inline.
	if len(s) <= 31 && isASCII(s) {
		return append(append(dst, 0xa0|byte(len(s))), s...)
	}
	return appendMsgpackString(dst, s)
}

func appendMsgpackString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = replaceInvalidUTF8(s)
	}
	n := len(s)
	switch {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

// replaceInvalidUTF8 replaces each byte of s that is not part of a valid
// UTF-8 sequence by U+FFFD.
func replaceInvalidUTF8(s string) string {
	b := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return string(b)
}

// AppendMsgpackArrayLen appends a msgpack array header.
func AppendMsgpackArrayLen(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

// AppendMsgpackMapLen appends a msgpack map header.
func AppendMsgpackMapLen(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}
