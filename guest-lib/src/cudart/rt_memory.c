/*
 * rt_memory.c - device and pinned host memory, copies and memsets.
 * cudaMemcpyDefault is resolved with the library's own map of device
 * allocations. 2D/3D copies are row loops over the 1D paths (contiguous
 * rows collapse into one copy).
 */
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static int is_dev(const void *p)
{
	return vgpu_devmap_find((uint64_t)(uintptr_t)p, NULL, NULL, NULL);
}

static int resolve_kind(const void *dst, const void *src, int kind)
{
	if (kind != cudaMemcpyDefault)
		return kind;
	int d = is_dev(dst), s = is_dev(src);
	struct vgpu_hostrange hr;
	/* mapped pinned memory has a device address; treat it as host */
	if (!d && vgpu_hostmap_find(dst, 1, &hr))
		d = 0;
	return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
		 : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

cudaError_t rt_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async)
{
	cudaError_t e = rt_init();
	if (e)
		return e;
	if (!n)
		return 0;
	if (kind < 0 || kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (rt_capturing(s))
		return rt_capture_memcpy(s, dst, src, n, kind);
	kind = resolve_kind(dst, src, kind);
	uint64_t h = vgpu_stream_handle(s);
	switch (kind) {
	case cudaMemcpyHostToDevice:
		return vgpu_memcpy_htod((uint64_t)(uintptr_t)dst, src, n, h, async);
	case cudaMemcpyDeviceToHost:
		e = vgpu_memcpy_dtoh(dst, (uint64_t)(uintptr_t)src, n, h, async);
		if (!async && !e)
			e = vgpu_take_deferred_error();
		return e;
	case cudaMemcpyDeviceToDevice:
		return vgpu_memcpy_dtod((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, n, h, 1);
	default:
		if (async && h) {
			e = vgpu_simple(VGPU_OP_STREAM_SYNCHRONIZE, h);
			if (e)
				return e;
		}
		memmove(dst, src, n);
		return 0;
	}
}

cudaError_t rt_memset(void *dst, int value, size_t n, cudaStream_t s, int async)
{
	cudaError_t e = rt_init();
	if (e)
		return e;
	if (rt_capturing(s))
		return rt_capture_memset(s, dst, value, n);
	(void)async; /* memsets are asynchronous to the host for device memory */
	return vgpu_memset((uint64_t)(uintptr_t)dst, (uint8_t)value, 1, n, 0, 0, vgpu_stream_handle(s), 1);
}

/* ---------------- allocation ---------------- */

RT_API cudaMalloc(void **p, size_t size)
{
	VGPU_API();
	if (!p)
		RT_RETURN(cudaErrorInvalidValue);
	*p = NULL;
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	if (!size)
		return cudaSuccess;
	uint64_t ptr;
	e = vgpu_mem_alloc(rt_device(), size, &ptr);
	if (e)
		RT_RETURN(e == VGPU_E_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : e);
	*p = (void *)(uintptr_t)ptr;
	return cudaSuccess;
}

RT_API cudaFree(void *p)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e || !p)
		RT_RETURN(e);
	if (!is_dev(p))
		RT_RETURN(cudaErrorInvalidDevicePointer);
	RT_RETURN(vgpu_mem_free((uint64_t)(uintptr_t)p));
}

RT_API cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
	VGPU_API();
	(void)s; /* allocated at once: ordered before anything later on s */
	return cudaMalloc(p, size);
}
VGPU_ALIAS(cudaMallocAsync_ptsz, cudaMallocAsync);

RT_API cudaFreeAsync(void *p, cudaStream_t s)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e || !p)
		RT_RETURN(e);
	/* The host frees after the work already queued on the device. */
	e = vgpu_simple(VGPU_OP_STREAM_SYNCHRONIZE, vgpu_stream_handle(s));
	if (e)
		RT_RETURN(e);
	return cudaFree(p);
}
VGPU_ALIAS(cudaFreeAsync_ptsz, cudaFreeAsync);

RT_API cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
	VGPU_API();
	if (!pitch)
		RT_RETURN(cudaErrorInvalidValue);
	size_t pt = (width + 511) & ~(size_t)511;
	*pitch = pt;
	return cudaMalloc(p, pt * (height ? height : 1));
}

RT_API cudaMallocHost(void **p, size_t size)
{
	VGPU_API();
	if (!p)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_host_alloc(size, 0, p);
	RT_RETURN(e == VGPU_E_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : e);
}

RT_API cudaHostAlloc(void **p, size_t size, unsigned flags)
{
	VGPU_API();
	if (!p)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_host_alloc(size, flags, p);
	RT_RETURN(e == VGPU_E_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : e);
}

RT_API cudaFreeHost(void *p)
{
	VGPU_API();
	if (!p)
		return cudaSuccess;
	cudaError_t e = vgpu_host_free(p);
	RT_RETURN(e ? cudaErrorInvalidValue : 0);
}

RT_API cudaHostRegister(void *p, size_t size, unsigned flags)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_host_register(p, size, flags);
	RT_RETURN(e);
}

