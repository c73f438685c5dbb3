// The gather/scatter kernel of backend/engine. copy.ptx is generated from
// this file by scripts/gen-copy-ptx.sh (nvcc -ptx, compute_70); a test
// checks that copy.ptx is current. The engine loads the PTX with
// cuModuleLoadData, so the driver compiles it for the GPU at hand.
//
// One launch copies a list of descriptors {dst, src, len} (device
// addresses; guest memory is device-mapped host memory). The launch starts
// before the list is complete: the CPU appends descriptors to the list in
// pinned host memory and then raises a published count in host memory; the
// kernel copies what has been published and, once the count carries the
// final mark, what remains. So translating guest addresses on the CPU
// overlaps the copy, with one launch per list instead of one per batch.
//
// Each warp copies one descriptor at a time, 16 bytes per lane and eight
// loads in flight per lane when dst, src and len allow it (8, 4 or 1 bytes
// per lane otherwise); warp w of W takes groups w, w+W, ... of four
// descriptors and reads a group's descriptors with one coalesced load.
//
// Waiting: a warp that finds its group unpublished reads the count that
// the warps share in device memory (the mirror). At most one warp per
// VGPU_POLL_NS reads the host's count over PCIe and raises the mirror; the
// others sleep about as long as the CPU needs to publish their group
// (VGPU_SLEEP_PER_DESC_NS per missing descriptor, within bounds), so that
// waiting warps stay out of the copying warps' way. The CPU must publish
// the final mark on every path (the engine does it before it calls the
// driver again and before it returns), or the launch never ends.
//
// Measured on the H100 (bench/results/2026-11-22-h100-engine-persistent):
// group sizes 1, 2, 4 and 8, grids of 1 to 8 blocks per SM, and flat or
// scaled sleeps, against a CPU publishing at 15 to 60 ns per descriptor;
// four per group, one block per SM and the scaled sleep held up best.

#define VGPU_FINAL (1ull << 63)
#define VGPU_GROUP 4
#define VGPU_POLL_NS 1000
#define VGPU_SLEEP_MIN_NS 256
#define VGPU_SLEEP_MAX_NS 64000
#define VGPU_SLEEP_PER_DESC_NS 40

struct vgpu_desc {
	unsigned long long dst, src, len;
};

// Shared by the warps of one launch; zeroed before the launch.
struct vgpu_mirror {
	unsigned long long published; // the host's count, as last read
	unsigned long long polled;    // %globaltimer of the last read
};

static __device__ __forceinline__ unsigned long long globaltimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// wait returns the published count (with its final mark) once it reaches
// need or is final. Called by one lane.
static __device__ unsigned long long wait(const unsigned long long *published, struct vgpu_mirror *m,
					  unsigned long long need)
{
	for (;;) {
		unsigned long long p = *(volatile unsigned long long *)&m->published;
		if (p >= need) // a final count is larger than any count
			return p;
		unsigned long long now = globaltimer();
		unsigned long long last = *(volatile unsigned long long *)&m->polled;
		if (now - last >= VGPU_POLL_NS && atomicCAS(&m->polled, last, now) == last) {
			unsigned long long h = *(const volatile unsigned long long *)published;
			if (h > p)
				atomicMax(&m->published, h);
			continue;
		}
		// Sleep about as long as the CPU takes to publish what is missing.
		unsigned long long ns = (need - p) * VGPU_SLEEP_PER_DESC_NS;
		__nanosleep((unsigned)min(max(ns, (unsigned long long)VGPU_SLEEP_MIN_NS), (unsigned long long)VGPU_SLEEP_MAX_NS));
	}
}

// copy_warp copies len bytes with the warp's 32 lanes, T at a time.
template <typename T>
static __device__ __forceinline__ void copy_warp(unsigned long long dst, unsigned long long src,
						 unsigned long long len, unsigned lane)
{
	const T *s = (const T *)src;
	T *d = (T *)dst;
	unsigned long long n = len / sizeof(T), i = lane;
	for (; i + 7 * 32 < n; i += 8 * 32) {
		T v[8];
#pragma unroll
		for (int k = 0; k < 8; k++)
			v[k] = s[i + k * 32];
#pragma unroll
		for (int k = 0; k < 8; k++)
			d[i + k * 32] = v[k];
	}
	for (; i < n; i += 32)
		d[i] = s[i];
}

extern "C" __global__ void vgpu_copy(const struct vgpu_desc *descs, const unsigned long long *published,
				     struct vgpu_mirror *mirror)
{
	unsigned lane = threadIdx.x & 31;
	unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32;
	unsigned long long warps = gridDim.x * (unsigned long long)blockDim.x / 32;
	const volatile unsigned long long *words = (const volatile unsigned long long *)descs;

	unsigned long long seen = 0; // the published count as this warp last saw it
	for (unsigned long long g = warp;; g += warps) {
		unsigned long long first = g * VGPU_GROUP;
		if (lane == 0 && seen < first + VGPU_GROUP)
			seen = wait(published, mirror, first + VGPU_GROUP);
		seen = __shfl_sync(0xffffffff, seen, 0);
		unsigned long long p = seen & ~VGPU_FINAL;
		if (p <= first)
			return;
		unsigned n = p - first < VGPU_GROUP ? (unsigned)(p - first) : VGPU_GROUP;
		unsigned long long w = 0;
		if (lane < 3 * n)
			w = words[3 * first + lane];
		for (unsigned j = 0; j < n; j++) {
			unsigned long long dst = __shfl_sync(0xffffffff, w, 3 * j);
			unsigned long long src = __shfl_sync(0xffffffff, w, 3 * j + 1);
			unsigned long long len = __shfl_sync(0xffffffff, w, 3 * j + 2);
			unsigned long long a = dst | src | len;
			if ((a & 15) == 0)
				copy_warp<uint4>(dst, src, len, lane);
			else if ((a & 7) == 0)
				copy_warp<unsigned long long>(dst, src, len, lane);
			else if ((a & 3) == 0)
				copy_warp<unsigned>(dst, src, len, lane);
			else
				copy_warp<unsigned char>(dst, src, len, lane);
		}
	}
}
