/*
 * failure_test.c - no backend: every call returns an error code, nothing
 * exits or crashes; the runtime calls go through NVIDIA's libcudart on
 * vgpu's libcuda.so.1. Run with an unreachable VGPU_TRANSPORT (expect 46,
 * cudaErrorDevicesUnavailable / CUDA_ERROR_DEVICE_UNAVAILABLE) or without a
 * device node (expect 100, cudaErrorNoDevice). Usage: failure_test EXPECTED
 */
#include <stdio.h>
#include <stdlib.h>

int cudaGetDeviceCount(int *);
int cudaMalloc(void **, size_t);
int cudaDeviceSynchronize(void);
int cudaGetLastError(void);
int cudaMallocHost(void **, size_t);
int cuInit(unsigned);
int cuDriverGetVersion(int *);
int nvmlInit_v2(void);

int main(int argc, char **argv)
{
	int want = argc > 1 ? atoi(argv[1]) : 46, bad = 0, n, v = 0;
	void *p;
#define EXPECT(call, val)                                                         \
	do {                                                                      \
		int r_ = (call);                                                  \
		if (r_ != (val)) {                                                \
			printf("FAIL %s = %d, want %d\n", #call, r_, (int)(val)); \
			bad++;                                                    \
		}                                                                 \
	} while (0)
	EXPECT(cudaGetDeviceCount(&n), want);
	EXPECT(cudaMalloc(&p, 16), want);
	EXPECT(cudaGetLastError(), want);
	EXPECT(cudaDeviceSynchronize(), want);
	EXPECT(cudaMallocHost(&p, 16), want);
	EXPECT(cuInit(0), want == 100 ? 100 : 46);
	EXPECT(cuDriverGetVersion(&v), 0); /* answered locally */
	EXPECT(nvmlInit_v2(), 9);          /* NVML_ERROR_DRIVER_NOT_LOADED */
	printf("%s no backend (%d): errors, no exit\n", bad ? "FAIL" : "ok  ", want);
	return bad;
}
