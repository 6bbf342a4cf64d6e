#include "textflag.h"

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func plainASCII32(b []byte) int
//
// A byte is plain when it is above 0x1f as a signed byte (so 0x20-0x7f)
// and is neither '"' nor '\\'. Blocks of 32 bytes are read while whole
// blocks are left; the first block with a byte that is not plain gives
// that byte's index.
TEXT ·plainASCII32(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	XORQ AX, AX
	MOVL $0x22222222, DX
	VMOVD DX, X1
	VPBROADCASTD X1, Y1
	MOVL $0x5c5c5c5c, DX
	VMOVD DX, X2
	VPBROADCASTD X2, Y2
	MOVL $0x1f1f1f1f, DX
	VMOVD DX, X3
	VPBROADCASTD X3, Y3

loop64:
	LEAQ 64(AX), DX
	CMPQ DX, CX
	JA loop32
	VMOVDQU (SI)(AX*1), Y0
	VMOVDQU 32(SI)(AX*1), Y7
	VPCMPGTB Y3, Y0, Y4  // Y4 = Y0 > 0x1f: 0x20-0x7f
	VPCMPGTB Y3, Y7, Y8
	VPCMPEQB Y1, Y0, Y5  // '"'
	VPCMPEQB Y1, Y7, Y9
	VPCMPEQB Y2, Y0, Y6  // '\\'
	VPCMPEQB Y2, Y7, Y10
	VPOR Y6, Y5, Y5
	VPOR Y10, Y9, Y9
	VPANDN Y4, Y5, Y5    // Y5 = plain: ranged and not quote or backslash
	VPANDN Y8, Y9, Y9
	VPAND Y9, Y5, Y11
	VPMOVMSKB Y11, R8
	CMPL R8, $0xffffffff
	JNE found64
	ADDQ $64, AX
	JMP loop64

found64:
	VPMOVMSKB Y5, R8
	CMPL R8, $0xffffffff
	JNE found
	ADDQ $32, AX
	VPMOVMSKB Y9, R8
	JMP found

loop32:
	LEAQ 32(AX), DX
	CMPQ DX, CX
	JA done
	VMOVDQU (SI)(AX*1), Y0
	VPCMPGTB Y3, Y0, Y4
	VPCMPEQB Y1, Y0, Y5
	VPCMPEQB Y2, Y0, Y6
	VPOR Y6, Y5, Y5
	VPANDN Y4, Y5, Y5
	VPMOVMSKB Y5, R8
	CMPL R8, $0xffffffff
	JNE found
	ADDQ $32, AX
	JMP loop32

found:
	NOTL R8
	BSFL R8, R8
	ADDQ R8, AX

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
