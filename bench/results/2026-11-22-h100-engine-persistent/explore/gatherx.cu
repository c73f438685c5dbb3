// Exploration for issue 7, kept with its results (not part of the build):
// gather kernel variants against native pinned in the same run, and, in its
// last state, the persistent kernel of backend/engine/copy.cu (through
// copyx.cu, a macro-parameterised copy of it) fed by a CPU that publishes
// descriptors at a set rate. Earlier runs (explore/gatherx*-run*.md) used
// earlier states of this file; README.md says what each measured.
// Build and run from the repository root on the GPU machine:
//   nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/gatherx bench/results/2026-11-22-h100-engine-persistent/explore/gatherx.cu -lpthread -lcuda
//   /tmp/gatherx               # guest RAM from cudaHostAlloc
//   RAM_MMAP=1 /tmp/gatherx    # guest RAM as the backend has it: shared anonymous memory, registered
#include <cuda_runtime.h>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <pthread.h>
#include <atomic>
#include <algorithm>
#include <vector>
#include <chrono>
#include <thread>
#include <sys/mman.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)

struct Desc { uint64_t dst, src, len; };
#define KNS a
#define EXP_CACHE 1
#define EXP_LOAD 0
#define EXP_VEC_ONLY 0
#define EXP_SCALE 40
#define EXP_G 4
#define EXP_CAP 8000
#include "copyx.cu"
#define KNS b
#define EXP_CACHE 1
#define EXP_LOAD 0
#define EXP_VEC_ONLY 0
#define EXP_SCALE 20
#define EXP_G 4
#define EXP_CAP 64000
#include "copyx.cu"
#define KNS c
#define EXP_CACHE 1
#define EXP_LOAD 0
#define EXP_VEC_ONLY 0
#define EXP_SCALE 40
#define EXP_G 4
#define EXP_CAP 64000
#include "copyx.cu"
#define KNS d
#define EXP_CACHE 1
#define EXP_LOAD 0
#define EXP_VEC_ONLY 0
#define EXP_SCALE 10
#define EXP_G 4
#define EXP_CAP 32000
#include "copyx.cu"
#define KNS e
#define EXP_CACHE 1
#define EXP_LOAD 0
#define EXP_VEC_ONLY 0
#define EXP_SCALE 20
#define EXP_G 8
#define EXP_CAP 64000
#include "copyx.cu"
typedef void (*pfn)(const vgpu_desc *, const unsigned long long *, vgpu_mirror *);

static const size_t TOTAL = 256ull << 20, PAGE = 4096, NPAGES = TOTAL / PAGE;

__global__ void k_plain(const Desc *d, unsigned n)
{
	for (unsigned i = blockIdx.x; i < n; i += gridDim.x) {
		Desc x = d[i];
		const uint4 *s = (const uint4 *)x.src;
		uint4 *t = (uint4 *)x.dst;
		for (uint64_t j = threadIdx.x; j < x.len / 16; j += blockDim.x)
			t[j] = s[j];
	}
}

// One warp per page, 8 x 16 B loads in flight per lane.
__global__ void k_warp8(const Desc *d, unsigned n)
{
	unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
	unsigned nw = gridDim.x * blockDim.x / 32;
	for (unsigned i = w; i < n; i += nw) {
		Desc x = d[i];
		const uint4 *s = (const uint4 *)x.src;
		uint4 *t = (uint4 *)x.dst;
		uint4 v[8];
#pragma unroll
		for (int k = 0; k < 8; k++)
			v[k] = s[lane + 32 * k];
#pragma unroll
		for (int k = 0; k < 8; k++)
			t[lane + 32 * k] = v[k];
	}
}

