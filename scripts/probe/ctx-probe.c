/*
 * ctx-probe.c - what a sticky error in one CUDA context of a process does to
 * the process's other contexts, and what a context costs to start. Facts for
 * the choice of the isolation mechanism (docs/RELIABILITY.md). GPU machine
 * only: cc -O1 -I/usr/local/cuda/include ctx-probe.c -lcuda; ./a.out kernels.ptx
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if CUDA_VERSION >= 12050
#define CTX_CREATE(pc, fl, d) cuCtxCreate(pc, NULL, fl, d)
#else
#define CTX_CREATE(pc, fl, d) cuCtxCreate(pc, fl, d)
#endif

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#define CK(x) do { CUresult r_ = (x); if (r_) printf("  %-60s -> %d\n", #x, r_); } while (0)

struct ctx {
	CUcontext c;
	CUmodule m;
	CUfunction good, illegal, asserting, spin;
	CUdeviceptr buf;
	CUstream s;
};

static char *ptx;

static CUresult open_ctx(struct ctx *x, CUdevice d)
{
	CUresult r = CTX_CREATE(&x->c, 0, d);
	if (r)
		return r;
	if ((r = cuModuleLoadData(&x->m, ptx)))
		return r;
	cuModuleGetFunction(&x->good, x->m, "good");
	cuModuleGetFunction(&x->illegal, x->m, "illegal");
	cuModuleGetFunction(&x->asserting, x->m, "asserting");
	cuModuleGetFunction(&x->spin, x->m, "spin");
	cuStreamCreate(&x->s, CU_STREAM_NON_BLOCKING);
	return cuMemAlloc(&x->buf, 4096);
}

/* runs good() in x and checks the result; returns the first error */
static CUresult check(struct ctx *x, unsigned v)
{
	CUresult r = cuCtxSetCurrent(x->c);
	if (r)
		return r;
	void *args[] = {&x->buf, &v};
	if ((r = cuLaunchKernel(x->good, 1, 1, 1, 32, 1, 1, 0, x->s, args, NULL)))
		return r;
	if ((r = cuStreamSynchronize(x->s)))
		return r;
	unsigned h[32];
	if ((r = cuMemcpyDtoH(h, x->buf, sizeof h)))
		return r;
	for (int i = 0; i < 32; i++)
		if (h[i] != v + (unsigned)i)
			return (CUresult)9999;
	return CUDA_SUCCESS;
}

static void scenario(const char *what, CUdevice d, int kind)
{
	struct ctx a, b;
	printf("%s\n", what);
	CK(open_ctx(&a, d));
	CK(open_ctx(&b, d));
	/* b runs a long kernel while a faults */
	cuCtxSetCurrent(b.c);
	unsigned long long cycles = 2000000000ull; /* ~1 s */
	void *sargs[] = {&cycles, &b.buf};
	CK(cuLaunchKernel(b.spin, 1, 1, 1, 32, 1, 1, 0, b.s, sargs, NULL));
	cuCtxSetCurrent(a.c);
	CUresult r;
	if (kind == 0) {
		void *args[] = {&a.buf};
		r = cuLaunchKernel(a.illegal, 1, 1, 1, 1, 1, 1, 0, a.s, args, NULL);
	} else {
		int one = 1;
		void *args[] = {&one};
		r = cuLaunchKernel(a.asserting, 1, 1, 1, 1, 1, 1, 0, a.s, args, NULL);
	}
	printf("  faulting launch %d, its sync %d\n", r, cuStreamSynchronize(a.s));
	printf("  faulting ctx again: check %d\n", check(&a, 5));
	cuCtxSetCurrent(b.c);
	r = cuStreamSynchronize(b.s);
	unsigned h[32] = {0};
	CUresult r2 = cuMemcpyDtoH(h, b.buf, sizeof h);
	printf("  sibling's running spin kernel: sync %d, copy %d, value %u (want 42)\n", r, r2, h[0]);
	printf("  sibling ctx after: check %d\n", check(&b, 100));
	struct ctx c;
	CUresult oc = open_ctx(&c, d);
	printf("  new ctx in same process after: open %d check %d\n", oc, oc ? oc : check(&c, 200));
	printf("  destroy faulting ctx %d\n", cuCtxDestroy(a.c));
	printf("  sibling after destroy: check %d\n", check(&b, 300));
	cuCtxDestroy(b.c);
	if (!oc)
		cuCtxDestroy(c.c);
	/* primary context afterwards */
	CUcontext p;
	CK(cuDevicePrimaryCtxRetain(&p, d));
	cuCtxSetCurrent(p);
	CUdeviceptr x;
	printf("  primary ctx alloc after: %d\n", cuMemAlloc(&x, 1024));
	cuDevicePrimaryCtxRelease(d);
}

int main(int argc, char **argv)
{
	double t0 = now();
	if (argc < 2)
		return 2;
	FILE *f = fopen(argv[1], "rb");
	if (!f)
		return 2;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	ptx = calloc(1, (size_t)n + 1);
	if (fread(ptx, 1, (size_t)n, f) != (size_t)n)
		return 2;
	fclose(f);
	CUresult r = cuInit(0);
	double t1 = now();
	CUdevice d;
	cuDeviceGet(&d, 0);
	CUcontext c;
	r = CTX_CREATE(&c, 0, d);
	double t2 = now();
	CUdeviceptr x;
	cuMemAlloc(&x, 1 << 20);
	double t3 = now();
	printf("start: cuInit %.1f ms (rc %d), first cuCtxCreate %.1f ms, first cuMemAlloc %.1f ms\n", (t1 - t0) * 1e3, r,
	       (t2 - t1) * 1e3, (t3 - t2) * 1e3);
	double t4 = now();
	CUcontext c2;
	CTX_CREATE(&c2, 0, d);
	printf("second cuCtxCreate %.1f ms\n", (now() - t4) * 1e3);
	size_t fr, tot;
	cuMemGetInfo(&fr, &tot);
	printf("free after 2 ctx: %zu MiB of %zu\n", fr >> 20, tot >> 20);
	cuCtxDestroy(c2);
	cuCtxDestroy(c);
	const char *which = argc > 2 ? argv[2] : "both";
	if (strcmp(which, "assert"))
		scenario("illegal address in ctx A, ctx B beside it:", d, 0);
	if (strcmp(which, "illegal"))
		scenario("device assert in ctx A, ctx B beside it:", d, 1);
	return 0;
}
