/*
 * vmm.c - the virtual-memory API (cuMemAddressReserve, cuMemCreate,
 * cuMemMap, cuMemSetAccess, cuMemUnmap), forwarded: the host's driver
 * reserves, creates and maps; the backend keeps each session's ranges,
 * memory and mappings and counts the memory against the VM's cap.
 * cuMemAddressFree and cuMemRelease are generated (calls_gen.c). The
 * library remembers its mappings so that accessible ones are device memory
 * to cuMemcpy and cuPointerGetAttribute (the device map), as cuMemAlloc's
 * are. Served: pinned device memory, no export handles, read-write access
 * of the memory's own device.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult

struct mapping {
	uint64_t base, size;
	int dev;
	int access;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;
static size_t nmaps, capmaps;
/* Physical memory's device, by handle (the handles are the session's,
 * small and unique). */
static struct {
	uint64_t handle;
	int dev;
} *phys;
static size_t nphys, capphys;

CU_API cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
	VGPU_API();
	int dev;
	if (!p || !size)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_ctx_device(&dev);
	if (rc)
		return rc;
	/* addr is a hint: the host's driver picks the range. */
	struct vgpu_mem_reserve_req req = {.device = (uint32_t)dev, .size = size, .alignment = align, .flags = flags};
	struct vgpu_ptr_reply rep = {0};
	rc = vgpu_call(VGPU_OP_MEM_ADDRESS_RESERVE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	*p = rep.ptr;
	return 0;
}

CU_API cuMemCreate(unsigned long long *handle, size_t size, const struct mem_alloc_prop *prop, unsigned long long flags)
{
	VGPU_API();
	if (!handle || !prop || !size)
		return VGPU_E_INVALID_VALUE;
	if (prop->loc_type != 1)
		return VGPU_E_NOT_SUPPORTED; /* host memory through this API: not vgpu's to give */
	struct vgpu_mem_create_req req = {.device = (uint32_t)prop->loc_id, .type = prop->type,
		.handle_types = prop->handle_types, .compression = prop->compression, .rdma = prop->rdma,
		.usage = prop->usage, .size = size, .flags = flags};
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_MEM_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	if (nphys == capphys) {
		size_t cap = capphys ? 2 * capphys : 16;
		void *n = realloc(phys, cap * sizeof *phys);
		if (!n) {
			pthread_mutex_unlock(&mu);
			return VGPU_E_OUT_OF_MEMORY;
		}
		phys = n;
		capphys = cap;
	}
	phys[nphys].handle = rep.handle;
	phys[nphys].dev = prop->loc_id;
	nphys++;
	pthread_mutex_unlock(&mu);
	*handle = rep.handle;
	return 0;
}

static int phys_dev_locked(uint64_t handle)
{
	for (size_t i = 0; i < nphys; i++)
		if (phys[i].handle == handle)
			return phys[i].dev;
	return -1;
}

CU_API cuMemMap(CUdeviceptr p, size_t size, size_t offset, unsigned long long handle, unsigned long long flags)
{
	VGPU_API();
	if (flags)
		return VGPU_E_INVALID_VALUE; /* none defined */
	struct vgpu_mem_map_req req = {.ptr = p, .size = size, .offset = offset, .handle = handle};
	CUresult rc = vgpu_call(VGPU_OP_MEM_MAP, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	if (nmaps == capmaps) {
		size_t cap = capmaps ? 2 * capmaps : 16;
		void *n = realloc(maps, cap * sizeof *maps);
		if (!n) {
			pthread_mutex_unlock(&mu);
			return 0; /* mapped; only cuMemcpy's view of it is missing */
		}
		maps = n;
		capmaps = cap;
	}
	maps[nmaps++] = (struct mapping){.base = p, .size = size, .dev = phys_dev_locked(handle)};
	pthread_mutex_unlock(&mu);
	return 0;
}

CU_API cuMemSetAccess(CUdeviceptr p, size_t size, const struct mem_access_desc *desc, size_t count)
{
	VGPU_API();
	if (!desc || !count)
		return VGPU_E_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != 1)
			return VGPU_E_NOT_SUPPORTED;
		struct vgpu_mem_set_access_req req = {.ptr = p, .size = size,
			.device = (uint32_t)desc[i].location.id, .flags = (uint32_t)desc[i].flags};
		CUresult rc = vgpu_call(VGPU_OP_MEM_SET_ACCESS, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
		if (rc)
			return rc;
	}
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmaps; i++) {
		struct mapping *m = &maps[i];
		if (!m->access && m->base >= p && m->base - p < size) {
			m->access = 1;
			vgpu_devmap_add(m->base, m->size, m->dev);
		}
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

CU_API cuMemUnmap(CUdeviceptr p, size_t size)
{
	VGPU_API();
	struct vgpu_mem_range_req req = {.ptr = p, .size = size};
	CUresult rc = vgpu_call(VGPU_OP_MEM_UNMAP, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmaps;) {
		struct mapping *m = &maps[i];
		if (m->base >= p && m->base - p < size) {
			if (m->access)
				vgpu_devmap_remove(m->base);
			maps[i] = maps[--nmaps];
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}
