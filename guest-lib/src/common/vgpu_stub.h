/*
 * vgpu_stub.h - the shape of a generated unsupported-symbol stub
 * (generated/<lib>.stubs.c). A stub takes no arguments it looks at: under
 * the System V AMD64 ABI a caller may pass any arguments to it, and it
 * returns an int (cudaError_t / CUresult / nvmlReturn_t are int-sized
 * enums). It logs its name once and returns the table's default.
 * Symbols that return something else (pointers, structs) are hand-written.
 * VGPU_STUB_REPORT is the logging call (NVML's stubs log at info level:
 * see the Makefile).
 */
#ifndef VGPU_STUB_H
#define VGPU_STUB_H

#include "vgpu_internal.h"

#ifndef VGPU_STUB_REPORT
#define VGPU_STUB_REPORT vgpu_unsupported
#endif

#define VGPU_STUB(name, ret)                      \
	VGPU_EXPORT int name(void);               \
	VGPU_EXPORT int name(void)                \
	{                                         \
		VGPU_API();                       \
		static int once;                  \
		VGPU_STUB_REPORT(#name, &once);   \
		return (ret);                     \
	}

#define VGPU_STUB_VOID(name)                      \
	VGPU_EXPORT void name(void);              \
	VGPU_EXPORT void name(void)               \
	{                                         \
		VGPU_API();                       \
		static int once;                  \
		VGPU_STUB_REPORT(#name, &once);   \
	}

#endif
