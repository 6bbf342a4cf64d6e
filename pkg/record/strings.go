package record

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Decoders copy every string out of the input, so that a record never
// holds on to the caller's buffer. Short strings are copied into shared
// blocks rather than one allocation each: a record's keys and short values
// cost one allocation together. A block lives as long as any string in it,
// which is about as long as the record.
const (
	arenaBlock     = 4096 // bytes per block at most
	arenaMaxString = 512  // longer strings get their own allocation
)

type arena struct {
	block []byte
	share bool // input strings of ShareMinString bytes or more are not copied
	all   bool // with share, no input string is copied (ShareShort)
}

// input returns b, a part of the decoder's input, as a string: shared with
// the input when the arena may and the string is long (or any string, see
// ShareShort), else copied as string does.
func (a *arena) input(b []byte, left int) string {
	if a.share && len(b) > 0 && (a.all || len(b) >= ShareMinString) {
		// The caller promised the input never changes (ShareInput).
		return unsafe.String(&b[0], len(b))
	}
	return a.string(b, left)
}

// string returns b as a string; left is the number of input bytes not yet
// read, which bounds the string bytes still to come and so the size of a
// new block.
func (a *arena) string(b []byte, left int) string {
	n := len(b)
	switch {
	case n == 0:
		return ""
	case n > arenaMaxString:
		return string(b)
	case cap(a.block)-len(a.block) < n:
		a.block = make([]byte, 0, min(max(left+n, 64), arenaBlock))
	}
	off := len(a.block)
	a.block = append(a.block, b...)
	// The bytes are never written again: the string is immutable.
	return unsafe.String(&a.block[off], n)
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specialJSON reports whether any of the eight bytes in x needs a closer
// look inside a JSON string: a control character, '"' or '\\'. The
// borrow-based tests are exact for "any byte", though not for which one.
func specialJSON(x uint64) bool {
	q := x ^ (lsb * '"')
	bs := x ^ (lsb * '\\')
	return ((x-lsb*0x20)&^x|(q-lsb)&^q|(bs-lsb)&^bs)&msb != 0
}

// specialAt returns the index of the first byte of the eight in x (in
// memory order) that specialJSON looks for, or 8 when none is. Each
// borrow-based test may mark bytes after the first it finds, never one
// before: the lowest mark of all three is that first byte.
func specialAt(x uint64) int {
	q := x ^ (lsb * '"')
	bs := x ^ (lsb * '\\')
	return bits.TrailingZeros64(((x-lsb*0x20)&^x|(q-lsb)&^q|(bs-lsb)&^bs)&msb) >> 3
}

// scanWindow is how far ahead long strings are searched at a time, a
// multiple of eight. Searching no further than that keeps a string with
// many escapes, or many strings, linear in time.
const scanWindow = 512

// scanJSONString returns the index of the first '"', '\\' or control
// character in b at or after i (len(b) when there is none), and whether
// the bytes skipped are all ASCII.
func scanJSONString(b []byte, i int) (int, bool) {
	var high uint64
	// Short strings, most of them, end within a few words.
	for n := 0; n < 4 && i+8 <= len(b); n++ {
		x := binary.LittleEndian.Uint64(b[i:])
		if k := specialAt(x); k < 8 {
			high |= x & (1<<(8*k) - 1) // the bytes before it
			return i + k, high&msb == 0
		}
		high |= x
		i += 8
	}
	// A long one: skip what a vector scan finds plain, where there is
	// one (a screenshot's base64 is all plain); then find the next quote
	// or backslash with the vectorized IndexByte, a window at a time, and
	// check the bytes before it for control characters only.
	i += plainPrefix(b[i:])
	for {
		w := min(i+scanWindow, len(b))
		end := w
		if q := bytes.IndexByte(b[i:w], '"'); q >= 0 {
			end = i + q
		}
		if e := bytes.IndexByte(b[i:end], '\\'); e >= 0 {
			end = i + e
		}
		// Four words a step: a screenshot's base64 is scanned here. While
		// the bytes are ASCII, one test finds a control character or a
		// byte that is not ASCII (a borrow out of a control character
		// may mark its neighbour too, after it); from the first of
		// either, the loop below tells them apart.
		for ; i+32 <= end; i += 32 {
			x0 := binary.LittleEndian.Uint64(b[i:])
			x1 := binary.LittleEndian.Uint64(b[i+8:])
			x2 := binary.LittleEndian.Uint64(b[i+16:])
			x3 := binary.LittleEndian.Uint64(b[i+24:])
			if ((x0-lsb*0x20)|x0|(x1-lsb*0x20)|x1|(x2-lsb*0x20)|x2|(x3-lsb*0x20)|x3)&msb != 0 {
				break
			}
		}
		for ; i+32 <= end; i += 32 {
			x0 := binary.LittleEndian.Uint64(b[i:])
			x1 := binary.LittleEndian.Uint64(b[i+8:])
			x2 := binary.LittleEndian.Uint64(b[i+16:])
			x3 := binary.LittleEndian.Uint64(b[i+24:])
			if ((x0-lsb*0x20)&^x0|(x1-lsb*0x20)&^x1|(x2-lsb*0x20)&^x2|(x3-lsb*0x20)&^x3)&msb != 0 {
				break
			}
			high |= x0 | x1 | x2 | x3
		}
		for ; i+8 <= end; i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			if (x-lsb*0x20)&^x&msb != 0 {
				return scanTail(b, i, high)
			}
			high |= x
		}
		if i < w || w == len(b) {
			return scanTail(b, i, high)
		}
	}
}

