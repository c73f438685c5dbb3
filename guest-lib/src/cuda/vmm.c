/*
 * vmm.c - the virtual-memory API (cuMemAddressReserve, cuMemCreate,
 * cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease), forwarded: the
 * host's driver reserves, creates and maps; the backend keeps each
 * session's ranges, memory and mappings and counts the memory against the
 * VM's cap. cuMemAddressFree is generated (calls_gen.c). The library
 * remembers its mappings so that accessible ones are device memory to
 * cuMemcpy and cuPointerGetAttribute (the device map), as cuMemAlloc's are,
 * and each allocation's properties and references, so that
 * cuMemRetainAllocationHandle and cuMemGetAllocationPropertiesFromHandle
 * are answered here (NCCL frees its buffers through the first): a retain
 * adds a reference, a cuMemRelease drops one, and the backend is told when
 * the last one goes. Served: pinned device memory, read-write access of the
 * memory's own device. Requested export handle types are accepted and kept
 * in the properties, but nothing is ever exported (cuMemExportToShareable-
 * Handle answers CUDA_ERROR_NOT_SUPPORTED): memory of one VM never leaves it.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult

struct mapping {
	uint64_t base, size;
	uint64_t handle;
	int dev;
	int access;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;
static size_t nmaps, capmaps;
/* Physical memory by handle (the handles are the session's, small and
 * unique): its device and properties, the guest's references (cuMemCreate's
 * and each retain's), whether the backend was told of the release, and how
 * many mappings hold it. An entry goes when no reference and no mapping is
 * left. */
static struct phys_mem {
	uint64_t handle;
	int dev;
	int refs;
	int released; /* MEM_RELEASE sent: the mappings alone keep it */
	size_t mapped;
	struct mem_alloc_prop prop;
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
	phys[nphys] = (struct phys_mem){.handle = rep.handle, .dev = prop->loc_id, .refs = 1, .prop = *prop};
	phys[nphys].prop.win32_meta = NULL;
	nphys++;
	pthread_mutex_unlock(&mu);
	*handle = rep.handle;
	return 0;
}

static struct phys_mem *phys_locked(uint64_t handle)
{
	for (size_t i = 0; i < nphys; i++)
		if (phys[i].handle == handle)
			return &phys[i];
	return NULL;
}

/* phys_drop_locked forgets m once nothing refers to it. */
static void phys_drop_locked(struct phys_mem *m)
{
	if (m->refs == 0 && m->mapped == 0)
		*m = phys[--nphys];
}

/*
 * cuMemRelease drops a reference; the last one releases the memory on the
 * host (which frees it once it is unmapped).
 */
CU_API cuMemRelease(unsigned long long handle)
{
	VGPU_API();
	pthread_mutex_lock(&mu);
	struct phys_mem *m = phys_locked(handle);
	if (m && m->refs > 1) {
		m->refs--;
		pthread_mutex_unlock(&mu);
		return 0;
	}
	if (m && m->refs == 0) { /* released already; only mappings hold it */
		pthread_mutex_unlock(&mu);
		return VGPU_E_INVALID_VALUE;
	}
	if (m && m->released) { /* retained after its release: the host let go already */
		m->refs = 0;
		phys_drop_locked(m);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	pthread_mutex_unlock(&mu);
	struct vgpu_handle_req req = {.handle = handle};
	CUresult rc = vgpu_call(VGPU_OP_MEM_RELEASE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	if ((m = phys_locked(handle))) {
		m->refs = 0;
		m->released = 1;
		phys_drop_locked(m);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

/*
 * cuMemRetainAllocationHandle: the handle of the memory mapped at addr
 * (anywhere in the mapping), with one more reference for the caller to
 * release.
 */
CU_API cuMemRetainAllocationHandle(unsigned long long *handle, void *addr)
{
	VGPU_API();
	if (!handle)
		return VGPU_E_INVALID_VALUE;
	uint64_t a = (uint64_t)(uintptr_t)addr;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmaps; i++) {
		struct mapping *mp = &maps[i];
		struct phys_mem *m;
		if (a - mp->base >= mp->size || !(m = phys_locked(mp->handle)))
			continue;
		m->refs++;
		*handle = m->handle;
		pthread_mutex_unlock(&mu);
		return 0;
	}
	pthread_mutex_unlock(&mu);
	return VGPU_E_INVALID_VALUE; /* nothing of this process's is mapped there */
}

/* cuMemGetAllocationPropertiesFromHandle: what cuMemCreate was given. */
CU_API cuMemGetAllocationPropertiesFromHandle(struct mem_alloc_prop *prop, unsigned long long handle)
{
	VGPU_API();
	if (!prop)
		return VGPU_E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct phys_mem *m = phys_locked(handle);
	if (!m || m->refs == 0) {
		pthread_mutex_unlock(&mu);
		return VGPU_E_INVALID_VALUE;
	}
	*prop = m->prop;
	pthread_mutex_unlock(&mu);
	return 0;
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
	struct phys_mem *m = phys_locked(handle);
	maps[nmaps++] = (struct mapping){.base = p, .size = size, .handle = handle, .dev = m ? m->dev : -1};
	if (m)
		m->mapped++;
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
			struct phys_mem *pm = phys_locked(m->handle);
			if (pm && pm->mapped) {
				pm->mapped--;
				phys_drop_locked(pm);
			}
			maps[i] = maps[--nmaps];
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}