RT_API cudaHostUnregister(void *p)
{
	VGPU_API();
	RT_RETURN(vgpu_host_unregister(p));
}

RT_API cudaHostGetDevicePointer(void **dp, void *p, unsigned flags)
{
	VGPU_API();
	struct vgpu_hostrange r;
	(void)flags;
	if (!dp || !p || !vgpu_hostmap_find(p, 1, &r))
		RT_RETURN(cudaErrorInvalidValue);
	if (!r.dev_ptr) {
		VWARN("cudaHostGetDevicePointer: %p is not mapped for the device%s", p,
		      vgpu_host_mode() ? " (host mode: only cudaHostAlloc(cudaHostAllocMapped) memory shared with a backend "
					 "that offers shared memory is)" : "");
		RT_RETURN(cudaErrorNotSupported);
	}
	*dp = (void *)(uintptr_t)(r.dev_ptr + (uint64_t)((uint8_t *)p - (uint8_t *)r.addr));
	return cudaSuccess;
}

RT_API cudaHostGetFlags(unsigned *flags, void *p)
{
	VGPU_API();
	struct vgpu_hostrange r;
	if (!flags || !vgpu_hostmap_find(p, 1, &r))
		RT_RETURN(cudaErrorInvalidValue);
	*flags = r.flags;
	return cudaSuccess;
}


RT_API cudaPointerGetAttributes(struct rt_ptr_attrs *a, const void *p)
{
	VGPU_API();
	if (!a)
		RT_RETURN(cudaErrorInvalidValue);
	memset(a, 0, sizeof *a);
	int dev;
	struct vgpu_hostrange r;
	if (vgpu_devmap_find((uint64_t)(uintptr_t)p, NULL, NULL, &dev)) {
		a->type = 2; /* cudaMemoryTypeDevice */
		a->device = dev;
		a->devicePointer = (void *)p;
	} else if (vgpu_hostmap_find(p, 1, &r)) {
		a->type = 1; /* cudaMemoryTypeHost */
		a->device = rt_device();
		a->hostPointer = (void *)p;
		if (r.dev_ptr)
			a->devicePointer = (void *)(uintptr_t)(r.dev_ptr + (uint64_t)((const uint8_t *)p - (uint8_t *)r.addr));
	} else {
		a->type = 0; /* cudaMemoryTypeUnregistered */
		a->device = -2;
		a->hostPointer = (void *)p;
	}
	return cudaSuccess;
}

/* ---------------- copies ---------------- */

RT_API cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
	VGPU_API();
	RT_RETURN(rt_memcpy(dst, src, n, kind, NULL, 0));
}
VGPU_ALIAS(cudaMemcpy_ptds, cudaMemcpy);

RT_API cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(rt_memcpy(dst, src, n, kind, s, 1));
}
VGPU_ALIAS(cudaMemcpyAsync_ptsz, cudaMemcpyAsync);

RT_API cudaMemcpyPeer(void *dst, int ddev, const void *src, int sdev, size_t n)
{
	VGPU_API();
	(void)ddev;
	(void)sdev;
	RT_RETURN(rt_memcpy(dst, src, n, cudaMemcpyDeviceToDevice, NULL, 0));
}

RT_API cudaMemcpyPeerAsync(void *dst, int ddev, const void *src, int sdev, size_t n, cudaStream_t s)
{
	VGPU_API();
	(void)ddev;
	(void)sdev;
	RT_RETURN(rt_memcpy(dst, src, n, cudaMemcpyDeviceToDevice, s, 1));
}
VGPU_ALIAS(cudaMemcpyPeerAsync_ptsz, cudaMemcpyPeerAsync);

static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h, int kind,
			  cudaStream_t s, int async)
{
	if (w > dpitch || w > spitch)
		return cudaErrorInvalidValue;
	if (!w || !h)
		return 0;
	if (dpitch == w && spitch == w)
		return rt_memcpy(dst, src, w * h, kind, s, async);
	kind = resolve_kind(dst, src, kind);
	/* Host side strided, device side contiguous: stage through one buffer. */
	if (kind == cudaMemcpyHostToDevice && dpitch == w) {
		uint8_t *b = malloc(w * h);
		if (!b)
			return cudaErrorMemoryAllocation;
		for (size_t r = 0; r < h; r++)
			memcpy(b + r * w, (const uint8_t *)src + r * spitch, w);
		cudaError_t e = rt_memcpy(dst, b, w * h, kind, s, 0);
		free(b);
		return e;
	}
	if (kind == cudaMemcpyDeviceToHost && spitch == w) {
		uint8_t *b = malloc(w * h);
		if (!b)
			return cudaErrorMemoryAllocation;
		cudaError_t e = rt_memcpy(b, src, w * h, kind, s, 0);
		for (size_t r = 0; !e && r < h; r++)
			memcpy((uint8_t *)dst + r * dpitch, b + r * w, w);
		free(b);
		return e;
	}
	for (size_t r = 0; r < h; r++) {
		cudaError_t e = rt_memcpy((uint8_t *)dst + r * dpitch, (const uint8_t *)src + r * spitch, w, kind, s, async);
		if (e)
			return e;
	}
	return 0;
}

