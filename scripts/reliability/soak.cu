// soak.cu - vgpu's reliability load generator (docs/RELIABILITY.md).
//
// An ordinary CUDA program (nvcc -cudart shared). Each of --streams streams
// owns pinned host buffers, two device buffers and an event; every round,
// on every stream, without synchronizing in between:
//   H2D (pinned, async) -> D2D -> cudaMemsetAsync of a moving sub-range ->
//   [a kernel that bumps a counter, with --launch] -> D2H -> event record;
// then each stream's event is synchronized and every byte of the result is
// compared with what the pattern and the memset say it must be. Every
// --pageable-every rounds a synchronous round trip from malloc'd (pageable)
// memory goes through the same checks. Any CUDA error or a single wrong byte
// fails the run.
//
//   soak [--seconds S (0: until killed)] [--streams M] [--bytes N] [--seed K]
//        [--launch] [--pageable-every K] [--ready-file F]
//   soak --meminfo          print "MEMINFO <free> <total>" (cudaMemGetInfo)
//   soak --alloc N          cudaMalloc(N): print "ALLOC <N> <cudaError>" and
//                           exit 0 whatever the result (quota tests)
//
// Last line: "PASS soak" or "FAIL soak: <why>"; before it a "SOAK ..." line
// with rounds, calls, bytes moved, bytes checked, corrupt bytes and rates.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned long long g_calls;

#define CK(call)                                                                        \
	do {                                                                                \
		cudaError_t e_ = (call);                                                        \
		g_calls++;                                                                      \
		if (e_ != cudaSuccess) {                                                        \
			printf("FAIL soak: %s at %s:%d: %s (%d) %s\n", #call, __FILE__, __LINE__,   \
			       cudaGetErrorName(e_), (int)e_, cudaGetErrorString(e_));              \
			fflush(stdout);                                                             \
			exit(1);                                                                    \
		}                                                                               \
	} while (0)

__global__ void bump(unsigned *ctr) { atomicAdd(ctr, 1u); }

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

// fill writes the pattern for (seed, round, stream) into b.
static void fill(void *b, size_t n, uint64_t seed, uint64_t round, int s)
{
	uint64_t x = (seed * 0x9E3779B97F4A7C15ull) ^ (round * 0xBF58476D1CE4E5B9ull) ^ ((uint64_t)s << 48) ^ 1;
	uint64_t *w = (uint64_t *)b;
	for (size_t i = 0; i < n / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		w[i] = x;
	}
	for (size_t i = n / 8 * 8; i < n; i++)
		((unsigned char *)b)[i] = (unsigned char)(x >> (i % 8));
}

// memset range of round r in an n-byte buffer.
static void mrange(size_t n, uint64_t r, size_t *off, size_t *len, int *val)
{
	*off = (size_t)((r * 4099) % (n / 2));
	*len = (size_t)(1 + (r * 131) % (n / 4));
	*val = (int)((r * 37 + 11) & 0xff);
}

// check compares got with the expected bytes; returns the number of bad bytes.
static unsigned long long check(const unsigned char *got, unsigned char *want, size_t n, uint64_t seed, uint64_t r, int s)
{
	size_t off, len;
	int val;
	fill(want, n, seed, r, s);
	mrange(n, r, &off, &len, &val);
	memset(want + off, val, len);
	if (memcmp(got, want, n) == 0)
		return 0;
	unsigned long long bad = 0;
	size_t first = n;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i]) {
			bad++;
			if (first == n)
				first = i;
		}
	printf("corrupt: stream %d round %llu: %llu bytes differ, first at %zu (got %02x want %02x)\n", s,
	       (unsigned long long)r, bad, first, got[first], want[first]);
	return bad;
}

