#include "textflag.h"

// func cpuRelax()
TEXT ·cpuRelax(SB), NOSPLIT|NOFRAME, $0-0
	PAUSE
	RET
