/*
 * library_test.c - context-independent libraries (cuLibrary*, cuKernel*)
 * against libcuda.so.1: vgpu's (sim in CI, the GPU through vgpu serve) or
 * NVIDIA's, which is the reference (scripts/gpu-lazy-libraries.sh runs
 * both). Written with its own declarations, as driver_prog.c.
 *
 *   library_test [--no-exec] FATBIN
 *
 * FATBIN is library_kernels.cu built by nvcc -fatbin for the GPU; the same
 * image is embedded in this program (-DKERNELS_FATBIN='"path"', .rodata, where
 * NVIDIA's runtime's images live) and a second one with code for sm_86
 * only (-DSM86_FATBIN='"path"'), which no 9.x GPU runs. --no-exec: the device
 * does not run kernels (sim), so results are not compared.
 * CUDA_MODULE_LOADING=EAGER runs the same cases eagerly (" (eager)").
 *
 * On vgpu with VGPU_STATS=1, vgpuRoundTrips() counts the synchronous round
 * trips around each step to show that a library costs none until a kernel
 * of it is used (LAZY); natively those checks are skipped.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *CUlib;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuDevicePrimaryCtxReset(int);
CUresult cuCtxSetCurrent(void *);
CUresult cuCtxGetCurrent(void **);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuMemAlloc_v2(unsigned long long *, size_t);
CUresult cuMemFree_v2(unsigned long long);
CUresult cuMemcpyHtoD_v2(unsigned long long, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
			void **);
CUresult cuFuncGetAttribute(int *, int, void *);
CUresult cuFuncGetParamInfo(void *, size_t, size_t *, size_t *);
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *, void *, int, size_t);
CUresult cuLibraryLoadData(CUlib *, const void *, void *, void **, unsigned, void *, void **, unsigned);
CUresult cuLibraryLoadFromFile(CUlib *, const char *, void *, void **, unsigned, void *, void **, unsigned);
CUresult cuLibraryUnload(CUlib);
CUresult cuLibraryGetKernel(void **, CUlib, const char *);
CUresult cuLibraryGetModule(void **, CUlib);
CUresult cuLibraryGetGlobal(unsigned long long *, size_t *, CUlib, const char *);
CUresult cuKernelGetFunction(void **, void *);
CUresult cuKernelGetLibrary(CUlib *, void *);
CUresult cuKernelGetName(const char **, void *);
CUresult cuKernelGetAttribute(int *, int, void *, int);
CUresult cuKernelGetParamInfo(void *, size_t, size_t *, size_t *);

/* The images, in this program's read-only data (-DKERNELS_FATBIN='"path"'). */
__asm__(".section .rodata\n"
	".balign 64\n"
	"kernels_fatbin:\n"
	".incbin \"" KERNELS_FATBIN "\"\n"
	"kernels_fatbin_end:\n"
	".balign 64\n"
	"sm86_fatbin:\n"
	".incbin \"" SM86_FATBIN "\"\n"
	"sm86_fatbin_end:\n"
	".previous\n");
extern const unsigned char kernels_fatbin[], kernels_fatbin_end[], sm86_fatbin[];

enum { NO_BINARY_FOR_GPU = 209, FILE_NOT_FOUND = 301, INVALID_HANDLE = 400, NOT_FOUND = 500 };
#define N 1024

static int failed, exec_on = 1, eager;
static int dev;
static const char *fatbin_path;
static uint64_t (*round_trips)(void); /* vgpu's, with VGPU_STATS=1; NULL natively */

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
			failed = 1;                                                \
			return;                                                    \
		}                                                                  \
	} while (0)