// One warp per page, 8 loads per lane; a warp reads its next 8 descriptors
// with one coalesced load and broadcasts them with shuffles.
__global__ void k_warp8g(const Desc *d, unsigned n)
{
	const unsigned G = 8;
	unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
	unsigned nw = gridDim.x * blockDim.x / 32;
	const uint64_t *f = (const uint64_t *)d;
	for (unsigned base = w * G; base < n; base += nw * G) {
		unsigned m = min(G, n - base);
		uint64_t val = 0;
		if (lane < 3 * m)
			val = f[3 * (uint64_t)base + lane];
		for (unsigned j = 0; j < m; j++) {
			const uint4 *s = (const uint4 *)__shfl_sync(0xffffffff, val, 3 * j + 1);
			uint4 *t = (uint4 *)__shfl_sync(0xffffffff, val, 3 * j);
			uint4 v[8];
#pragma unroll
			for (int k = 0; k < 8; k++)
				v[k] = s[lane + 32 * k];
#pragma unroll
			for (int k = 0; k < 8; k++)
				t[lane + 32 * k] = v[k];
		}
	}
}

#define FIN (1ull << 63)
// Persistent kernel: warps take groups of 8 descriptors as the CPU publishes
// them (count in *pub, FIN set with the final count).
__global__ void k_poll(const Desc *d, const uint64_t *pub, unsigned sleepns)
{
	const unsigned G = 8;
	unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
	unsigned nw = gridDim.x * blockDim.x / 32;
	const volatile uint64_t *f = (const volatile uint64_t *)d;
	for (uint64_t g = w;; g += nw) {
		uint64_t first = g * G, need = first + G, p = 0;
		if (lane == 0) {
			for (;;) {
				p = *(const volatile uint64_t *)pub;
				if ((p & ~FIN) >= need || (p & FIN))
					break;
				uint64_t dist = need - (p & ~FIN);
				__nanosleep(sleepns ? min((uint64_t)4000, dist * sleepns) : 100);
			}
		}
		p = __shfl_sync(0xffffffff, p, 0);
		uint64_t avail = p & ~FIN;
		if (avail <= first)
			return;
		unsigned m = (unsigned)min((uint64_t)G, avail - first);
		uint64_t val = 0;
		if (lane < 3 * m)
			val = f[3 * first + lane];
		for (unsigned j = 0; j < m; j++) {
			const uint4 *s = (const uint4 *)__shfl_sync(0xffffffff, val, 3 * j + 1);
			uint4 *t = (uint4 *)__shfl_sync(0xffffffff, val, 3 * j);
			uint4 v[8];
#pragma unroll
			for (int k = 0; k < 8; k++)
				v[k] = s[lane + 32 * k];
#pragma unroll
			for (int k = 0; k < 8; k++)
				t[lane + 32 * k] = v[k];
		}
	}
}

__device__ __forceinline__ uint32_t smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// TMA bulk copies: one thread per block moves 4 KiB pages through shared
// memory, two stages.
__global__ void k_tma(const Desc *d, unsigned n)
{
	__shared__ alignas(128) uint8_t buf[2][4096];
	__shared__ alignas(8) uint64_t bar[2];
#if !defined(NO_TMA) && __CUDA_ARCH__ >= 900
	if (threadIdx.x != 0)
		return;
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar[0])));
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar[1])));
	asm volatile("fence.mbarrier_init.release.cluster;");
	uint32_t phase[2] = {0, 0};
	unsigned i = blockIdx.x;
	auto issue = [&](int b, unsigned idx) {
		Desc x = d[idx];
		// wait until previous store from this buffer has read smem
		asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
		asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(&bar[b])), "r"((uint32_t)x.len) : "memory");
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem(buf[b])), "l"(x.src), "r"((uint32_t)x.len), "r"(smem(&bar[b])) : "memory");
	};
	if (i >= n)
		return;
	int b = 0;
	issue(0, i);
	while (i < n) {
		unsigned nx = i + gridDim.x;
		if (nx < n)
			issue(b ^ 1, nx);
		uint32_t done = 0;
		while (!done)
			asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem(&bar[b])), "r"(phase[b]) : "memory");
		phase[b] ^= 1;
		Desc x = d[i];
		asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(x.dst), "r"(smem(buf[b])), "r"((uint32_t)x.len) : "memory");
		asm volatile("cp.async.bulk.commit_group;" ::: "memory");
		i = nx;
		b ^= 1;
	}
	asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static uint8_t *ram, *hbuf, *stage;
