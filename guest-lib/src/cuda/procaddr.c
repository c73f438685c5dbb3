/*
 * procaddr.c - cuGetProcAddress: resolves a driver API name, for a CUDA
 * version and the per-thread-default-stream flag, to a function of this
 * library (the generated table lists every export, hand-written or stub),
 * so callers never get a NULL pointer for a name the real driver has.
 *
 * The real driver resolves "cuFoo" to the newest ABI variant that existed
 * at the requested version. Most _v2 names date from CUDA 3.2; the rest
 * are listed in `since` below (CUDA version that introduced each; the
 * versions are those of the PFN_<name>_v<version> typedefs of
 * cudaTypedefs.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_types.h"
#include "vgpu_procs.h"

#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2ull

static const struct {
	const char *name;
	int version;
} since[] = {
	{"cuCtxCreate_v3", 11040},
	{"cuCtxCreate_v4", 12050},
	{"cuCtxDestroy_v2", 4000},
	{"cuCtxPopCurrent_v2", 4000},
	{"cuCtxPushCurrent_v2", 4000},
	{"cuStreamDestroy_v2", 4000},
	{"cuEventDestroy_v2", 4000},
	{"cuEventElapsedTime_v2", 12080},
	{"cuDevicePrimaryCtxRelease_v2", 11000},
	{"cuDevicePrimaryCtxReset_v2", 11000},
	{"cuDevicePrimaryCtxSetFlags_v2", 11000},
	{"cuDeviceGetUuid_v2", 11040},
	{"cuGetProcAddress_v2", 12000},
	{"cuMemHostRegister_v2", 6050},
	{"cuLinkCreate_v2", 6050},
	{"cuLinkAddData_v2", 6050},
	{"cuLinkAddFile_v2", 6050},
	{"cuStreamGetCaptureInfo_v2", 11030},
	{"cuStreamGetCaptureInfo_v3", 12030},
	{"cuStreamBeginCapture_v2", 10010},
	{"cuStreamUpdateCaptureDependencies_v2", 12030},
	{"cuGraphExecUpdate_v2", 12000},
	{"cuGraphAddKernelNode_v2", 12000},
	{"cuGraphKernelNodeGetParams_v2", 12000},
	{"cuGraphKernelNodeSetParams_v2", 12000},
	{"cuGraphExecKernelNodeSetParams_v2", 12000},
	{"cuGraphGetEdges_v2", 12030},
	{"cuGraphNodeGetDependencies_v2", 12030},
	{"cuGraphNodeGetDependentNodes_v2", 12030},
	{"cuGraphAddDependencies_v2", 12030},
	{"cuGraphRemoveDependencies_v2", 12030},
	{"cuGraphAddNode_v2", 12030},
	{"cuStreamWaitValue32_v2", 11070},
	{"cuStreamWaitValue64_v2", 11070},
	{"cuStreamWriteValue32_v2", 11070},
	{"cuStreamWriteValue64_v2", 11070},
	{"cuStreamBatchMemOp_v2", 11070},
	{"cuGraphInstantiate_v2", 11000},
	{"cuMemAdvise_v2", 12020},
	{"cuMemPrefetchAsync_v2", 12020},
	{"cuTexRefSetAddress2D_v3", 4010},
	{"cuIpcOpenMemHandle_v2", 11000},
	{"cuGraphicsResourceSetMapFlags_v2", 6050},
	{"cuCtxGetDevice_v2", 13000},
	{"cuCtxSynchronize_v2", 13000},
};

static int introduced(const char *name)
{
	for (size_t i = 0; i < sizeof since / sizeof since[0]; i++)
		if (!strcmp(since[i].name, name))
			return since[i].version;
	return strstr(name, "_v2") ? 3020 : 1000000; /* unknown _v3+: never by default */
}

static void (*find(const char *name))(void)
{
	unsigned lo = 0, hi = vgpu_nprocs;
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		int c = strcmp(vgpu_procs[mid].name, name);
		if (!c)
			return vgpu_procs[mid].fn;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int vgpu_proc_address(const char *name, void **pfn, int version, unsigned long long flags, int *status)
{
	if (!name || !pfn)
		return VGPU_E_INVALID_VALUE;
	*pfn = NULL;
	char buf[256];
	void (*best)(void) = NULL;
	int found_any = 0;
	/* Newest variant first: _v4 .. _v2, then the plain name. */
	for (int v = 4; v >= 1 && !best; v--) {
		char base[200];
		if (v > 1)
			snprintf(base, sizeof base, "%s_v%d", name, v);
		else
			snprintf(base, sizeof base, "%s", name);
		if (!find(base))
			continue;
		found_any = 1;
		if (v > 1 && introduced(base) > version)
			continue;
		best = find(base);
		if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
			void (*p)(void);
			snprintf(buf, sizeof buf, "%s_ptsz", base);
			if ((p = find(buf)) != NULL)
				best = p;
			snprintf(buf, sizeof buf, "%s_ptds", base);
			if ((p = find(buf)) != NULL)
				best = p;
		}
	}
	if (!best) {
		if (status)
			*status = found_any ? 2 : 1; /* VERSION_NOT_SUFFICIENT : SYMBOL_NOT_FOUND */
		VDEBUG("cuGetProcAddress(%s, %d): not found", name, version);
		return VGPU_E_NOT_FOUND;
	}
	if (status)
		*status = 0;
	*pfn = (void *)best;
	return 0;
}

VGPU_EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version, unsigned long long flags)
{
	VGPU_API();
	return vgpu_proc_address(name, pfn, version, flags, NULL);
}

VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version, unsigned long long flags,
					 int *status)
{
	VGPU_API();
	return vgpu_proc_address(name, pfn, version, flags, status);
}
