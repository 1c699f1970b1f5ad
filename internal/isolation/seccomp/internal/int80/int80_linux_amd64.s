#include "textflag.h"

// func Syscall(nr, a1, a2, a3 uint32) int32
TEXT ·Syscall(SB), NOSPLIT, $0-20
	MOVL	nr+0(FP), AX
	MOVL	a1+4(FP), BX
	MOVL	a2+8(FP), CX
	MOVL	a3+12(FP), DX
	INT	$0x80
	MOVL	AX, ret+16(FP)
	RET
