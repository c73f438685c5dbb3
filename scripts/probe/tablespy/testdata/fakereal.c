/*
 * fakereal.c - a stand-in "real driver" for tablespy's ABI test (test.sh): it serves
 * cuGetExportTable for two made-up UUIDs and cuGetProcAddress(_v2) for that one name.
 *   00..01 (sized, 6 words): 1 sum of 8 integer and 2 double arguments (stack
 *          arguments and vector registers must survive the trampoline); 2 writes
 *          0x11 x 32 through its pointer; 3 NULL; 4 a data word (not code); 5 writes
 *          a pointer to 32 bytes of 0x22 through its pointer
 *   02..03 (no size word): 2 functions, then NULL
 * Everything else asked: CUDA_ERROR_INVALID_VALUE.
 */
#include <string.h>

typedef int CUresult;

static long sum(long a, long b, long c, long d, long e, long f, long g, long h, double x, double y)
{
	return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + (long)(x * 100) + (long)(y * 1000);
}

static CUresult fill(unsigned char *p)
{
	memset(p, 0x11, 32);
	return 7;
}

static const unsigned char object[32] = {0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
					  0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
					  0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22};
static CUresult give(const void **out)
{
	*out = object;
	return 0;
}

static double half(double x) { return x / 2; }
static int seven(void) { return 7; }

static const int some_data = 42;
static const void *const sized[6] = {(const void *)(6 * sizeof(void *)), (const void *)sum,
				     (const void *)fill, NULL, (const void *)&some_data, (const void *)give};
static const void *const unsized[3] = {(const void *)half, (const void *)seven, NULL};

__attribute__((visibility("default"))) CUresult cuGetExportTable(const void **t, const unsigned char *uuid)
{
	static const unsigned char u0[16] = {0, 1}, u1[16] = {2, 3};
	if (!t || !uuid)
		return 1;
	if (!memcmp(uuid, u0, 16))
		*t = sized;
	else if (!memcmp(uuid, u1, 16))
		*t = unsized;
	else {
		*t = NULL;
		return 1;
	}
	return 0;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *s, void **pfn, int v,
								     unsigned long long fl, int *st)
{
	if (!strcmp(s, "cuGetExportTable")) {
		*pfn = (void *)cuGetExportTable;
		return 0;
	}
	*pfn = NULL;
	if (st)
		*st = 1;
	return 0;
}
