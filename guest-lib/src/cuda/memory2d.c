/*
 * memory2d.c - driver API pitched memory, 2D copies and memsets, and
 * pointer queries (libcuda.so.1). 2D copies are row loops over the core's
 * 1D copies (contiguous rows collapse into one copy); a copy with a CUDA
 * array side goes to array.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_types.h"

#define CU_API VGPU_EXPORT CUresult

enum { MT_HOST = VGPU_MT_HOST, MT_DEVICE = VGPU_MT_DEVICE, MT_ARRAY = VGPU_MT_ARRAY, MT_UNIFIED = VGPU_MT_UNIFIED };


CU_API cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned elem)
{
	VGPU_API();
	if (!p || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return VGPU_E_INVALID_VALUE;
	int d;
	CUresult rc = vgpu_ctx_device(&d);
	if (rc)
		return rc;
	size_t pt = (width + 511) & ~(size_t)511;
	uint64_t ptr;
	rc = vgpu_mem_alloc(d, (uint64_t)pt * height, &ptr);
	if (!rc) {
		*p = ptr;
		*pitch = pt;
	}
	return rc;
}

/* Where one side of a 2D copy is: 1 device, 0 host, -1 unsupported. */
static int side(int type, const void *host, CUdeviceptr dev, uint64_t *addr)
{
	switch (type) {
	case MT_HOST:
		*addr = (uint64_t)(uintptr_t)host;
		return 0;
	case MT_DEVICE:
		*addr = dev;
		return 1;
	case MT_UNIFIED:
		*addr = dev;
		return vgpu_devmap_find(dev, NULL, NULL, NULL) ? 1 : 0;
	default:
		return -1;
	}
}

static CUresult copy_row(int sdev, int ddev, uint64_t dst, uint64_t src, size_t n, uint64_t stream, int async)
{
	if (sdev && ddev)
		return vgpu_memcpy_dtod(dst, src, n, stream, 1);
	if (ddev)
		return vgpu_memcpy_htod(dst, (const void *)(uintptr_t)src, n, stream, async);
	if (sdev)
		return vgpu_memcpy_dtoh((void *)(uintptr_t)dst, src, n, stream, async);
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return 0;
}

/* A 2D copy as the 3D copy of one slice (a side is a CUDA array). */
static CUresult copy2d_as_3d(const CUDA_MEMCPY2D *c, CUstream s, int async)
{
	CUDA_MEMCPY3D m = {
		.srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
		.srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
		.srcPitch = c->srcPitch, .srcHeight = c->Height + c->srcY,
		.dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstMemoryType = c->dstMemoryType,
		.dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
		.dstPitch = c->dstPitch, .dstHeight = c->Height + c->dstY,
		.WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1,
	};
	return vgpu_copy3d(&m, s, async);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async)
{
	if (!c)
		return VGPU_E_INVALID_VALUE;
	if (c->srcMemoryType == MT_ARRAY || c->dstMemoryType == MT_ARRAY)
		return copy2d_as_3d(c, s, async);
	return vgpu_copy2d(c, s, async);
}

CUresult vgpu_copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async)
{
	uint64_t src, dst;
	int sdev = side(c->srcMemoryType, c->srcHost, c->srcDevice, &src);
	int ddev = side(c->dstMemoryType, c->dstHost, c->dstDevice, &dst);
	if (sdev < 0 || ddev < 0)
		return VGPU_E_INVALID_VALUE; /* not a CUmemorytype */
	size_t w = c->WidthInBytes, h = c->Height;
	size_t sp = c->srcPitch ? c->srcPitch : w, dp = c->dstPitch ? c->dstPitch : w;
	if (w > sp || w > dp)
		return VGPU_E_INVALID_VALUE;
	src += c->srcXInBytes + c->srcY * sp;
	dst += c->dstXInBytes + c->dstY * dp;
	uint64_t hs = vgpu_stream_handle(s);
	if (!w || !h)
		return 0;
	if (sp == w && dp == w)
		return copy_row(sdev, ddev, dst, src, w * h, hs, async);
	for (size_t r = 0; r < h; r++) {
		CUresult rc = copy_row(sdev, ddev, dst + r * dp, src + r * sp, w, hs, async);
		if (rc)
			return rc;
	}
	if (!async && sdev && !ddev) {
		int e = vgpu_take_deferred_error();
		if (e)
			return e;
	}
	return 0;
}

CU_API cuMemcpy2D_v2(const CUDA_MEMCPY2D *c)
{
	VGPU_API();
	return copy2d(c, NULL, 0);
}
VGPU_ALIAS(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2);

CU_API cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c)
{
	VGPU_API();
	return copy2d(c, NULL, 0);
}
VGPU_ALIAS(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2);

CU_API cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s)
{
	VGPU_API();
	return copy2d(c, s, 1);
}
VGPU_ALIAS(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2);