#define OK(call)                                                                           \
	do {                                                                               \
		CUresult r_ = (call);                                                      \
		if (r_) {                                                                  \
			fprintf(stderr, "  FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_); \
			failed = 1;                                                        \
			return;                                                            \
		}                                                                          \
	} while (0)

static uint64_t rt(void)
{
	return round_trips ? round_trips() : 0;
}

static int counting(void)
{
	return round_trips && round_trips() > 0; /* VGPU_STATS is on: the handshake counted */
}

/* Launches scale(x, a, N) through k (a CUkernel cast to a CUfunction, or a
 * CUfunction) and, where kernels run, checks x. */
static CUresult scale_check(void *k, float a, const char *what)
{
	float h[N];
	unsigned long long x;
	CUresult r;
	for (int i = 0; i < N; i++)
		h[i] = (float)i;
	if ((r = cuMemAlloc_v2(&x, sizeof h)) || (r = cuMemcpyHtoD_v2(x, h, sizeof h)))
		return r;
	int n = N;
	void *args[] = {&x, &a, &n};
	if ((r = cuLaunchKernel(k, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL)) || (r = cuCtxSynchronize()) ||
	    (r = cuMemcpyDtoH_v2(h, x, sizeof h))) {
		cuMemFree_v2(x);
		return r;
	}
	cuMemFree_v2(x);
	for (int i = 0; exec_on && i < N; i++)
		if (h[i] != (float)i * a) {
			fprintf(stderr, "  %s: x[%d] = %g, want %g\n", what, i, h[i], (float)i * a);
			return 999;
		}
	return 0;
}

static void setup(void)
{
	void *ctx;
	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));
}

/* Loading a library costs no round trip (lazy) and asking for its kernels
 * none either; the first launch of a kernel loads the library, the next
 * launches nothing more; a library never used unloads with no round trip. */
static void lazy_load(void)
{
	CUlib lib[3];
	void *k[3], *k2;
	uint64_t t0 = rt();
	for (int i = 0; i < 3; i++)
		OK(cuLibraryLoadData(&lib[i], kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	uint64_t t1 = rt();
	if (counting())
		CHECK(eager ? t1 > t0 : t1 == t0);
	for (int i = 0; i < 3; i++)
		OK(cuLibraryGetKernel(&k[i], lib[i], "scale"));
	OK(cuLibraryGetKernel(&k2, lib[0], "scale"));
	CHECK(k2 == k[0]); /* one handle per kernel */
	CHECK(k[1] != k[0]);
	if (counting())
		CHECK(rt() == t1);
	/* the first launch loads the library and looks the kernel up (lazily;
	 * eagerly the lookup only), the next is queued with no round trip */
	void *args[3];
	unsigned long long x;
	float a = 1.0f;
	int n = 0;
	OK(cuMemAlloc_v2(&x, 4));
	args[0] = &x, args[1] = &a, args[2] = &n;
	uint64_t t2 = rt();
	OK(cuLaunchKernel(k[0], 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
	uint64_t t3 = rt();
	if (counting())
		CHECK(t3 >= t2 + (eager ? 1 : 2));
	OK(cuLaunchKernel(k[0], 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
	if (counting())
		CHECK(rt() == t3);
	OK(cuCtxSynchronize());
	OK(cuMemFree_v2(x));
	OK(scale_check(k[0], 3.0f, "lazily loaded"));
	uint64_t t4 = rt();
	OK(cuLibraryUnload(lib[1]));
	OK(cuLibraryUnload(lib[2]));
	if (counting() && !eager)
		CHECK(rt() == t4); /* never loaded: nothing to unload on the host */
	OK(cuLibraryUnload(lib[0]));
}

/* An image outside any loaded object is copied: the caller may free it. */
static void copied_image(void)
{
	size_t n = (size_t)(kernels_fatbin_end - kernels_fatbin);
	unsigned char *img = malloc(n);
	CUlib lib;
	void *k;
	CHECK(img);
	memcpy(img, kernels_fatbin, n);
	CUresult r = cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0);
	memset(img, 0, n);
	free(img);
	OK(r);
	OK(cuLibraryGetKernel(&k, lib, "scale"));
	OK(scale_check(k, 2.0f, "copied image"));
	OK(cuLibraryUnload(lib));
}

/* An image with no code for the GPU: cuModuleLoadData refuses it at once;
 * a library accepts it and fails at the first use of a kernel, lazily and
 * eagerly alike (NVIDIA's driver on the H100). */
static void missing_arch(void)
{
	void *mod, *k, *f;
	CUlib lib;
	CHECK(cuModuleLoadData(&mod, sm86_fatbin) == NO_BINARY_FOR_GPU);
	OK(cuLibraryLoadData(&lib, sm86_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CUresult r = cuLibraryGetKernel(&k, lib, "scale");
	if (r == 0) {
		CHECK(cuKernelGetFunction(&f, k) == NO_BINARY_FOR_GPU);
		CHECK(scale_check(k, 2.0f, "no code for the GPU") == NO_BINARY_FOR_GPU);
	} else {
		fprintf(stderr, "  note: cuLibraryGetKernel answered %d\n", r);
		CHECK(r == NO_BINARY_FOR_GPU);
	}
	OK(cuLibraryUnload(lib));
}

/* A CUkernel goes where a CUfunction goes for launches and occupancy;
 * cuFuncGetAttribute and cuFuncGetParamInfo take functions only (the H100's
 * driver answers CUDA_ERROR_INVALID_HANDLE); the library's module and
 * globals load it. */
static void kernel_as_function(void)
{
	CUlib lib, lib2;
	void *k, *kb, *f, *f2, *mod;
	const char *name;
	int v = 0, v2 = 0, nb = 0;
	size_t off = 0, sz = 0;
	OK(cuLibraryLoadData(&lib, kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&k, lib, "scale"));
	/* the H100's driver: 400 for a CUkernel in cuFuncGetAttribute */
	CHECK(cuFuncGetAttribute(&v, 0, k) == INVALID_HANDLE);
	OK(cuKernelGetAttribute(&v2, 0, k, dev)); /* MAX_THREADS_PER_BLOCK */
	CHECK(v2 > 0);
	CHECK(cuFuncGetParamInfo(k, 1, &off, &sz) == INVALID_HANDLE);
	OK(cuKernelGetParamInfo(k, 1, &off, &sz));
	CHECK(off == 8 && sz == 4);
	OK(cuKernelGetFunction(&f, k));
	off = sz = 0;
	OK(cuFuncGetParamInfo(f, 2, &off, &sz));
	CHECK(off == 12 && sz == 4);
	OK(cuKernelGetName(&name, k));
	CHECK(!strcmp(name, "scale"));
	OK(cuKernelGetLibrary(&lib2, k));
	CHECK(lib2 == lib);
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, 256, 0));
	CHECK(nb > 0);
	OK(cuLibraryGetModule(&mod, lib));
	OK(cuModuleGetFunction(&f2, mod, "add_bias"));
	unsigned long long bias;
	size_t bsz = 0;
	OK(cuLibraryGetGlobal(&bias, &bsz, lib, "bias"));
	CHECK(bsz == 4 * sizeof(float));
	OK(scale_check(k, 0.5f, "kernel as function"));
	OK(scale_check(f, 4.0f, "the kernel's function"));
	/* a name the image lacks: NOT_FOUND (vgpu: at the kernel's first use) */
	CUresult r = cuLibraryGetKernel(&kb, lib, "no_such_kernel");
	if (r == 0)
		CHECK(cuKernelGetFunction(&f2, kb) == NOT_FOUND);
	else
		CHECK(r == NOT_FOUND);
	OK(cuLibraryUnload(lib));
}

/* cuLibraryLoadFromFile; a missing file. */
static void from_file(void)
{
	CUlib lib;
	void *k;
	OK(cuLibraryLoadFromFile(&lib, fatbin_path, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&k, lib, "scale"));
	OK(scale_check(k, 5.0f, "from a file"));
	OK(cuLibraryUnload(lib));
	CHECK(cuLibraryLoadFromFile(&lib, "/nonexistent/k.fatbin", NULL, NULL, 0, NULL, NULL, 0) == FILE_NOT_FOUND);
}

/* A library outlives a reset of the primary context: it loads again in the
 * new one. */
static void reset(void)
{
	CUlib lib;
	void *k, *ctx;
	OK(cuLibraryLoadData(&lib, kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&k, lib, "scale"));
	OK(scale_check(k, 2.0f, "before the reset"));
	OK(cuDevicePrimaryCtxReset(dev));
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));
	OK(scale_check(k, 3.0f, "after the reset"));
	OK(cuLibraryUnload(lib));
}

struct thread_arg {
	CUlib lib;
	void *ctx, *k;
	CUresult rc;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	unsigned long long x = 0;
	float f = 1.0f;
	int n = 0;
	void *args[] = {&x, &f, &n};
	CUresult r = cuCtxSetCurrent(a->ctx);
	if (!r)
		r = cuLibraryGetKernel(&a->k, a->lib, "scale");
	for (int i = 0; !r && i < 20; i++)
		r = cuLaunchKernel(a->k, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
	if (!r)
		r = cuCtxSynchronize();
	a->rc = r;
	return NULL;
}

/* Threads share a library: at once they ask for a kernel and launch it;
 * each gets the same handle and every launch runs. */
static void threads(void)
{
	enum { T = 8 };
	pthread_t t[T];
	struct thread_arg a[T];
	CUlib lib;
	void *ctx;
	OK(cuCtxGetCurrent(&ctx));
	OK(cuLibraryLoadData(&lib, kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	for (int i = 0; i < T; i++) {
		a[i] = (struct thread_arg){lib, ctx, NULL, -1};
		CHECK(pthread_create(&t[i], NULL, thread_main, &a[i]) == 0);
	}
	for (int i = 0; i < T; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < T; i++) {
		OK(a[i].rc);
		CHECK(a[i].k == a[0].k);
	}
	OK(cuLibraryUnload(lib));
}

int main(int argc, char **argv)
{
	int i = 1;
	if (i < argc && !strcmp(argv[i], "--no-exec")) {
		exec_on = 0;
		i++;
	}
	if (i != argc - 1) {
		fprintf(stderr, "usage: library_test [--no-exec] FATBIN\n");
		return 2;
	}
	fatbin_path = argv[i];
	const char *m = getenv("CUDA_MODULE_LOADING");
	eager = m && !strcmp(m, "EAGER");
	round_trips = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "vgpuRoundTrips");
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"setup", setup},
		{"lazy_load", lazy_load},
		{"copied_image", copied_image},
		{"missing_arch", missing_arch},
		{"kernel_as_function", kernel_as_function},
		{"from_file", from_file},
		{"threads", threads},
		{"reset", reset},
	};
	int fails = 0;
	for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
		failed = 0;
		tests[t].fn();
		printf("%s %s%s\n", failed ? "FAIL" : "ok  ", tests[t].name, eager ? " (eager)" : "");
		fflush(stdout);
		fails += failed;
		if (failed && t == 0)
			break; /* nothing runs without a context */
	}
	return fails;
}
