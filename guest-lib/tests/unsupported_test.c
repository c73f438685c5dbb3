/*
 * unsupported_test.c - calls every unsupported symbol of every library
 * (the generated lists, generated/<lib>.unsupported.h) and checks that it
 * returns the table's default: 801 for libcuda, 3 for NVML, nothing for
 * void stubs, and never crashes.
 * Run with LD_LIBRARY_PATH=build and no backend (stubs never connect).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct row {
	const char *name;
	int def;
};

#define VGPU_UNSUPPORTED(n, d) {n, d},
static const struct row cuda[] = {
#include "libcuda.so.1.unsupported.h"
};
static const struct row nvml[] = {
#include "libnvidia-ml.so.1.unsupported.h"
};

static int run(const char *lib, const struct row *rows, size_t n)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "FAIL dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		void *f = dlsym(h, rows[i].name);
		if (!f) {
			fprintf(stderr, "FAIL %s: %s missing\n", lib, rows[i].name);
			bad++;
			continue;
		}
		if (rows[i].def < 0) {
			((void (*)(void))f)();
			continue;
		}
		int r = ((int (*)(void))f)();
		if (r != rows[i].def) {
			fprintf(stderr, "FAIL %s: %s returned %d, want %d\n", lib, rows[i].name, r, rows[i].def);
			bad++;
		}
	}
	printf("%s %s: %zu unsupported symbols return their error\n", bad ? "FAIL" : "ok  ", lib, n);
	return bad;
}

#define RUN(lib, rows) run(lib, rows, sizeof rows / sizeof rows[0])

int main(void)
{
	int bad = 0;
	bad += RUN("libcuda.so.1", cuda);
	bad += RUN("libnvidia-ml.so.1", nvml);
	return bad != 0;
}
