package record

// useAVX2 says the CPU and the OS support AVX2, which plainASCII32 uses.
var useAVX2 = hasAVX2()

// hasAVX2 reports whether AVX2 instructions may run: the CPU has them
// (CPUID leaf 7) and the OS saves the YMM registers (XGETBV).
func hasAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)

// plainASCII32 returns how many bytes of b, a multiple of 32, come before
// the first 32-byte block holding a byte that a JSON string cannot hold
// as it is or that is not ASCII: '"', '\\', a control character, or a
// byte of 0x80 or more. It is exact to the byte within that block.
//
//go:noescape
func plainASCII32(b []byte) int

// plainPrefix returns how many bytes at the start of b are printable
// ASCII other than '"' and '\\', as far as it looks quickly: it may stop
// short of the first other byte, by less than 32 bytes, and the caller
// checks on from there.
func plainPrefix(b []byte) int {
	if !useAVX2 || len(b) < 64 {
		return 0
	}
	return plainASCII32(b)
}
