package record

import (
	"bytes"
	"testing"
)

// scanReference is scanJSONString byte by byte.
func scanReference(b []byte, i int) (int, bool) {
	ascii := true
	for ; i < len(b); i++ {
		c := b[i]
		if c < 0x20 || c == '"' || c == '\\' {
			break
		}
		ascii = ascii && c < 0x80
	}
	return i, ascii
}

// TestScanJSONString_AgreesWithReference: the word-at-a-time scans find
// the same end, and the same answer to "all ASCII", as a byte-by-byte
// scan, for a special byte at every offset of strings of every length
// around the words, steps and windows they work in, and for two special
// bytes at gaps across them (a byte that is not ASCII before a control
// character, and the other way round).
func TestScanJSONString_AgreesWithReference(t *testing.T) {
	specials := []byte{0x00, 0x01, '\n', 0x1f, '"', '\\', 0x7f, 0x80, 0xc3, 0xff, 0x20, 0x9f, 0xa0}
	var lengths []int
	for n := range 80 {
		lengths = append(lengths, n)
	}
	for _, around := range []int{256, 512, 544, 1024} {
		for n := around - 9; n <= around+9; n++ {
			lengths = append(lengths, n)
		}
	}
	agrees := func(b []byte, start int) bool {
		end, ascii := scanJSONString(b, start)
		wantEnd, wantASCII := scanReference(b, start)
		return end == wantEnd && ascii == wantASCII
	}
	for _, fill := range []byte{'a', '~'} {
		for _, n := range lengths {
			b := bytes.Repeat([]byte{fill}, n)
			for start := 0; start <= min(2, n); start++ {
				if start > 0 && n > 80 {
					break
				}
				if !agrees(b, start) {
					t.Fatalf("%d bytes of %q from %d", n, fill, start)
				}
				for off := start; off < n; off++ {
					if off >= 80 && off < n-80 && off%9 != 0 {
						continue // the middle of a long string, sampled
					}
					for _, sp := range specials {
						b[off] = sp
						if !agrees(b, start) {
							t.Fatalf("%d bytes of %q from %d, byte %#x at %d", n, fill, start, sp, off)
						}
					}
					b[off] = fill
				}
			}
		}
	}
	pairs := [][2]byte{{0xc3, 0x01}, {0x01, 0xc3}, {0xc3, '"'}, {0x80, '\\'}, {'\\', 0x80}, {0x1f, 0x20}}
	for n := 32; n < 1100; n += 37 {
		for off := 0; off < n; off += 5 {
			for _, gap := range []int{1, 7, 8, 9, 31, 32, 33, 100, 513} {
				if off+gap >= n {
					continue
				}
				for _, p := range pairs {
					b := bytes.Repeat([]byte{'x'}, n)
					b[off], b[off+gap] = p[0], p[1]
					if !agrees(b, 0) {
						t.Fatalf("%d bytes, %#x at %d and %#x at %d", n, p[0], off, p[1], off+gap)
					}
				}
			}
		}
	}
}
