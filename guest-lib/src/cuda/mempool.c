/*
 * mempool.c - stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync)
 * and memory pools (cuMemPoolCreate, cuMemPoolSetAttribute, ...),
 * forwarded: the host's driver allocates in the stream's order
 * (MEM_ALLOC_ASYNC from a device's default pool, MEM_ALLOC_FROM_POOL from
 * a pool the program created), and the backend tracks and caps the memory
 * as cuMemAlloc's.
 *
 * A CUmemoryPool is a struct vgpu_mempool: a fixed one per device for its
 * default pool (handle 0 on the wire), a malloc'd one per created pool
 * (the backend's handle). Every pool argument is looked up among these
 * before use: a pointer this library did not give out, or a destroyed
 * pool, is CUDA_ERROR_INVALID_VALUE. A device's current pool
 * (cuDeviceSetMemPool) is this process's state, kept here: on the host the
 * setting is the worker's, which other sessions may share.
 *
 * Pools are of pinned device memory with no export handle types: memory of
 * one VM is never shared with another process, so the export and import
 * calls answer CUDA_ERROR_NOT_SUPPORTED.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult
#define MAX_POOLS 64 /* the most devices the library serves (core/state.c) */

struct vgpu_mempool {
	int dev;
	uint64_t handle; /* the backend's; 0: the device's default pool */
	struct vgpu_mempool *next; /* created pools */
};
typedef struct vgpu_mempool *CUmemoryPool;

/* CUmemPoolProps (cuda.h, 88 bytes): maxSize since CUDA 12.2 and usage
 * since 12.9 took bytes of reserved, which older programs zero. */
struct mem_pool_props {
	int32_t alloc_type; /* 1 pinned */
	int32_t handle_types;
	struct mem_location location;
	void *win32_attrs;
	uint64_t max_size;
	uint16_t usage;
	uint8_t reserved[54];
};
_Static_assert(sizeof(struct mem_pool_props) == 88, "CUmemPoolProps");

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_mempool defaults[MAX_POOLS];
static struct vgpu_mempool *current[MAX_POOLS]; /* NULL: the default pool */
static struct vgpu_mempool *created;

static CUresult check_dev(int dev)
{
	int n;
	CUresult rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (dev < 0 || dev >= n || dev >= MAX_POOLS)
		return VGPU_E_INVALID_DEVICE;
	return 0;
}

static CUmemoryPool default_pool(int dev)
{
	defaults[dev].dev = dev;
	return &defaults[dev];
}

/* lookup copies pool's device and handle if it is a pool of this library's
 * (the default pools' addresses are compared as integers: a foreign
 * pointer is never dereferenced). */
