/*
 * driver_prog.c - a driver-API program that loads a module file (.fatbin,
 * .cubin or .ptx, built by nvcc from driver_kernels.cu) with cuModuleLoad,
 * looks up a kernel and a global, and launches. Written against libcuda.so.1
 * only, with its own declarations. Usage: driver_prog FILE
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuModuleLoad(void **, const char *);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleUnload(void *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuModuleGetGlobal_v2(unsigned long long *, size_t *, void *, const char *);
CUresult cuMemAlloc_v2(unsigned long long *, size_t);
CUresult cuMemcpyHtoD_v2(unsigned long long, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
			void **);
CUresult cuCtxSynchronize(void);
CUresult cuFuncGetAttribute(int *, int, void *);
CUresult cuGetErrorName(CUresult, const char **);

#define TRY(call)                                                                   \
	do {                                                                        \
		CUresult r_ = (call);                                               \
		if (r_) {                                                           \
			const char *n_ = "?";                                       \
			cuGetErrorName(r_, &n_);                                    \
			fprintf(stderr, "%s:%d: %s = %s\n", argv[1], __LINE__, #call, n_); \
			return 1;                                                   \
		}                                                                   \
	} while (0)

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	int dev, maxt;
	void *ctx, *mod, *fn;
	unsigned long long x, y, tbl;
	size_t tsz;
	float hx[1024], hy[1024];
	TRY(cuInit(0));
	TRY(cuDeviceGet(&dev, 0));
	TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
	TRY(cuCtxSetCurrent(ctx));
	TRY(cuModuleLoad(&mod, argv[1]));
	TRY(cuModuleGetFunction(&fn, mod, "saxpy"));
	TRY(cuModuleGetGlobal_v2(&tbl, &tsz, mod, "table"));
	if (tsz != 256 * sizeof(float)) {
		fprintf(stderr, "%s: table is %zu bytes\n", argv[1], tsz);
		return 1;
	}
	TRY(cuFuncGetAttribute(&maxt, 0, fn));
	TRY(cuMemAlloc_v2(&x, sizeof hx));
	TRY(cuMemAlloc_v2(&y, sizeof hy));
	for (int i = 0; i < 1024; i++)
		hx[i] = (float)i;
	TRY(cuMemcpyHtoD_v2(x, hx, sizeof hx));
	TRY(cuMemcpyHtoD_v2(tbl, hx, 256 * sizeof(float)));
	float a = 2.0f;
	int n = 1024;
	void *args[] = {&a, &x, &y, &n};
	TRY(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	TRY(cuCtxSynchronize());
	TRY(cuMemcpyDtoH_v2(hy, tbl, 256 * sizeof(float)));
	if (memcmp(hx, hy, 256 * sizeof(float))) {
		fprintf(stderr, "%s: global read back wrong\n", argv[1]);
		return 1;
	}
	/* the same image from memory: the library finds its size itself */
	FILE *f = fopen(argv[1], "rb");
	static char img[1 << 20];
	size_t len = f ? fread(img, 1, sizeof img - 1, f) : 0;
	if (f)
		fclose(f);
	void *mod2, *fn2;
	TRY(len > 0 ? 0 : 1);
	TRY(cuModuleLoadData(&mod2, img));
	TRY(cuModuleGetFunction(&fn2, mod2, "saxpy"));
	TRY(cuModuleUnload(mod2));
	printf("%s: loaded, launched (max %d threads per block)\n", argv[1], maxt);
	return 0;
}
