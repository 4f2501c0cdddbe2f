#include "textflag.h"

// func garbageLoop(n uint64, r14 uintptr) uint64
// ABI0: R14 is scratch here (the ABIInternal wrapper restores g on the way back); it is put
// back anyway. No preemption point inside: keep n small (~2 ms).
TEXT ·garbageLoop(SB),NOSPLIT,$0-24
	MOVQ n+0(FP), CX
	MOVQ r14+8(FP), AX
	MOVQ R14, DX
	MOVQ AX, R14
	XORQ BX, BX
loop:
	ADDQ CX, BX
	DECQ CX
	JNZ loop
	MOVQ DX, R14
	MOVQ BX, ret+16(FP)
	RET