static CUresult set2d(CUdeviceptr p, size_t pitch, uint32_t v, uint32_t elem, size_t w, size_t h, CUstream s)
{
	if (!w || !h)
		return 0;
	if (pitch < w * elem)
		return VGPU_E_INVALID_VALUE;
	return vgpu_memset(p, v, elem, w, pitch, h, vgpu_stream_handle(s), 1);
}

CU_API cuMemsetD2D8_v2(CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h)
{
	VGPU_API();
	return set2d(p, pitch, v, 1, w, h, NULL);
}
VGPU_ALIAS(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2);

CU_API cuMemsetD2D16_v2(CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h)
{
	VGPU_API();
	return set2d(p, pitch, v, 2, w, h, NULL);
}
VGPU_ALIAS(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2);

CU_API cuMemsetD2D32_v2(CUdeviceptr p, size_t pitch, unsigned v, size_t w, size_t h)
{
	VGPU_API();
	return set2d(p, pitch, v, 4, w, h, NULL);
}
VGPU_ALIAS(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2);

CU_API cuMemsetD2D8Async(CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s)
{
	VGPU_API();
	return set2d(p, pitch, v, 1, w, h, s);
}
VGPU_ALIAS(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async);

CU_API cuMemsetD2D16Async(CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s)
{
	VGPU_API();
	return set2d(p, pitch, v, 2, w, h, s);
}
VGPU_ALIAS(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async);

CU_API cuMemsetD2D32Async(CUdeviceptr p, size_t pitch, unsigned v, size_t w, size_t h, CUstream s)
{
	VGPU_API();
	return set2d(p, pitch, v, 4, w, h, s);
}
VGPU_ALIAS(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async);

/* ---------------- pointer queries ---------------- */

/* CUpointer_attribute values (cuda.h) */
enum {
	PA_CONTEXT = 1, PA_MEMORY_TYPE = 2, PA_DEVICE_POINTER = 3, PA_HOST_POINTER = 4, PA_P2P_TOKENS = 5,
	PA_SYNC_MEMOPS = 6, PA_BUFFER_ID = 7, PA_IS_MANAGED = 8, PA_DEVICE_ORDINAL = 9, PA_IS_LEGACY_IPC = 10,
	PA_RANGE_START_ADDR = 11, PA_RANGE_SIZE = 12, PA_MAPPED = 13, PA_ALLOWED_HANDLE_TYPES = 14,
	PA_IS_RDMA_CAPABLE = 15, PA_ACCESS_FLAGS = 16, PA_MEMPOOL_HANDLE = 17, PA_MAPPING_SIZE = 18,
	PA_MAPPING_BASE_ADDR = 19, PA_MEMORY_BLOCK_ID = 20, PA_IS_HW_DECOMPRESS = 21,
};

/* Each attribute's size in bytes (0: not one of them). */
static size_t pointer_attr_size(int attr)
{
	switch (attr) {
	case PA_CONTEXT: case PA_DEVICE_POINTER: case PA_HOST_POINTER: case PA_BUFFER_ID: case PA_RANGE_START_ADDR:
	case PA_RANGE_SIZE: case PA_MEMPOOL_HANDLE: case PA_MAPPING_SIZE: case PA_MAPPING_BASE_ADDR:
	case PA_MEMORY_BLOCK_ID:
		return 8;
	case PA_P2P_TOKENS:
		return 16; /* CUDA_POINTER_ATTRIBUTE_P2P_TOKENS: two 64-bit tokens */
	case PA_MEMORY_TYPE: case PA_SYNC_MEMOPS: case PA_IS_MANAGED: case PA_DEVICE_ORDINAL: case PA_IS_LEGACY_IPC:
	case PA_MAPPED: case PA_ALLOWED_HANDLE_TYPES: case PA_IS_RDMA_CAPABLE: case PA_ACCESS_FLAGS:
	case PA_IS_HW_DECOMPRESS:
		return 4;
	}
	return 0;
}