static uint8_t *dev;
static Desc *dsc_h2d, *dsc_d2h, *dsc_run_h2d, *dsc_run_d2h;
static size_t pageoff[NPAGES];
static double nat_h2d, nat_d2h;

template <class F> static double best(F fn, int reps = 7)
{
	double b = 1e9;
	fn();
	for (int i = 0; i < reps; i++) {
		double s = now();
		fn();
		b = std::min(b, now() - s);
	}
	return b;
}

static void report(const char *what, const char *dir, double t, double nat)
{
	double gbs = TOTAL / t / 1e9;
	printf("| %s | %s | %.1f | %.1f%% |\n", what, dir, gbs, 100 * gbs / nat);
	fflush(stdout);
}

static void check_h2d(const char *what)
{
	static uint8_t got[PAGE];
	for (size_t k : {(size_t)0, NPAGES / 3, NPAGES - 1}) {
		CK(cudaMemcpy(got, dev + k * PAGE, PAGE, cudaMemcpyDeviceToHost));
		if (memcmp(got, ram + pageoff[k], PAGE)) {
			printf("CHECK FAIL %s page %zu\n", what, k);
			return;
		}
	}
}

typedef void (*kfn)(const Desc *, unsigned);

static void launch(kfn k, const Desc *d, unsigned n, unsigned grid, unsigned block, cudaStream_t s, unsigned batch)
{
	for (unsigned at = 0; at < n; at += batch) {
		unsigned m = std::min(batch, n - at);
		unsigned g = grid ? std::min(grid, m) : m;
		if (block == 256 && (k == k_warp8 || k == k_warp8g) && !grid)
			g = (m + 7) / 8;
		k<<<g, block, 0, s>>>(d + at, m);
	}
}

// CPU-staged share: workers copy pages [from, NPAGES) through stage with the copy engine.
struct Pool {
	int w;
	std::vector<std::thread> th;
	std::vector<cudaStream_t> st;
	std::atomic<int> gen{0}, done{0};
	std::atomic<size_t> next{0};
	size_t from;
	int dir; // 0 h2d 1 d2h
	size_t chunk; // pages per chunk
	bool quit = false;
};

static void worker(Pool *p, int id)
{
	int seen = 0;
	for (;;) {
		while (p->gen.load() == seen)
			;
		seen = p->gen.load();
		if (p->quit)
			return;
		for (;;) {
			size_t c = p->next.fetch_add(p->chunk);
			size_t a = p->from + c;
			if (a >= NPAGES)
				break;
			size_t e = std::min(NPAGES, a + p->chunk);
			if (p->dir == 0) {
				for (size_t k = a; k < e; k++)
					memcpy(stage + k * PAGE, ram + pageoff[k], PAGE);
				CK(cudaMemcpyAsync(dev + a * PAGE, stage + a * PAGE, (e - a) * PAGE, cudaMemcpyHostToDevice, p->st[id]));
			} else {
				CK(cudaMemcpyAsync(stage + a * PAGE, dev + a * PAGE, (e - a) * PAGE, cudaMemcpyDeviceToHost, p->st[id]));
				CK(cudaStreamSynchronize(p->st[id]));
				for (size_t k = a; k < e; k++)
					memcpy(ram + pageoff[k], stage + k * PAGE, PAGE);
			}
		}
		CK(cudaStreamSynchronize(p->st[id]));
		p->done.fetch_add(1);
	}
}

