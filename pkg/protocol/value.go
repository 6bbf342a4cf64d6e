package protocol

import (
	"fmt"
)

// skipSpace skips JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// maxDepth bounds the nesting skipJSON follows.
const maxDepth = 10000

// skipJSON returns where the JSON value at b[i] ends. It checks the
// structure (brackets, strings), not the scalars' spelling.
func skipJSON(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: a value expected at byte %d", ErrBadReply, i)
	}
	switch c := b[i]; c {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("%w: a string at byte %d does not end", ErrBadReply, i)
	case '[', '{':
		if depth >= maxDepth {
			return 0, fmt.Errorf("%w: nested too deep at byte %d", ErrBadReply, i)
		}
		close := byte(']')
		if c == '{' {
			close = '}'
		}
		j := skipSpace(b, i+1)
		if j < len(b) && b[j] == close {
			return j + 1, nil
		}
		for {
			var err error
			if c == '{' {
				if j >= len(b) || b[j] != '"' {
					return 0, fmt.Errorf("%w: a key expected at byte %d", ErrBadReply, j)
				}
				if j, err = skipJSON(b, j, depth+1); err != nil {
					return 0, err
				}
				j = skipSpace(b, j)
				if j >= len(b) || b[j] != ':' {
					return 0, fmt.Errorf("%w: ':' expected at byte %d", ErrBadReply, j)
				}
				j = skipSpace(b, j+1)
			}
			if j, err = skipJSON(b, j, depth+1); err != nil {
				return 0, err
			}
			j = skipSpace(b, j)
			if j < len(b) && b[j] == ',' {
				j = skipSpace(b, j+1)
				continue
			}
			if j < len(b) && b[j] == close {
				return j + 1, nil
			}
			return 0, fmt.Errorf("%w: ',' or '%c' expected at byte %d", ErrBadReply, close, j)
		}
	default:
		j := i
		for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] >= '0' && b[j] <= '9' || b[j] >= 'a' && b[j] <= 'z' || b[j] >= 'A' && b[j] <= 'Z') {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("%w: a value expected at byte %d", ErrBadReply, i)
		}
		return j, nil
	}
}

