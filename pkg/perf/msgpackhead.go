package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// replyHead reads a msgpack context reply's seq and the number of
// messages of its messages array without decoding the messages: the
// soak checks every reply, and decoding a context of megabytes for each
// would take the clients' CPU from the service they measure.
func replyHead(b []byte) (seq uint64, messages int, err error) {
	n, p, err := mpMapLen(b, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("reply: %w", err)
	}
	found := 0
	for range n {
		var key string
		if key, p, err = mpStr(b, p); err != nil {
			return 0, 0, fmt.Errorf("reply key: %w", err)
		}
		switch key {
		case "seq":
			if seq, p, err = mpUint(b, p); err != nil {
				return 0, 0, fmt.Errorf("reply seq: %w", err)
			}
			found++
		case "messages":
			var m int
			if m, p, err = mpArrayLen(b, p); err != nil {
				return 0, 0, fmt.Errorf("reply messages: %w", err)
			}
			messages = m
			for range m {
				if p, err = mpSkip(b, p); err != nil {
					return 0, 0, fmt.Errorf("reply message: %w", err)
				}
			}
			found++
		default:
			if p, err = mpSkip(b, p); err != nil {
				return 0, 0, fmt.Errorf("reply %q: %w", key, err)
			}
		}
	}
	if found != 2 {
		return 0, 0, errors.New("reply: no seq or no messages")
	}
	return seq, messages, nil
}

var errShort = errors.New("msgpack cut short")

// mpNeed returns b[p:p+n], or errShort.
func mpNeed(b []byte, p, n int) ([]byte, error) {
	if n < 0 || p+n > len(b) || p+n < p {
		return nil, errShort
	}
	return b[p : p+n], nil
}

func mpBe(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	case 4:
		return uint64(binary.BigEndian.Uint32(b))
	}
	return binary.BigEndian.Uint64(b)
}

// mpHead reads a value's type byte and, for the types that have one, its
// length or count: n is a string's or binary's bytes, an array's
// elements, a map's pairs, or a fixed-size value's bytes after the type
// byte (an ext's data and type); kind is 's', 'a', 'm' or 'x' (the rest).
func mpHead(b []byte, p int) (kind byte, n int, next int, err error) {
	t, err := mpNeed(b, p, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	c := t[0]
	p++
	sized := func(kind byte, w int) (byte, int, int, error) {
		l, err := mpNeed(b, p, w)
		if err != nil {
			return 0, 0, 0, err
		}
		v := mpBe(l)
		if v > uint64(len(b)) {
			return 0, 0, 0, errShort
		}
		return kind, int(v), p + w, nil
	}
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return 'x', 0, p, nil
	case c&0xf0 == 0x80:
		return 'm', int(c & 0x0f), p, nil
	case c&0xf0 == 0x90:
		return 'a', int(c & 0x0f), p, nil
	case c&0xe0 == 0xa0:
		return 's', int(c & 0x1f), p, nil
	}
	switch c {
	case 0xc4, 0xd9:
		return sized('s', 1)
	case 0xc5, 0xda:
		return sized('s', 2)
	case 0xc6, 0xdb:
		return sized('s', 4)
	case 0xc7:
		k, n, q, err := sized('s', 1)
		return k, n + 1, q, err
	case 0xc8:
		k, n, q, err := sized('s', 2)
		return k, n + 1, q, err
	case 0xc9:
		k, n, q, err := sized('s', 4)
		return k, n + 1, q, err
	case 0xcc, 0xd0:
		return 'x', 1, p, nil
	case 0xcd, 0xd1:
		return 'x', 2, p, nil
	case 0xca, 0xce, 0xd2:
		return 'x', 4, p, nil
	case 0xcb, 0xcf, 0xd3:
		return 'x', 8, p, nil
	case 0xd4:
		return 'x', 2, p, nil
	case 0xd5:
		return 'x', 3, p, nil
	case 0xd6:
		return 'x', 5, p, nil
	case 0xd7:
		return 'x', 9, p, nil
	case 0xd8:
		return 'x', 17, p, nil
	case 0xdc:
		return sized('a', 2)
	case 0xdd:
		return sized('a', 4)
	case 0xde:
		return sized('m', 2)
	case 0xdf:
		return sized('m', 4)
	}
	return 0, 0, 0, fmt.Errorf("msgpack type 0x%02x", c)
}

// maxDepth bounds the nesting mpSkip follows: the service's records
// are decoded within a depth limit of their own, far below it.
const maxDepth = 10_000

// mpSkip returns the position after the value at p.
func mpSkip(b []byte, p int) (int, error) { return mpSkipDepth(b, p, 0) }

func mpSkipDepth(b []byte, p, depth int) (int, error) {
	if depth > maxDepth {
		return 0, errors.New("msgpack nested too deep")
	}
	kind, n, p, err := mpHead(b, p)
	if err != nil {
		return 0, err
	}
	switch kind {
	case 's', 'x':
		if _, err := mpNeed(b, p, n); err != nil {
			return 0, err
		}
		return p + n, nil
	case 'm':
		n *= 2
	}
	for range n {
		if p, err = mpSkipDepth(b, p, depth+1); err != nil {
			return 0, err
		}
	}
	return p, nil
}

func mpMapLen(b []byte, p int) (int, int, error) {
	kind, n, p, err := mpHead(b, p)
	if err == nil && kind != 'm' {
		err = errors.New("not a map")
	}
	return n, p, err
}

func mpArrayLen(b []byte, p int) (int, int, error) {
	kind, n, p, err := mpHead(b, p)
	if err == nil && kind != 'a' {
		err = errors.New("not an array")
	}
	return n, p, err
}

func mpStr(b []byte, p int) (string, int, error) {
	kind, n, p, err := mpHead(b, p)
	if err == nil && kind != 's' {
		err = errors.New("not a string")
	}
	if err != nil {
		return "", 0, err
	}
	s, err := mpNeed(b, p, n)
	if err != nil {
		return "", 0, err
	}
	return string(s), p + n, nil
}

// mpUint reads an unsigned integer.
func mpUint(b []byte, p int) (uint64, int, error) {
	c, err := mpNeed(b, p, 1)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case c[0] <= 0x7f:
		return uint64(c[0]), p + 1, nil
	case c[0] >= 0xcc && c[0] <= 0xcf:
		w := 1 << (c[0] - 0xcc)
		v, err := mpNeed(b, p+1, w)
		if err != nil {
			return 0, 0, err
		}
		return mpBe(v), p + 1 + w, nil
	}
	return 0, 0, fmt.Errorf("not an unsigned integer (0x%02x)", c[0])
}
