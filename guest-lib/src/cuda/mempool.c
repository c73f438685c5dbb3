/*
 * mempool.c - stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync)
 * from each device's default memory pool, forwarded: the host's driver
 * allocates in the stream's order (MEM_ALLOC_ASYNC, MEM_FREE_ASYNC), and
 * the backend tracks and caps the memory as cuMemAlloc's. A pool here is the
 * device's default pool, named by a fixed object per device; pools the
 * program creates (cuMemPoolCreate) and pool attributes are not served yet
 * (their entry points answer CUDA_ERROR_NOT_SUPPORTED).
 */
#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult
#define MAX_POOLS 64 /* the most devices the library serves (core/state.c) */

/* CUmemoryPool: the default pool of device dev. */
struct vgpu_mempool {
	int dev;
};
static struct vgpu_mempool pools[MAX_POOLS];

typedef struct vgpu_mempool *CUmemoryPool;

static CUresult pool_of(int dev, CUmemoryPool *pool)
{
	int n;
	CUresult rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (dev < 0 || dev >= n || dev >= MAX_POOLS)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	pools[dev].dev = dev;
	*pool = &pools[dev];
	return 0;
}

CU_API cuDeviceGetDefaultMemPool(CUmemoryPool *pool, int dev)
{
	VGPU_API();
	if (!pool)
		return VGPU_E_INVALID_VALUE;
	return pool_of(dev, pool);
}

/* The current pool is always the default one (cuDeviceSetMemPool accepts
 * only it). */
CU_API cuDeviceGetMemPool(CUmemoryPool *pool, int dev)
{
	VGPU_API();
	if (!pool)
		return VGPU_E_INVALID_VALUE;
	return pool_of(dev, pool);
}

CU_API cuDeviceSetMemPool(int dev, CUmemoryPool pool)
{
	VGPU_API();
	CUmemoryPool def;
	CUresult rc = pool_of(dev, &def);
	if (rc)
		return rc;
	return pool == def ? 0 : VGPU_E_NOT_SUPPORTED;
}

/* The allocation's device: the stream's, or the current context's for the
 * default streams. */
static CUresult alloc_on(CUdeviceptr *p, size_t size, CUstream s, int dev)
{
	if (!p)
		return VGPU_E_INVALID_VALUE;
	if (!size)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_mem_alloc_async_req req = {.device = (uint32_t)dev, .size = size, .stream = vgpu_stream_handle(s)};
	struct vgpu_ptr_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_MEM_ALLOC_ASYNC, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	vgpu_devmap_add(rep.ptr, size, vgpu_stream_handle(s) ? s->dev : dev);
	*p = rep.ptr;
	return 0;
}

CU_API cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s)
{
	VGPU_API();
	int dev = 0;
	if (!vgpu_stream_handle(s)) {
		CUresult rc = vgpu_ctx_device(&dev);
		if (rc)
			return rc;
	}
	return alloc_on(p, size, s, dev);
}
VGPU_ALIAS(cuMemAllocAsync_ptsz, cuMemAllocAsync);

CU_API cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s)
{
	VGPU_API();
	if (!pool || pool < pools || pool >= pools + MAX_POOLS)
		return VGPU_E_INVALID_VALUE; /* not a pool this library gave out */
	if (vgpu_stream_handle(s) && s->dev != pool->dev)
		return VGPU_E_INVALID_VALUE;
	return alloc_on(p, size, s, pool->dev);
}
VGPU_ALIAS(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync);

CU_API cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	VGPU_API();
	struct vgpu_mem_free_async_req req = {.ptr = p, .stream = vgpu_stream_handle(s)};
	CUresult rc = vgpu_queue(VGPU_OP_MEM_FREE_ASYNC, &req, sizeof req);
	if (!rc)
		vgpu_devmap_remove(p);
	return rc;
}
VGPU_ALIAS(cuMemFreeAsync_ptsz, cuMemFreeAsync);
