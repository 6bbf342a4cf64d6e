package record

import "testing"

// TestPlainASCII32 holds the vector scan to a byte loop: for every length
// up to a few blocks and every byte that is not plain at every offset, it
// stops at that byte, or at the last whole block before it.
func TestPlainASCII32(t *testing.T) {
	if !useAVX2 {
		t.Skip("this CPU has no AVX2: plainPrefix is never used")
	}
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	want := func(b []byte) int {
		whole := len(b) &^ 31
		for i := 0; i < whole; i++ {
			if !plain(b[i]) {
				return i
			}
		}
		return whole
	}
	specials := []byte{0, 0x1f, '"', '\\', 0x7f + 1, 0xc3, 0xff}
	for n := 0; n <= 200; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('A' + i%26)
		}
		if got := plainASCII32(b); got != want(b) {
			t.Fatalf("%d plain bytes: %d, want %d", n, got, want(b))
		}
		for at := 0; at < n; at++ {
			for _, c := range specials {
				old := b[at]
				b[at] = c
				if got := plainASCII32(b); got != want(b) {
					t.Fatalf("%d bytes, 0x%02x at %d: %d, want %d", n, c, at, got, want(b))
				}
				b[at] = old
			}
		}
	}
	// The edges of the range: 0x20 and 0x7f are plain.
	b := make([]byte, 64)
	for i := range b {
		b[i] = 0x20 + byte(i%2)*0x5f
	}
	if got := plainASCII32(b); got != 64 {
		t.Fatalf("0x20 and 0x7f: %d, want 64", got)
	}
}

// TestScanJSONString_WithoutAVX2 runs the reference test on the word
// loops alone, as a CPU without AVX2 does.
func TestScanJSONString_WithoutAVX2(t *testing.T) {
	old := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = old }()
	TestScanJSONString_AgreesWithReference(t)
}