static CUresult lookup(CUmemoryPool pool, int *dev, uint64_t *handle)
{
	uintptr_t p = (uintptr_t)pool, lo = (uintptr_t)defaults;
	if (p >= lo && p < lo + sizeof defaults && (p - lo) % sizeof defaults[0] == 0) {
		*dev = (int)((p - lo) / sizeof defaults[0]);
		*handle = 0;
		return check_dev(*dev);
	}
	CUresult rc = VGPU_E_INVALID_VALUE; /* not a pool this library gave out */
	pthread_mutex_lock(&mu);
	for (struct vgpu_mempool *q = created; q; q = q->next) {
		if (q == pool) {
			*dev = q->dev;
			*handle = q->handle;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

CU_API cuDeviceGetDefaultMemPool(CUmemoryPool *pool, int dev)
{
	VGPU_API();
	if (!pool)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	*pool = default_pool(dev);
	return 0;
}

CU_API cuDeviceGetMemPool(CUmemoryPool *pool, int dev)
{
	VGPU_API();
	if (!pool)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	*pool = current[dev] ? current[dev] : default_pool(dev);
	pthread_mutex_unlock(&mu);
	return 0;
}

CU_API cuDeviceSetMemPool(int dev, CUmemoryPool pool)
{
	VGPU_API();
	int pdev;
	uint64_t handle;
	CUresult rc = check_dev(dev);
	if (!rc)
		rc = lookup(pool, &pdev, &handle);
	if (rc)
		return rc;
	if (pdev != dev)
		return VGPU_E_INVALID_DEVICE; /* a pool of another device */
	pthread_mutex_lock(&mu);
	current[dev] = handle ? pool : NULL;
	pthread_mutex_unlock(&mu);
	return 0;
}

/* CUDA 13's location-based forms: pools of a device's pinned memory are
 * the device calls above; host, NUMA and managed-memory pools are not
 * served. */
static CUresult device_location(const char *name, const struct mem_location *loc, int type, int *dev)
{
	if (!loc)
		return VGPU_E_INVALID_VALUE;
	if (loc->type != 1 || type != 1) {
		VWARN("%s: location type %d, allocation type %d: only pools of device memory, pinned, are served", name,
		      loc->type, type);
		return VGPU_E_NOT_SUPPORTED;
	}
	*dev = loc->id;
	return 0;
}

CU_API cuMemGetDefaultMemPool(CUmemoryPool *pool, const struct mem_location *loc, int type)
{
	VGPU_API();
	int dev;
	CUresult rc = device_location("cuMemGetDefaultMemPool", loc, type, &dev);
	return rc ? rc : cuDeviceGetDefaultMemPool(pool, dev);
}

CU_API cuMemGetMemPool(CUmemoryPool *pool, const struct mem_location *loc, int type)
{
	VGPU_API();
	int dev;
	CUresult rc = device_location("cuMemGetMemPool", loc, type, &dev);
	return rc ? rc : cuDeviceGetMemPool(pool, dev);
}

CU_API cuMemSetMemPool(const struct mem_location *loc, int type, CUmemoryPool pool)
{
	VGPU_API();
	int dev;
	CUresult rc = device_location("cuMemSetMemPool", loc, type, &dev);
	return rc ? rc : cuDeviceSetMemPool(dev, pool);
}

CU_API cuMemPoolCreate(CUmemoryPool *pool, const struct mem_pool_props *props)
{
	VGPU_API();
	if (!pool || !props)
		return VGPU_E_INVALID_VALUE;
	if (props->location.type != 1) {
		VWARN("cuMemPoolCreate: location type %d: only pools of device memory (CU_MEM_LOCATION_TYPE_DEVICE) are served", props->location.type);
		return VGPU_E_NOT_SUPPORTED;
	}
	CUresult rc = check_dev(props->location.id);
	if (rc)
		return rc;
	if (props->handle_types)
		VWARN("cuMemPoolCreate: export handle types %#x are not served: memory of one VM is never shared with another process", (unsigned)props->handle_types);
	struct vgpu_mempool *p = calloc(1, sizeof *p);
	if (!p)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_mem_pool_create_req req = {.device = (uint32_t)props->location.id, .type = (uint32_t)props->alloc_type,
		.handle_types = (uint32_t)props->handle_types, .usage = props->usage, .max_size = props->max_size};
	struct vgpu_handle_reply rep = {0};
	rc = vgpu_call(VGPU_OP_MEMPOOL_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc) {
		free(p);
		return rc;
	}
	p->dev = props->location.id;
	p->handle = rep.handle;
	pthread_mutex_lock(&mu);
	p->next = created;
	created = p;
	pthread_mutex_unlock(&mu);
	*pool = p;
	return 0;
}

/* A destroyed pool that was a device's current one leaves the default
 * pool current. Its live allocations stay valid until freed. */
CU_API cuMemPoolDestroy(CUmemoryPool pool)
{
	VGPU_API();
	int dev;
	uint64_t handle;
	CUresult rc = lookup(pool, &dev, &handle);
	if (rc)
		return rc;
	if (!handle)
		return VGPU_E_INVALID_VALUE; /* a default pool cannot be destroyed */
	struct vgpu_handle_req req = {.handle = handle};
	rc = vgpu_call(VGPU_OP_MEMPOOL_DESTROY, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	for (struct vgpu_mempool **q = &created; *q; q = &(*q)->next) {
		if (*q == pool) {
			*q = pool->next;
			break;
		}
	}
	if (current[dev] == pool)
		current[dev] = NULL;
	pthread_mutex_unlock(&mu);
	free(pool);
	return 0;
}

/* CUmemPool_attribute: 1..3 are ints, 4..8 cuuint64_t. */
static int int_attr(int attr) { return attr >= 1 && attr <= 3; }
static int u64_attr(int attr) { return attr >= 4 && attr <= 8; }

CU_API cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
	VGPU_API();
	struct vgpu_mem_pool_attr_req req = {.attr = (uint32_t)attr};
	if (!value)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = lookup(pool, (int *)&req.device, &req.pool);
	if (rc)
		return rc;
	if (int_attr(attr))
		req.value = *(const int *)value != 0;
	else if (u64_attr(attr))
		req.value = *(const uint64_t *)value;
	else
		return VGPU_E_INVALID_VALUE;
	return vgpu_call(VGPU_OP_MEMPOOL_SET_ATTRIBUTE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
	VGPU_API();
	struct vgpu_mem_pool_attr_req req = {.attr = (uint32_t)attr};
	struct vgpu_value_reply rep = {0};
	if (!value || !(int_attr(attr) || u64_attr(attr)))
		return VGPU_E_INVALID_VALUE;
	CUresult rc = lookup(pool, (int *)&req.device, &req.pool);
	if (!rc)
		rc = vgpu_call(VGPU_OP_MEMPOOL_GET_ATTRIBUTE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	if (int_attr(attr))
		*(int *)value = (int)rep.value;
	else
		*(uint64_t *)value = rep.value;
	return 0;
}

CU_API cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	VGPU_API();
	struct vgpu_mem_pool_trim_req req = {.keep = keep};
	CUresult rc = lookup(pool, (int *)&req.device, &req.pool);
	if (rc)
		return rc;
	return vgpu_call(VGPU_OP_MEMPOOL_TRIM_TO, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

/* Each descriptor is one call: the pool's own device's access goes to the
 * driver; another device's may only stay none (no peer access). */
CU_API cuMemPoolSetAccess(CUmemoryPool pool, const struct mem_access_desc *map, size_t count)
{
	VGPU_API();
	struct vgpu_mem_pool_access_req req = {0};
	if (!map && count)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = lookup(pool, (int *)&req.device, &req.pool);
	for (size_t i = 0; !rc && i < count; i++) {
		if (map[i].location.type != 1) {
			VWARN("cuMemPoolSetAccess: location type %d: only devices' access to pools is served", map[i].location.type);
			return VGPU_E_NOT_SUPPORTED;
		}
		if (map[i].location.id < 0)
			return VGPU_E_INVALID_DEVICE;
		req.peer = (uint32_t)map[i].location.id;
		req.flags = (uint32_t)map[i].flags;
		rc = vgpu_call(VGPU_OP_MEMPOOL_SET_ACCESS, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	}
	return rc;
}

CU_API cuMemPoolGetAccess(int *flags, CUmemoryPool pool, const struct mem_location *loc)
{
	VGPU_API();
	struct vgpu_mem_pool_access_req req = {0};
	struct vgpu_access_reply rep = {0};
	if (!flags || !loc)
		return VGPU_E_INVALID_VALUE;
	if (loc->type != 1)
		return VGPU_E_NOT_SUPPORTED;
	if (loc->id < 0)
		return VGPU_E_INVALID_DEVICE;
	CUresult rc = lookup(pool, (int *)&req.device, &req.pool);
	if (rc)
		return rc;
	req.peer = (uint32_t)loc->id;
	rc = vgpu_call(VGPU_OP_MEMPOOL_GET_ACCESS, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		*flags = (int)rep.flags;
	return rc;
}

/* alloc_from allocates from pool (handle: 0 for a default pool) of device
 * dev; the stream, if not a default one, must be dev's. */
static CUresult alloc_from(CUdeviceptr *p, size_t size, CUstream s, int dev, CUmemoryPool pool, uint64_t handle)
{
	if (!p || !size)
		return VGPU_E_INVALID_VALUE;
	if (vgpu_stream_handle(s) && s->dev != dev)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_ptr_reply rep = {0};
	CUresult rc;
	if (handle) {
		struct vgpu_mem_alloc_from_pool_req req = {.pool = handle, .stream = vgpu_stream_handle(s), .size = size};
		rc = vgpu_call(VGPU_OP_MEM_ALLOC_FROM_POOL, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	} else {
		struct vgpu_mem_alloc_async_req req = {.device = (uint32_t)dev, .size = size, .stream = vgpu_stream_handle(s)};
		rc = vgpu_call(VGPU_OP_MEM_ALLOC_ASYNC, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	}
	if (rc)
		return rc;
	vgpu_devmap_add_pool(rep.ptr, size, dev, pool);
	*p = rep.ptr;
	return 0;
}

/* From the device's current pool: the stream's device, or the current
 * context's for the default streams. */
CU_API cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s)
{
	VGPU_API();
	int dev = 0;
	uint64_t handle = 0;
	if (vgpu_stream_handle(s)) {
		dev = s->dev;
	} else {
		CUresult rc = vgpu_ctx_device(&dev);
		if (rc)
			return rc;
	}
	CUmemoryPool pool = NULL;
	if (dev >= 0 && dev < MAX_POOLS) {
		pthread_mutex_lock(&mu);
		pool = current[dev] ? current[dev] : default_pool(dev);
		handle = pool->handle;
		pthread_mutex_unlock(&mu);
	}
	return alloc_from(p, size, s, dev, pool, handle);
}
VGPU_ALIAS(cuMemAllocAsync_ptsz, cuMemAllocAsync);

CU_API cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s)
{
	VGPU_API();
	int dev;
	uint64_t handle;
	CUresult rc = lookup(pool, &dev, &handle);
	if (rc)
		return rc;
	return alloc_from(p, size, s, dev, pool, handle);
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

/* Sharing a pool or its memory with another process. */
static CUresult not_shared(const char *name)
{
	VWARN("%s: pools are not shared between processes on vgpu (memory of one VM is never exported); returning CUDA_ERROR_NOT_SUPPORTED", name);
	return VGPU_E_NOT_SUPPORTED;
}

CU_API cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool, int type, unsigned long long flags)
{
	VGPU_API();
	(void)handle, (void)pool, (void)type, (void)flags;
	return not_shared("cuMemPoolExportToShareableHandle");
}

CU_API cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle, int type, unsigned long long flags)
{
	VGPU_API();
	(void)pool, (void)handle, (void)type, (void)flags;
	return not_shared("cuMemPoolImportFromShareableHandle");
}

CU_API cuMemPoolExportPointer(void *data, CUdeviceptr ptr)
{
	VGPU_API();
	(void)data, (void)ptr;
	return not_shared("cuMemPoolExportPointer");
}

CU_API cuMemPoolImportPointer(CUdeviceptr *ptr, CUmemoryPool pool, void *data)
{
	VGPU_API();
	(void)ptr, (void)pool, (void)data;
	return not_shared("cuMemPoolImportPointer");
}