int main(int argc, char **argv)
{
	double seconds = 10;
	int streams = 4, launch = 0, pageableEvery = 4;
	size_t n = 1 << 20;
	uint64_t seed = (uint64_t)getpid();
	const char *readyFile = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--meminfo")) {
			size_t f, t;
			CK(cudaMemGetInfo(&f, &t));
			printf("MEMINFO %zu %zu\n", f, t);
			return 0;
		} else if (!strcmp(a, "--alloc") && v) {
			void *p = NULL;
			size_t sz = strtoull(v, NULL, 0);
			cudaError_t e = cudaMalloc(&p, sz);
			printf("ALLOC %zu %d %s\n", sz, (int)e, cudaGetErrorName(e));
			if (e == cudaSuccess) {
				CK(cudaMemset(p, 0x5a, sz < 4096 ? sz : 4096));
				CK(cudaFree(p));
			}
			return 0;
		} else if (!strcmp(a, "--seconds") && v) {
			seconds = atof(v), i++;
		} else if (!strcmp(a, "--streams") && v) {
			streams = atoi(v), i++;
		} else if (!strcmp(a, "--bytes") && v) {
			n = strtoull(v, NULL, 0), i++;
		} else if (!strcmp(a, "--seed") && v) {
			seed = strtoull(v, NULL, 0), i++;
		} else if (!strcmp(a, "--pageable-every") && v) {
			pageableEvery = atoi(v), i++;
		} else if (!strcmp(a, "--ready-file") && v) {
			readyFile = v, i++;
		} else if (!strcmp(a, "--launch")) {
			launch = 1;
		} else {
			fprintf(stderr, "usage: see the comment atop soak.cu (bad argument %s)\n", a);
			return 2;
		}
	}
	if (n < 64)
		n = 64;
	if (streams < 1 || streams > 64)
		streams = 4;

	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int sim = strstr(prop.name, "vgpu-sim") != NULL;

	cudaStream_t *st = (cudaStream_t *)calloc(streams, sizeof *st);
	cudaEvent_t *ev = (cudaEvent_t *)calloc(streams, sizeof *ev);
	unsigned char **hs = (unsigned char **)calloc(streams, sizeof *hs), **hd = (unsigned char **)calloc(streams, sizeof *hd);
	unsigned char **d1 = (unsigned char **)calloc(streams, sizeof *d1), **d2 = (unsigned char **)calloc(streams, sizeof *d2);
	unsigned char *want = (unsigned char *)malloc(n), *pg = (unsigned char *)malloc(n), *pgBack = (unsigned char *)malloc(n);
	unsigned *ctr;
	CK(cudaMalloc(&ctr, sizeof *ctr));
	CK(cudaMemset(ctr, 0, sizeof *ctr));
	for (int s = 0; s < streams; s++) {
		CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
		CK(cudaEventCreate(&ev[s]));
		CK(cudaMallocHost(&hs[s], n));
		CK(cudaMallocHost(&hd[s], n));
		CK(cudaMalloc(&d1[s], n));
		CK(cudaMalloc(&d2[s], n));
	}

	unsigned long long rounds = 0, moved = 0, checked = 0, corrupt = 0, launches = 0;
	double t0 = now();
	for (uint64_t r = 1;; r++) {
		for (int s = 0; s < streams; s++) {
			size_t off, len;
			int val;
			fill(hs[s], n, seed, r, s);
			memset(hd[s], 0xee, n);
			mrange(n, r, &off, &len, &val);
			CK(cudaMemcpyAsync(d1[s], hs[s], n, cudaMemcpyHostToDevice, st[s]));
			CK(cudaMemcpyAsync(d2[s], d1[s], n, cudaMemcpyDeviceToDevice, st[s]));
			CK(cudaMemsetAsync(d2[s] + off, val, len, st[s]));
			if (launch) {
				bump<<<1, 1, 0, st[s]>>>(ctr);
				CK(cudaGetLastError());
				launches++;
			}
			CK(cudaMemcpyAsync(hd[s], d2[s], n, cudaMemcpyDeviceToHost, st[s]));
			CK(cudaEventRecord(ev[s], st[s]));
			moved += 3 * n + len;
		}
		for (int s = 0; s < streams; s++) {
			CK(cudaEventSynchronize(ev[s]));
			corrupt += check(hd[s], want, n, seed, r, s);
			checked += n;
		}
		if (pageableEvery > 0 && r % pageableEvery == 0) {
			size_t off, len;
			int val;
			fill(pg, n, seed, r, 99);
			memset(pgBack, 0xee, n);
			mrange(n, r, &off, &len, &val);
			CK(cudaMemcpy(d1[0], pg, n, cudaMemcpyHostToDevice));
			CK(cudaMemset(d1[0] + off, val, len));
			CK(cudaMemcpy(pgBack, d1[0], n, cudaMemcpyDeviceToHost));
			corrupt += check(pgBack, want, n, seed, r, 99);
			checked += n;
			moved += 2 * n + len;
		}
		rounds++;
		if (rounds == 1) {
			printf("READY pid %d\n", (int)getpid());
			fflush(stdout);
			if (readyFile) {
				FILE *f = fopen(readyFile, "w");
				if (f)
					fclose(f);
			}
		}
		if (corrupt)
			break;
		if (seconds > 0 && now() - t0 >= seconds)
			break;
	}
	double el = now() - t0;
	const char *kern = launch ? "checked" : "none";
	if (launch) {
		unsigned c = 0;
		CK(cudaMemcpy(&c, ctr, sizeof c, cudaMemcpyDeviceToHost));
		if (sim) {
			kern = "not executed (sim)";
		} else if (c != (unsigned)launches) {
			printf("FAIL soak: the counter kernel ran %u times, %llu launched\n", c, launches);
			return 1;
		}
	}
	for (int s = 0; s < streams; s++) {
		CK(cudaEventDestroy(ev[s]));
		CK(cudaStreamDestroy(st[s]));
		CK(cudaFreeHost(hs[s]));
		CK(cudaFreeHost(hd[s]));
		CK(cudaFree(d1[s]));
		CK(cudaFree(d2[s]));
	}
	CK(cudaFree(ctr));
	printf("SOAK pid=%d streams=%d bytes=%zu rounds=%llu calls=%llu moved=%llu checked=%llu corrupt=%llu launches=%llu kernels=%s seconds=%.2f calls_per_s=%.0f bytes_per_s=%.0f\n",
	       (int)getpid(), streams, n, rounds, g_calls, moved, checked, corrupt, launches, kern, el, g_calls / el, moved / el);
	if (corrupt) {
		printf("FAIL soak: %llu corrupt bytes\n", corrupt);
		return 1;
	}
	printf("PASS soak\n");
	return 0;
}
