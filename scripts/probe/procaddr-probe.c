/*
 * procaddr-probe.c - asks the real driver's cuGetProcAddress_v2 which symbol
 * it returns for every driver name, at every CUDA version and flag, and
 * prints one line per change point:
 *
 *   name  flags  version  symbol|-status
 *
 * ("-1" SYMBOL_NOT_FOUND, "-2" VERSION_NOT_SUFFICIENT, "!N" a CUresult).
 * The output is the fact table guest-lib/tables/procaddr.tbl is generated
 * from (scripts/gpu-probe.sh). Built and run on the GPU machine only.
 *
 *   cc -O1 -o probe procaddr-probe.c -ldl && ./probe names.txt
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*init_t)(unsigned);
typedef int (*ver_t)(int *);

static const int versions[] = {
	1000, 2000, 2010, 2020, 2030, 3000, 3010, 3020, 3050, 4000, 4010, 4020, 5000, 5050, 6000, 6050,
	7000, 7050, 8000, 9000, 9010, 9020, 10000, 10010, 10020, 11000, 11010, 11020, 11030, 11040,
	11050, 11060, 11070, 11080, 12000, 12010, 12020, 12030, 12040, 12050, 12060, 12080, 12090,
	13000, 13010, 13020, 14000,
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s names.txt\n", argv[0]);
		return 2;
	}
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	gpa2_t gpa = (gpa2_t)dlsym(lib, "cuGetProcAddress_v2");
	init_t init = (init_t)dlsym(lib, "cuInit");
	ver_t dver = (ver_t)dlsym(lib, "cuDriverGetVersion");
	int dv = 0;
	dver(&dv);
	printf("# driver %d, cuInit %d\n", dv, init(0));
	FILE *f = fopen(argv[1], "r");
	char name[256];
	while (f && fscanf(f, "%255s", name) == 1) {
		for (int fl = 0; fl < 3; fl += 2) {
			char prev[300] = "";
			for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
				void *p = (void *)0x1;
				int st = -99;
				int rc = gpa(name, &p, versions[i], (unsigned long long)fl, &st);
				char cur[300];
				if (rc)
					snprintf(cur, sizeof cur, "!%d", rc);
				else if (!p || st)
					snprintf(cur, sizeof cur, "-%d", st);
				else {
					Dl_info di;
					if (dladdr(p, &di) && di.dli_sname)
						snprintf(cur, sizeof cur, "%s", di.dli_sname);
					else
						snprintf(cur, sizeof cur, "?%p", p);
				}
				if (strcmp(cur, prev)) {
					printf("%s %d %d %s\n", name, fl, versions[i], cur);
					strcpy(prev, cur);
				}
			}
		}
	}
	/* misses through both entry points */
	void *p = (void *)0x1;
	int st = -99;
	printf("# v2 unknown name: rc %d status %d pfn %p\n", gpa("cuNoSuchThing", &p, 13000, 0, &st), st, p);
	p = (void *)0x1;
	printf("# v2 unknown name, NULL status: rc %d pfn %p\n", gpa("cuNoSuchThing", &p, 13000, 0, NULL), p);
	p = (void *)0x1;
	printf("# v2 _v2 name: rc %d status %d\n", gpa("cuMemAlloc_v2", &p, 13000, 0, &st), st);
	p = (void *)0x1;
	printf("# v2 empty name: rc %d status %d pfn %p\n", gpa("", &p, 0, 0, &st), st, p);
	typedef int (*gpa1_t)(const char *, void **, int, unsigned long long);
	gpa1_t gpa1 = (gpa1_t)dlsym(lib, "cuGetProcAddress");
	p = (void *)0x1;
	printf("# v1 unknown name: rc %d pfn %p\n", gpa1("cuNoSuchThing", &p, 13000, 0), p);
	p = (void *)0x1;
	printf("# v1 cuMemAlloc@3000: rc %d\n", gpa1("cuMemAlloc", &p, 3000, 0));
	return 0;
}