// skipMsgpack returns where the msgpack object at b[i] ends.
func skipMsgpack(b []byte, i int) (int, error) {
	left := 1 // objects still to skip
	for left > 0 {
		if i >= len(b) {
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
		left--
		c := b[i]
		var size, items int // bytes after the header byte, objects inside
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			size = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err := lenAt(b, i+1, 1)
			if err != nil {
				return 0, err
			}
			size = 1 + n
		case c == 0xc5 || c == 0xda:
			n, err := lenAt(b, i+1, 2)
			if err != nil {
				return 0, err
			}
			size = 2 + n
		case c == 0xc6 || c == 0xdb:
			n, err := lenAt(b, i+1, 4)
			if err != nil {
				return 0, err
			}
			size = 4 + n
		case c == 0xc7 || c == 0xc8 || c == 0xc9:
			w := 1 << (c - 0xc7)
			n, err := lenAt(b, i+1, w)
			if err != nil {
				return 0, err
			}
			size = w + 1 + n
		case c == 0xca:
			size = 4
		case c == 0xcb:
			size = 8
		case c >= 0xcc && c <= 0xcf:
			size = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			size = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			size = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde:
			n, err := lenAt(b, i+1, 2)
			if err != nil {
				return 0, err
			}
			size, items = 2, n
			if c == 0xde {
				items *= 2
			}
		case c == 0xdd || c == 0xdf:
			n, err := lenAt(b, i+1, 4)
			if err != nil {
				return 0, err
			}
			size, items = 4, n
			if c == 0xdf {
				items *= 2
			}
		default:
			return 0, fmt.Errorf("%w: byte 0x%02x at %d is not msgpack", ErrBadReply, c, i)
		}
		if size > len(b)-i-1 {
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
		i += 1 + size
		left += items
		if left > len(b)-i {
			// Every object takes a byte at least.
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
	}
	return i, nil
}

// lenAt reads a big-endian length of w bytes at b[i].
func lenAt(b []byte, i, w int) (int, error) {
	if i+w > len(b) {
		return 0, fmt.Errorf("%w: msgpack ends inside a length", ErrBadReply)
	}
	var n uint64
	for _, c := range b[i : i+w] {
		n = n<<8 | uint64(c)
	}
	if n > uint64(len(b)) {
		return 0, fmt.Errorf("%w: a msgpack length past the end", ErrBadReply)
	}
	return int(n), nil
}

// mapLen reads a msgpack map header at b[i]: its entries, and where they
// start.
func mapLen(b []byte, i int) (int, int, error) {
	return header(b, i, 0x80, 0xde, "map")
}

// arrayLen reads a msgpack array header.
func arrayLen(b []byte, i int) (int, int, error) {
	return header(b, i, 0x90, 0xdc, "array")
}

func header(b []byte, i int, fix, w16 byte, what string) (int, int, error) {
	if i >= len(b) {
		return 0, 0, fmt.Errorf("%w: a msgpack %s expected", ErrBadReply, what)
	}
	switch c := b[i]; {
	case c&0xf0 == fix:
		return int(c & 0x0f), i + 1, nil
	case c == w16:
		n, err := lenAt(b, i+1, 2)
		return n, i + 3, err
	case c == w16+1:
		n, err := lenAt(b, i+1, 4)
		return n, i + 5, err
	}
	return 0, 0, fmt.Errorf("%w: a msgpack %s expected at byte %d", ErrBadReply, what, i)
}

// strLen reads a msgpack string header: its length and where it starts.
func strLen(b []byte, i int) (int, int, error) {
	if i >= len(b) {
		return 0, 0, fmt.Errorf("%w: a msgpack string expected", ErrBadReply)
	}
	var n, s int
	var err error
	switch c := b[i]; {
	case c >= 0xa0 && c <= 0xbf:
		n, s = int(c&0x1f), i+1
	case c == 0xd9:
		n, err = lenAt(b, i+1, 1)
		s = i + 2
	case c == 0xda:
		n, err = lenAt(b, i+1, 2)
		s = i + 3
	case c == 0xdb:
		n, err = lenAt(b, i+1, 4)
		s = i + 5
	default:
		return 0, 0, fmt.Errorf("%w: a msgpack string expected at byte %d", ErrBadReply, i)
	}
	if err == nil && s+n > len(b) {
		err = fmt.Errorf("%w: a msgpack string past the end", ErrBadReply)
	}
	return n, s, err
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n < 1<<16:
		return append(b, 0xde, byte(n>>8), byte(n))
	}
	return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// Located is where a reply's message array lies (Locate).
type Located struct {
	Msgpack bool
	// ArrayAt is where the array starts: its '[' or msgpack header;
	// ItemsAt where its first item starts; Count the items, from the
	// msgpack header (-1 in JSON).
	ArrayAt, ItemsAt, Count int
	// Other is the encoding of the body's other field, nil without one.
	Other []byte
}

// Locate finds a reply's message array, reading the members before it
// and not its items: what comes before the array is small, the array
// may not be.
func Locate(b []byte) (Located, error) {
	l := Located{Count: -1}
	if len(b) == 0 {
		return l, fmt.Errorf("%w: empty", ErrBadReply)
	}
	if b[0] != '{' {
		l.Msgpack = true
		n, i, err := mapLen(b, 0)
		if err != nil {
			return l, err
		}
		for range n {
			kl, ks, err := strLen(b, i)
			if err != nil {
				return l, err
			}
			key, vs := string(b[ks:ks+kl]), ks+kl
			if contains(arrayKeys, key) {
				l.ArrayAt = vs
				l.Count, l.ItemsAt, err = arrayLen(b, vs)
				return l, err
			}
			ve, err := skipMsgpack(b, vs)
			if err != nil {
				return l, err
			}
			if contains(otherKeys, key) {
				l.Other = b[vs:ve]
			}
			i = ve
		}
		return l, fmt.Errorf("%w: no message array", ErrBadReply)
	}
	i := skipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		ke, err := skipJSON(b, i, 0)
		if err != nil {
			return l, err
		}
		key := string(b[i+1 : ke-1])
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			break
		}
		vs := skipSpace(b, i+1)
		if contains(arrayKeys, key) && vs < len(b) && b[vs] == '[' {
			l.ArrayAt, l.ItemsAt = vs, skipSpace(b, vs+1)
			return l, nil
		}
		ve, err := skipJSON(b, vs, 0)
		if err != nil {
			return l, err
		}
		if contains(otherKeys, key) {
			l.Other = b[vs:ve]
		}
		i = skipSpace(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return l, fmt.Errorf("%w: no message array", ErrBadReply)
}

// SkipValue returns where the value at b[i] ends, JSON or msgpack.
func SkipValue(b []byte, i int, msgpack bool) (int, error) {
	if msgpack {
		return skipMsgpack(b, i)
	}
	return skipJSON(b, i, 0)
}
