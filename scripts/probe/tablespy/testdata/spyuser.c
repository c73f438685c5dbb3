/*
 * spyuser.c - tablespy's ABI test program (test.sh): reaches cuGetExportTable the way
 * NVIDIA's runtime does (dlopen("libcuda.so.1"), cuGetProcAddress_v2), and calls the
 * slots of fakereal.c's tables through the spy's trampolines. Exit status: failed checks.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*get_t)(const void **, const unsigned char *);

static int fails;
#define CHECK(c)                                                      \
	do {                                                          \
		if (!(c)) {                                           \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
			fails++;                                      \
		}                                                     \
	} while (0)

int main(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CHECK(h);
	if (!h)
		return 1;
	gpa2_t gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
	get_t direct = (get_t)dlsym(h, "cuGetExportTable"), get = NULL;
	int st = -1;
	CHECK(gpa2 && gpa2("cuGetExportTable", (void **)&get, 12000, 0, &st) == 0);
	CHECK(get == direct); /* the spy's own, not the real one */
	if (!get)
		return 1;
	static const unsigned char u0[16] = {0, 1}, u1[16] = {2, 3}, bad[16] = {9};
	const void **t = NULL;
	CHECK(get((const void **)&t, u0) == 0 && t);
	const void **t2 = NULL;
	CHECK(get((const void **)&t2, u0) == 0 && t2 == t); /* one copy per table */
	CHECK((size_t)t[0] == 6 * sizeof(void *));
	long (*sum)(long, long, long, long, long, long, long, long, double, double) =
		(long (*)(long, long, long, long, long, long, long, long, double, double))t[1];
	for (int i = 0; i < 25; i++) /* past the default limit of 20 logged calls */
		CHECK(sum(1, 2, 3, 4, 5, 6, 7, 8 + i, 0.5, 0.25) == 1 + 4 + 9 + 16 + 25 + 36 + 49 + 8 * (8 + i) + 50 + 250);
	unsigned char buf[32] = {0};
	CHECK(((int (*)(unsigned char *))t[2])(buf) == 7 && buf[0] == 0x11 && buf[31] == 0x11);
	CHECK(t[3] == NULL);
	CHECK(*(const int *)t[4] == 42); /* data copied, not wrapped */
	const unsigned char *obj = NULL;
	CHECK(((int (*)(const unsigned char **))t[5])(&obj) == 0 && obj && obj[0] == 0x22);
	const void **u = NULL;
	CHECK(get((const void **)&u, u1) == 0 && u);
	CHECK(((double (*)(double))u[0])(3.0) == 1.5);
	CHECK(((int (*)(void))u[1])() == 7);
	CHECK(u[2] == NULL);
	const void **n = (const void **)1;
	CHECK(get((const void **)&n, bad) == 1 && n == NULL);
	printf("spyuser: %d failed\n", fails);
	return fails;
}