int main()
{
	CK(cudaSetDevice(0));
	cudaDeviceProp pr;
	CK(cudaGetDeviceProperties(&pr, 0));
	if (getenv("RAM_MMAP") && *getenv("RAM_MMAP")) { // like guest RAM: shared anonymous memory, registered
		ram = (uint8_t *)mmap(0, 2 * TOTAL, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		CK(cudaHostRegister(ram, 2 * TOTAL, cudaHostRegisterMapped));
		printf("guest RAM: mmap MAP_SHARED|MAP_ANONYMOUS + cudaHostRegister\n");
	} else
		CK(cudaHostAlloc(&ram, 2 * TOTAL, cudaHostAllocMapped));
	CK(cudaHostAlloc(&hbuf, TOTAL, cudaHostAllocMapped));
	CK(cudaHostAlloc(&stage, TOTAL, cudaHostAllocMapped));
	CK(cudaMalloc(&dev, TOTAL));
	for (size_t i = 0; i < 2 * TOTAL; i++)
		ram[i] = (uint8_t)((i >> 12) ^ i);
	memset(hbuf, 1, TOTAL);
	memset(stage, 1, TOTAL);
	uint8_t *ramd;
	CK(cudaHostGetDevicePointer((void **)&ramd, ram, 0));
	CK(cudaHostAlloc(&dsc_h2d, NPAGES * sizeof(Desc), cudaHostAllocMapped));
	CK(cudaHostAlloc(&dsc_d2h, NPAGES * sizeof(Desc), cudaHostAllocMapped));
	CK(cudaHostAlloc(&dsc_run_h2d, 128 * sizeof(Desc), cudaHostAllocMapped));
	CK(cudaHostAlloc(&dsc_run_d2h, 128 * sizeof(Desc), cudaHostAllocMapped));
	for (size_t i = 0; i < NPAGES; i++) {
		pageoff[i] = (size_t)((i * 7919) % (2 * NPAGES)) * PAGE;
		dsc_h2d[i] = {(uint64_t)(dev + i * PAGE), (uint64_t)(ramd + pageoff[i]), PAGE};
		dsc_d2h[i] = {(uint64_t)(ramd + pageoff[i]), (uint64_t)(dev + i * PAGE), PAGE};
	}
	const size_t RUN = 2 << 20;
	for (size_t i = 0; i < 128; i++) {
		dsc_run_h2d[i] = {(uint64_t)(dev + i * RUN), (uint64_t)(ramd + 2 * i * RUN), RUN};
		dsc_run_d2h[i] = {(uint64_t)(ramd + 2 * i * RUN), (uint64_t)(dev + i * RUN), RUN};
	}
	Desc *dd_h2d, *dd_d2h; // device-resident copies
	CK(cudaMalloc(&dd_h2d, NPAGES * sizeof(Desc)));
	CK(cudaMalloc(&dd_d2h, NPAGES * sizeof(Desc)));
	CK(cudaMemcpy(dd_h2d, dsc_h2d, NPAGES * sizeof(Desc), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dd_d2h, dsc_d2h, NPAGES * sizeof(Desc), cudaMemcpyHostToDevice));
	Desc *h2d_m, *d2h_m;
	CK(cudaHostGetDevicePointer((void **)&h2d_m, dsc_h2d, 0));
	CK(cudaHostGetDevicePointer((void **)&d2h_m, dsc_d2h, 0));
	Desc *run_h2d_m, *run_d2h_m;
	CK(cudaHostGetDevicePointer((void **)&run_h2d_m, dsc_run_h2d, 0));
	CK(cudaHostGetDevicePointer((void **)&run_d2h_m, dsc_run_d2h, 0));
	cudaStream_t s1, s2;
	CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	unsigned sms = pr.multiProcessorCount;
	printf("# gatherx on %s, %u SMs\n\n", pr.name, sms);

	for (int round = 0; round < 2; round++) {
		printf("\n## round %d\n\n| variant | dir | GB/s | %% of native |\n|---|---|---:|---:|\n", round);
		nat_h2d = TOTAL / best([&] { CK(cudaMemcpyAsync(dev, hbuf, TOTAL, cudaMemcpyHostToDevice, s1)); CK(cudaStreamSynchronize(s1)); }) / 1e9;
		nat_d2h = TOTAL / best([&] { CK(cudaMemcpyAsync(hbuf, dev, TOTAL, cudaMemcpyDeviceToHost, s1)); CK(cudaStreamSynchronize(s1)); }) / 1e9;
		printf("| native pinned | HtoD | %.1f | 100%% |\n| native pinned | DtoH | %.1f | 100%% |\n", nat_h2d, nat_d2h);
		struct KV { const char *name; kfn k; unsigned grid, block, batch; bool devdesc; } kvs[] = {
			{"plain, batches 8192 (engine)", k_plain, 0, 256, 8192, false},
			{"warp/page x8 loads, batches 8192 (one block per 8 pages)", k_warp8, 0, 256, 8192 * 8, false},
			{"warp/page x8, device descs, full grid", k_warp8, NPAGES / 8, 256, NPAGES, true},
			{"warp/page x8, warp reads 8 descs coalesced, grid sms*8", k_warp8g, sms * 8, 256, NPAGES, false},
			{"warp/page x8, warp reads 8 descs coalesced, grid sms*4", k_warp8g, sms * 4, 256, NPAGES, false},
			{"warp/page x8, warp reads 8 descs coalesced, grid n/64", k_warp8g, NPAGES / 64, 256, NPAGES, false},
		};
		for (auto &v : kvs) {
			const Desc *dh = v.devdesc ? dd_h2d : h2d_m, *dd = v.devdesc ? dd_d2h : d2h_m;
			CK(cudaMemset(dev, 0, TOTAL));
			double t = best([&] { launch(v.k, dh, NPAGES, v.grid, v.block, s1, v.batch); CK(cudaStreamSynchronize(s1)); });
			CK(cudaGetLastError());
			check_h2d(v.name);
			report(v.name, "HtoD", t, nat_h2d);
			t = best([&] { launch(v.k, dd, NPAGES, v.grid, v.block, s1, v.batch); CK(cudaStreamSynchronize(s1)); });
			CK(cudaGetLastError());
			report(v.name, "DtoH", t, nat_d2h);
		}
		{
			double t = best([&] { k_plain<<<128, 256, 0, s1>>>(run_h2d_m, 128); CK(cudaStreamSynchronize(s1)); });
			report("plain, 2 MiB runs", "HtoD", t, nat_h2d);
			t = best([&] { k_plain<<<128, 256, 0, s1>>>(run_d2h_m, 128); CK(cudaStreamSynchronize(s1)); });
			report("plain, 2 MiB runs", "DtoH", t, nat_d2h);
		}
		// Engine emulation with a CPU producing descriptors at a given rate.
		static Desc *ring;
		static uint64_t *hpub, *hpub_m;
		static vgpu_mirror *mir;
		if (!ring) {
			if (getenv("RAM_MMAP") && *getenv("RAM_MMAP")) {
				ring = (Desc *)mmap(0, NPAGES * sizeof(Desc), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
				CK(cudaHostRegister(ring, NPAGES * sizeof(Desc), cudaHostRegisterMapped));
			} else
				CK(cudaHostAlloc(&ring, NPAGES * sizeof(Desc), cudaHostAllocMapped));
			CK(cudaHostAlloc(&hpub, 64, cudaHostAllocMapped));
			CK(cudaHostGetDevicePointer((void **)&hpub_m, hpub, 0));
			CK(cudaMalloc(&mir, sizeof(vgpu_mirror)));
		}
		Desc *ring_m;
		CK(cudaHostGetDevicePointer((void **)&ring_m, ring, 0));
		for (double rate : {20e-9, 45e-9}) {
			for (int kv = 0; kv < 7; kv++) {
				const char *names[] = {"plain, ramp 256..8192 (engine now)", "G4 40ns*d cap 64us (copy.cu), nvcc sm_90", "same, JIT from repo copy.ptx", "G8 20ns*d cap 64us", "G4, grid sms*2", "G4 sleep 40ns*d cap 8us", "same as 1, again"};
				pfn pk[] = {0, c::vgpu_copy, 0, e::vgpu_copy, c::vgpu_copy, a::vgpu_copy, c::vgpu_copy};
				unsigned grids[] = {0, 1, 1, 1, 2, 1, 1};
				for (int dir = 0; dir < 2; dir++) {
					Desc *hd = dir ? dsc_d2h : dsc_h2d;
					if (dir == 0)
						CK(cudaMemset(dev, 0, TOTAL));
					double t = best([&] {
						double t0 = now();
						unsigned filled = 0;
						auto produce = [&](unsigned upto) { // fill ring to upto at the CPU's rate
							memcpy(ring + filled, hd + filled, (upto - filled) * sizeof(Desc));
							filled = upto;
							while (now() - t0 < upto * rate)
								;
						};
						if (kv == 0) {
							unsigned at = 0, lim = 256;
							while (at < NPAGES) {
								unsigned m = std::min<unsigned>(lim, NPAGES - at);
								produce(at + m);
								k_plain<<<m, 256, 0, s1>>>(ring_m + at, m);
								at += m;
								lim = std::min(2 * lim, 8192u);
							}
						} else {
							unsigned grid = sms * grids[kv];
							CK(cudaMemsetAsync(mir, 0, sizeof *mir, s1));
							__atomic_store_n(hpub, 0, __ATOMIC_RELEASE);
							if (rate == 0) {
								produce(NPAGES);
								__atomic_store_n(hpub, NPAGES | VGPU_FINAL, __ATOMIC_RELEASE);
							} else
								produce(64);
							if (kv == 2) {
								static CUfunction jf;
								if (!jf) {
									const char *pp = getenv("COPY_PTX") ? getenv("COPY_PTX") : "backend/engine/copy.ptx";
					FILE *fp = fopen(pp, "rb");
					if (!fp) { printf("cannot open %s (set COPY_PTX)\n", pp); exit(1); }
									static char buf[1 << 20];
									size_t nr = fread(buf, 1, sizeof buf - 1, fp);
									buf[nr] = 0;
									CUmodule m;
									if (cuModuleLoadData(&m, buf) || cuModuleGetFunction(&jf, m, "vgpu_copy")) { printf("JIT failed\n"); exit(1); }
								}
								void *a0 = ring_m; const void *a1 = hpub_m; void *a2 = mir;
								void *args[] = {&a0, &a1, &a2};
								if (cuLaunchKernel(jf, grid, 1, 1, 256, 1, 1, 0, (CUstream)s1, args, 0)) { printf("launch failed\n"); exit(1); }
							} else
							pk[kv]<<<grid, 256, 0, s1>>>((const vgpu_desc *)ring_m, (const unsigned long long *)hpub_m, mir);
							for (unsigned at = filled; at < NPAGES; at += 64) {
								__atomic_store_n(hpub, at, __ATOMIC_RELEASE);
								produce(at + 64);
							}
							__atomic_store_n(hpub, NPAGES | VGPU_FINAL, __ATOMIC_RELEASE);
						}
						CK(cudaStreamSynchronize(s1));
					});
					CK(cudaGetLastError());
					if (dir == 0)
						check_h2d(names[kv]);
					char name[160];
					snprintf(name, sizeof name, "CPU %.0f ns/desc: %s", rate * 1e9, names[kv]);
					report(name, dir ? "DtoH" : "HtoD", t, dir ? nat_d2h : nat_h2d);
				}
			}
		}
	}
	return 0;
}