static CUresult pointer_attr(void *out, int attr, CUdeviceptr p)
{
	uint64_t base, size;
	int dev;
	struct vgpu_hostrange hr;
	int is_dev = vgpu_devmap_find(p, &base, &size, &dev);
	int is_host = !is_dev && vgpu_hostmap_find((void *)(uintptr_t)p, 1, &hr);
	if (!is_dev && !is_host)
		return VGPU_E_INVALID_VALUE; /* not memory this library knows */
	if (is_host) {
		base = (uint64_t)(uintptr_t)hr.addr;
		size = hr.len;
		dev = 0;
	}
	switch (attr) {
	case PA_CONTEXT: {
		CUcontext c = NULL;
		extern CUresult cuCtxGetCurrent(CUcontext *);
		cuCtxGetCurrent(&c);
		*(CUcontext *)out = c;
		return 0;
	}
	case PA_MEMORY_TYPE:
		*(unsigned *)out = is_dev ? MT_DEVICE : MT_HOST;
		return 0;
	case PA_DEVICE_POINTER:
		if (is_host && !hr.dev_ptr)
			return VGPU_E_INVALID_VALUE;
		*(CUdeviceptr *)out = is_dev ? p : hr.dev_ptr + (p - base);
		return 0;
	case PA_HOST_POINTER:
		if (is_dev)
			return VGPU_E_INVALID_VALUE;
		*(void **)out = (void *)(uintptr_t)p;
		return 0;
	case PA_SYNC_MEMOPS:
	case PA_MAPPED:
		*(int *)out = 1;
		return 0;
	case PA_BUFFER_ID:
	case PA_MEMORY_BLOCK_ID: {
		/* unique per allocation in the process: an address that is freed
		 * and allocated again is another buffer */
		uint64_t id = base;
		const void *pool;
		if (is_dev)
			vgpu_devmap_info(p, &id, &pool);
		*(unsigned long long *)out = id;
		return 0;
	}
	case PA_MEMPOOL_HANDLE: {
		uint64_t id;
		const void *pool = NULL;
		if (!is_dev || !vgpu_devmap_info(p, &id, &pool) || !pool)
			return VGPU_E_INVALID_VALUE; /* not memory from a pool */
		*(const void **)out = pool;
		return 0;
	}
	case PA_IS_MANAGED:
	case PA_IS_LEGACY_IPC:  /* no IPC handles (memory of one VM is not exported) */
	case PA_IS_RDMA_CAPABLE: /* no GPUDirect RDMA into a VM's memory */
	case PA_IS_HW_DECOMPRESS:
	case PA_ALLOWED_HANDLE_TYPES: /* no export handle types are served */
		*(unsigned *)out = 0;
		return 0;
	case PA_ACCESS_FLAGS:
		*(unsigned *)out = 3; /* CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE */
		return 0;
	case PA_MAPPING_BASE_ADDR:
		*(CUdeviceptr *)out = base;
		return 0;
	case PA_MAPPING_SIZE:
		*(size_t *)out = size;
		return 0;
	case PA_P2P_TOKENS:
		return VGPU_E_NOT_SUPPORTED; /* nv-p2p tokens of the host are not the guest's */
	case PA_DEVICE_ORDINAL:
		*(int *)out = dev;
		return 0;
	case PA_RANGE_START_ADDR:
		*(CUdeviceptr *)out = base;
		return 0;
	case PA_RANGE_SIZE:
		*(size_t *)out = size;
		return 0;
	default:
		return VGPU_E_INVALID_VALUE;
	}
}

CU_API cuPointerGetAttribute(void *out, int attr, CUdeviceptr p)
{
	VGPU_API();
	if (!out)
		return VGPU_E_INVALID_VALUE;
	return pointer_attr(out, attr, p);
}

CU_API cuPointerGetAttributes(unsigned n, int *attrs, void **out, CUdeviceptr p)
{
	VGPU_API();
	if (!attrs || !out)
		return VGPU_E_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		if (!out[i])
			continue;
		/* unknown pointers and attributes read as zero here, as CUDA does */
		if (pointer_attr(out[i], attrs[i], p)) {
			size_t sz = pointer_attr_size(attrs[i]);
			memset(out[i], 0, sz ? sz : 4);
		}
	}
	return 0;
}

/* ---------------- small queries ---------------- */

/*
 * CUDA_MODULE_LOADING as the driver reads it: EAGER (1) or LAZY (2); unset
 * or anything else, the default of the driver version this library reports
 * (lazy on Linux since 12.2). Reported to NVIDIA's runtime, which under
 * LAZY registers its fatbins without loading them and loads one only when a
 * kernel of it is first used: cuBLAS 11 then loads 3 images instead of
 * 1,022 (511 MB) through vgpu. Every image that is loaded, the host loads
 * whole.
 */
int vgpu_module_loading_mode(void)
{
	const char *e = getenv("CUDA_MODULE_LOADING");
	if (e && !strcmp(e, "EAGER"))
		return 1; /* CU_MODULE_EAGER_LOADING */
	if (e && !strcmp(e, "LAZY"))
		return 2; /* CU_MODULE_LAZY_LOADING */
	return vgpu_driver_version() >= 12020 ? 2 : 1;
}

CU_API cuModuleGetLoadingMode(int *mode)
{
	VGPU_API();
	if (!mode)
		return VGPU_E_INVALID_VALUE;
	*mode = vgpu_module_loading_mode();
	return 0;
}

CU_API cuStreamGetCtx(CUstream s, CUcontext *pc)
{
	VGPU_API();
	extern CUresult cuCtxGetCurrent(CUcontext *);
	(void)s;
	if (!pc)
		return VGPU_E_INVALID_VALUE;
	return cuCtxGetCurrent(pc);
}
VGPU_ALIAS(cuStreamGetCtx_ptsz, cuStreamGetCtx);