RT_API cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h, int kind)
{
	VGPU_API();
	RT_RETURN(copy2d(dst, dpitch, src, spitch, w, h, kind, NULL, 0));
}
VGPU_ALIAS(cudaMemcpy2D_ptds, cudaMemcpy2D);

RT_API cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h, int kind,
			 cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(copy2d(dst, dpitch, src, spitch, w, h, kind, s, 1));
}
VGPU_ALIAS(cudaMemcpy2DAsync_ptsz, cudaMemcpy2DAsync);


cudaError_t rt_copy3d(const struct rt_3d *p, cudaStream_t s, int async)
{
	if (!p)
		return cudaErrorInvalidValue;
	if (p->srcArray || p->dstArray)
		return cudaErrorNotSupported; /* CUDA arrays are not supported */
	const struct rt_pitched *sp = &p->srcPtr, *dp = &p->dstPtr;
	for (size_t z = 0; z < p->extent.depth; z++) {
		const uint8_t *src = (const uint8_t *)sp->ptr + (p->srcPos.z + z) * sp->pitch * sp->ysize +
				     p->srcPos.y * sp->pitch + p->srcPos.x;
		uint8_t *dst = (uint8_t *)dp->ptr + (p->dstPos.z + z) * dp->pitch * dp->ysize + p->dstPos.y * dp->pitch +
			       p->dstPos.x;
		cudaError_t e = copy2d(dst, dp->pitch, src, sp->pitch, p->extent.width, p->extent.height, p->kind, s, async);
		if (e)
			return e;
	}
	return 0;
}

RT_API cudaMemcpy3D(const struct rt_3d *p)
{
	VGPU_API();
	RT_RETURN(rt_copy3d(p, NULL, 0));
}
VGPU_ALIAS(cudaMemcpy3D_ptds, cudaMemcpy3D);

RT_API cudaMemcpy3DAsync(const struct rt_3d *p, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(rt_copy3d(p, s, 1));
}
VGPU_ALIAS(cudaMemcpy3DAsync_ptsz, cudaMemcpy3DAsync);

/* ---------------- memsets ---------------- */

RT_API cudaMemset(void *p, int v, size_t n)
{
	VGPU_API();
	RT_RETURN(rt_memset(p, v, n, NULL, 0));
}
VGPU_ALIAS(cudaMemset_ptds, cudaMemset);

RT_API cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(rt_memset(p, v, n, s, 1));
}
VGPU_ALIAS(cudaMemsetAsync_ptsz, cudaMemsetAsync);

RT_API cudaMemset2D(void *p, size_t pitch, int v, size_t w, size_t h)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_memset((uint64_t)(uintptr_t)p, (uint8_t)v, 1, w, pitch, h, 0, 1);
	RT_RETURN(e);
}
VGPU_ALIAS(cudaMemset2D_ptds, cudaMemset2D);

RT_API cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_memset((uint64_t)(uintptr_t)p, (uint8_t)v, 1, w, pitch, h, vgpu_stream_handle(s), 1);
	RT_RETURN(e);
}
VGPU_ALIAS(cudaMemset2DAsync_ptsz, cudaMemset2DAsync);

/* ---------------- 3D allocations and memsets ---------------- */

RT_API cudaMalloc3D(struct rt_pitched *p, struct rt_extent e)
{
	VGPU_API();
	if (!p)
		RT_RETURN(cudaErrorInvalidValue);
	size_t pitch = (e.width + 511) & ~(size_t)511;
	void *ptr = NULL;
	size_t h = e.height ? e.height : 1, d = e.depth ? e.depth : 1;
	cudaError_t err = cudaMalloc(&ptr, pitch * h * d);
	if (err)
		return err;
	p->ptr = ptr;
	p->pitch = pitch;
	p->xsize = e.width;
	p->ysize = e.height;
	return cudaSuccess;
}

static cudaError_t memset3d(struct rt_pitched p, int v, struct rt_extent e, cudaStream_t s)
{
	cudaError_t err = rt_init();
	if (err)
		return err;
	if (e.width > p.pitch)
		return cudaErrorInvalidValue;
	size_t rows = p.ysize ? p.ysize : e.height;
	for (size_t z = 0; z < e.depth; z++) {
		uint64_t slice = (uint64_t)(uintptr_t)p.ptr + z * p.pitch * rows;
		err = vgpu_memset(slice, (uint8_t)v, 1, e.width, p.pitch, e.height, vgpu_stream_handle(s), 1);
		if (err)
			return err;
	}
	return 0;
}

RT_API cudaMemset3D(struct rt_pitched p, int v, struct rt_extent e)
{
	VGPU_API();
	RT_RETURN(memset3d(p, v, e, NULL));
}
VGPU_ALIAS(cudaMemset3D_ptds, cudaMemset3D);

RT_API cudaMemset3DAsync(struct rt_pitched p, int v, struct rt_extent e, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(memset3d(p, v, e, s));
}
VGPU_ALIAS(cudaMemset3DAsync_ptsz, cudaMemset3DAsync);