// scanTail finishes scanJSONString byte by byte.
func scanTail(b []byte, i int, high uint64) (int, bool) {
	for ; i < len(b); i++ {
		c := b[i]
		if c < 0x20 || c == '"' || c == '\\' {
			break
		}
		high |= uint64(c)
	}
	return i, high&msb == 0
}

// bytesOf returns the bytes of s without copying them; they must not be
// written.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// isASCII reports whether s is all ASCII, eight bytes at a time.
func isASCII(s string) bool { return asciiBytes(bytesOf(s)) }

// validUTF8 is utf8.Valid with a quicker path for the short ASCII strings
// records are mostly made of.
func validUTF8(b []byte) bool {
	return len(b) < 64 && asciiBytes(b) || utf8.Valid(b)
}

func asciiBytes(b []byte) bool {
	var or uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		or |= binary.LittleEndian.Uint64(b[i:])
	}
	for ; i < len(b); i++ {
		or |= uint64(b[i])
	}
	return or&msb == 0
}

// jsonSafe holds the bytes that stand for themselves in a JSON string.
var jsonSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainASCII returns the length of the longest prefix of s that is ASCII
// and needs no escape in a JSON string.
func plainASCII(s string) int {
	if len(s) >= 256 {
		return plainASCIILong(s)
	}
	i := 0
	if len(s) >= 16 {
		b := bytesOf(s)
		for ; i+8 <= len(b); i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			if x&msb != 0 || specialJSON(x) {
				break
			}
		}
	}
	for i < len(s) && jsonSafe[s[i]] {
		i++
	}
	return i
}

// plainASCIILong is plainASCII for long strings: it finds the next quote
// or backslash with the vectorized IndexByte, a window at a time, and
// looks for control characters and non-ASCII bytes before it.
func plainASCIILong(s string) int {
	b := bytesOf(s)
	i := 0
	for {
		w := min(i+scanWindow, len(s))
		end := w
		if q := strings.IndexByte(s[i:w], '"'); q >= 0 {
			end = i + q
		}
		if e := strings.IndexByte(s[i:end], '\\'); e >= 0 {
			end = i + e
		}
		for ; i+32 <= end; i += 32 {
			x0 := binary.LittleEndian.Uint64(b[i:])
			x1 := binary.LittleEndian.Uint64(b[i+8:])
			x2 := binary.LittleEndian.Uint64(b[i+16:])
			x3 := binary.LittleEndian.Uint64(b[i+24:])
			if (x0|x1|x2|x3|(x0-lsb*0x20)&^x0|(x1-lsb*0x20)&^x1|(x2-lsb*0x20)&^x2|(x3-lsb*0x20)&^x3)&msb != 0 {
				break
			}
		}
		for ; i+8 <= end; i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			if (x|(x-lsb*0x20)&^x)&msb != 0 {
				break
			}
		}
		if i < w || w == len(s) {
			break
		}
	}
	for i < len(s) && jsonSafe[s[i]] {
		i++
	}
	return i
}

// slab hands out slices of one larger allocation, so that the maps and
// arrays of a record cost a few allocations rather than one each. Each
// slice is capped at its length: appending to it reallocates rather than
// writing over its neighbour.
type slab[T any] struct {
	free  []T
	block []T // the block free is the rest of, whole (see rewind)
}

// Elements per slab.
const (
	slabMin = 4
	slabMax = 64
)

// take returns n zero elements; hint estimates how many more will be
// wanted, to size a new slab.
func (s *slab[T]) take(n, hint int) []T {
	if n > len(s.free) {
		if n >= slabMax/4 {
			return make([]T, n)
		}
		s.block = make([]T, min(max(n, hint, slabMin), slabMax))
		s.free = s.block
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}

// rewind hands the current block out again from its start, cleared: for
// a parser whose values are dropped before it decodes again (ShapeReader).
func (s *slab[T]) rewind() {
	clear(s.block[:len(s.block)-len(s.free)])
	s.free = s.block
}
