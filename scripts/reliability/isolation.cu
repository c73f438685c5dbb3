// isolation.cu - one guest process's faults and output must be its own
// (docs/RELIABILITY.md, issue 17). An ordinary CUDA program
// (nvcc -cudart shared); the kernels' names are the ones the sim device
// emulates (backend/device/sim/testkernels.go), so the same program checks
// a GPU and, without one, the sim:
//
//   isolation printf TAG      prints "HOST before TAG", launches
//                             vgpu_printf_probe<<<2,2>>>(TAG) (each thread:
//                             "vgpu printf probe: tag TAG block B thread T"),
//                             synchronises, prints "HOST after TAG": the four
//                             device lines must come between the two, in
//                             this program's own stdout
//   isolation assert          a kernel's assert(x == 0) fails: the device
//                             prints the assertion (stderr), the sync returns
//                             cudaErrorAssert (710) and stays broken
//   isolation illegal         a kernel stores to 0x100: cudaErrorIllegalAddress
//                             (700), sticky
//
// Last line: "PASS isolation <mode>" or "FAIL isolation <mode>: <why>".
#include <assert.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" __global__ void vgpu_printf_probe(int tag)
{
	printf("vgpu printf probe: tag %d block %d thread %d\n", tag, (int)blockIdx.x, (int)threadIdx.x);
}

extern "C" __global__ void vgpu_fault_assert(int x) { assert(x == 0); }

extern "C" __global__ void vgpu_fault_illegal_address(int *p) { p[threadIdx.x] = 42; }

static const char *mode = "?";

static int fail(const char *why, cudaError_t e)
{
	printf("FAIL isolation %s: %s: %s (%d)\n", mode, why, cudaGetErrorName(e), (int)e);
	return 1;
}

// sticky checks that a fault of kind want is reported by the sync after the
// kernel and by every later call of this process.
static int sticky(cudaError_t want)
{
	cudaError_t e = cudaDeviceSynchronize();
	printf("RESULT %s sync %d\n", mode, (int)e);
	if (e != want)
		return fail("the sync after the faulting kernel", e);
	void *p = NULL;
	if ((e = cudaMalloc(&p, 4096)) != want)
		return fail("cudaMalloc after the fault (the process's context must stay broken)", e);
	if ((e = cudaDeviceSynchronize()) != want)
		return fail("a second sync after the fault", e);
	printf("PASS isolation %s\n", mode);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: isolation printf TAG | assert | illegal\n");
		return 2;
	}
	mode = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	void *warm = NULL;
	cudaError_t e = cudaMalloc(&warm, 4096); // the context exists before the test starts
	if (e != cudaSuccess)
		return fail("cudaMalloc", e);
	if (!strcmp(mode, "printf")) {
		int tag = argc > 2 ? atoi(argv[2]) : 0;
		printf("HOST before %d\n", tag);
		vgpu_printf_probe<<<2, 2>>>(tag);
		if ((e = cudaDeviceSynchronize()) != cudaSuccess)
			return fail("cudaDeviceSynchronize", e);
		printf("HOST after %d\n", tag);
		printf("PASS isolation printf\n");
		return 0;
	}
	if (!strcmp(mode, "assert")) {
		vgpu_fault_assert<<<1, 1>>>(1);
		return sticky(cudaErrorAssert);
	}
	if (!strcmp(mode, "illegal")) {
		vgpu_fault_illegal_address<<<1, 32>>>((int *)(uintptr_t)0x100);
		return sticky(cudaErrorIllegalAddress);
	}
	fprintf(stderr, "isolation: unknown mode %s\n", mode);
	return 2;
}
