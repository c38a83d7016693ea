//go:build amd64 && !purego

#include "textflag.h"

// func kern4x3(x0, x1, x2, x3, w, o0, o1, o2, o3, bias *float32, in, cols int)
//
// For the rows x0 to x3 (in values each) and the cols rows of wt at w
// (stride in; cols a multiple of 3, > 0), sets o_r[j] to x_r · w_j plus
// bias[j] (if bias is not nil), j < cols. in is a multiple of 8, > 0.
// Rows may repeat (with their o_r): the same values are stored twice.
// Y(3r+c) sums x_r times w_c, 8 lanes at a time.
TEXT ·kern4x3(SB), NOSPLIT, $0-96
	MOVQ x0+0(FP), AX
	MOVQ x1+8(FP), BX
	MOVQ x2+16(FP), CX
	MOVQ x3+24(FP), DX
	MOVQ w+32(FP), SI         // SI: the first of three rows of wt
	MOVQ bias+72(FP), R14
	MOVQ in+80(FP), DI
	SHLQ $2, DI               // DI: in, in bytes
	MOVQ cols+88(FP), R12
	IMULQ DI, R12
	ADDQ SI, R12              // R12: the end of the rows of wt
	XORQ R10, R10             // R10: the offset of column j in out

triple:
	LEAQ (SI)(DI*1), R8
	LEAQ (SI)(DI*2), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ R13, R13

loop4x3:
	VMOVUPS (SI)(R13*1), Y12
	VMOVUPS (R8)(R13*1), Y13
	VMOVUPS (R9)(R13*1), Y14
	VMOVUPS (AX)(R13*1), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VMOVUPS (BX)(R13*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VMOVUPS (CX)(R13*1), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VMOVUPS (DX)(R13*1), Y15
	VFMADD231PS Y12, Y15, Y9
	VFMADD231PS Y13, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	ADDQ $32, R13
	CMPQ R13, DI
	JB   loop4x3

	// X(c) = the sums of column c, rows 0 to 3.
	VHADDPS Y3, Y0, Y0
	VHADDPS Y9, Y6, Y6
	VHADDPS Y6, Y0, Y0
	VEXTRACTF128 $1, Y0, X12
	VADDPS X12, X0, X0
	VHADDPS Y4, Y1, Y1
	VHADDPS Y10, Y7, Y7
	VHADDPS Y7, Y1, Y1
	VEXTRACTF128 $1, Y1, X12
	VADDPS X12, X1, X1
	VHADDPS Y5, Y2, Y2
	VHADDPS Y11, Y8, Y8
	VHADDPS Y8, Y2, Y2
	VEXTRACTF128 $1, Y2, X12
	VADDPS X12, X2, X2
	TESTQ R14, R14
	JZ    store4x3
	VBROADCASTSS (R14)(R10*1), X12
	VADDPS X12, X0, X0
	VBROADCASTSS 4(R14)(R10*1), X12
	VADDPS X12, X1, X1
	VBROADCASTSS 8(R14)(R10*1), X12
	VADDPS X12, X2, X2

store4x3:
	MOVQ o0+40(FP), R11
	VMOVSS X0, (R11)(R10*1)
	VMOVSS X1, 4(R11)(R10*1)
	VMOVSS X2, 8(R11)(R10*1)
	MOVQ o1+48(FP), R11
	VEXTRACTPS $1, X0, (R11)(R10*1)
	VEXTRACTPS $1, X1, 4(R11)(R10*1)
	VEXTRACTPS $1, X2, 8(R11)(R10*1)
	MOVQ o2+56(FP), R11
	VEXTRACTPS $2, X0, (R11)(R10*1)
	VEXTRACTPS $2, X1, 4(R11)(R10*1)
	VEXTRACTPS $2, X2, 8(R11)(R10*1)
	MOVQ o3+64(FP), R11
	VEXTRACTPS $3, X0, (R11)(R10*1)
	VEXTRACTPS $3, X1, 4(R11)(R10*1)
	VEXTRACTPS $3, X2, 8(R11)(R10*1)
	ADDQ $12, R10
	LEAQ (R9)(DI*1), SI
	CMPQ SI, R12
	JB   triple
	VZEROUPPER
	RET

// func kern1x4(x, w, out, bias *float32, in, cols int)
//
// Sets out[j] to x · w_j plus bias[j] (if bias is not nil) for the cols
// rows of wt at w (stride in; cols a multiple of 4, > 0). in is a
// multiple of 8, > 0.
TEXT ·kern1x4(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ out+16(FP), R10
	MOVQ bias+24(FP), R14
	MOVQ in+32(FP), DI
	SHLQ $2, DI
	MOVQ cols+40(FP), R12
	IMULQ DI, R12
	ADDQ SI, R12
	LEAQ (DI)(DI*2), R11      // R11: 3 rows of wt

quad:
	LEAQ (SI)(DI*1), R8
	LEAQ (SI)(DI*2), R9
	ADDQ SI, R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R13, R13

loop1x4:
	VMOVUPS (AX)(R13*1), Y4
	VFMADD231PS (SI)(R13*1), Y4, Y0
	VFMADD231PS (R8)(R13*1), Y4, Y1
	VFMADD231PS (R9)(R13*1), Y4, Y2
	VFMADD231PS (R11)(R13*1), Y4, Y3
	ADDQ $32, R13
	CMPQ R13, DI
	JB   loop1x4

	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	TESTQ R14, R14
	JZ    store1x4
	VMOVUPS (R14), X1
	VADDPS X1, X0, X0
	ADDQ $16, R14

store1x4:
	VMOVUPS X0, (R10)
	ADDQ $16, R10
	SUBQ SI, R11
	LEAQ (SI)(DI*4), SI
	CMPQ SI, R12
	JB   quad
	VZEROUPPER
	RET

// func dot8(x, w *float32, in int) float32
//
// Returns x · w over in values (a multiple of 8, > 0).
TEXT ·dot8(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ in+16(FP), CX
	VXORPS Y0, Y0, Y0
	SHLQ $2, CX
	XORQ R13, R13

loopdot:
	VMOVUPS (AX)(R13*1), Y4
	VFMADD231PS (R8)(R13*1), Y4, Y0
	ADDQ $32, R13
	CMPQ R13, CX
	JB   loopdot

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET
