/*
 * driver.c - the hand-written CUDA driver API of libcuda.so.1: init,
 * devices, memory, streams, events, errors. Contexts are in context.c,
 * modules and launches in module.c, cuGetProcAddress in procaddr.c, the
 * private export tables in export_tables.c. Everything else in the table
 * is a generated stub.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_types.h"
#include "core.h"
#include "procaddr.h"

#define CU_API VGPU_EXPORT CUresult

/* ---------------- errors ---------------- */

static const struct {
	int code;
	const char *name;
} cu_errs[] = {
#define X(n, v) {v, #n},
#include "cu_errors.inc"
#undef X
};

static const char *cu_error_name(int e)
{
	for (size_t i = 0; i < sizeof cu_errs / sizeof cu_errs[0]; i++)
		if (cu_errs[i].code == e)
			return cu_errs[i].name;
	return NULL;
}

/* "CUDA_ERROR_INVALID_VALUE" -> "invalid value" */
static const char *cu_error_string(int e)
{
	static char strs[sizeof cu_errs / sizeof cu_errs[0]][64];
	for (size_t i = 0; i < sizeof cu_errs / sizeof cu_errs[0]; i++) {
		if (cu_errs[i].code != e)
			continue;
		if (!strs[i][0]) {
			const char *n = cu_errs[i].name;
			if (!strncmp(n, "CUDA_ERROR_", 11))
				n += 11;
			else if (!strncmp(n, "CUDA_", 5))
				n += 5;
			char tmp[64];
			size_t j = 0;
			for (; n[j] && j < sizeof tmp - 1; j++)
				tmp[j] = n[j] == '_' ? ' ' : (char)(n[j] >= 'A' && n[j] <= 'Z' ? n[j] + 32 : n[j]);
			tmp[j] = 0;
			memcpy(strs[i], tmp, j + 1);
		}
		return strs[i];
	}
	return NULL;
}

CU_API cuGetErrorName(CUresult e, const char **p)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	*p = cu_error_name(e);
	return *p ? 0 : VGPU_E_INVALID_VALUE;
}

CU_API cuGetErrorString(CUresult e, const char **p)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	*p = cu_error_string(e);
	return *p ? 0 : VGPU_E_INVALID_VALUE;
}

/* ---------------- init, version, devices ---------------- */

static int inited;

CUresult vgpu_cu_need_init(void)
{
	return __atomic_load_n(&inited, __ATOMIC_ACQUIRE) ? 0 : VGPU_E_NOT_INITIALIZED;
}
#define need_init vgpu_cu_need_init

CU_API cuInit(unsigned flags)
{
	VGPU_API();
	if (flags)
		return VGPU_E_INVALID_VALUE;
	int rc = vgpu_init();
	if (!rc)
		__atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
	return rc;
}

/*
 * The CUDA version this library reports (cuDriverGetVersion, and the limit
 * of cuGetProcAddress): the host driver's version, but never above the
 * newest version tables/procaddr.tbl knows (the probed driver's). So a guest
 * runtime or library is never told more than the host can load (cuBLASLt
 * picks kernels by it; a CUDA 12 library told 13020 broke, smolvm#681), nor
 * more than this library resolves symbols for; and CUDA 13 runtimes, which
 * refuse a driver below 13000, run exactly where they would natively. Without
 * a backend: the table's version. docs/ARCHITECTURE.md states the rule.
 */
int vgpu_driver_version(void)
{
	static int cached;
	int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (c)
		return c;
	if (vgpu_init())
		return vgpu_procaddr_driver_version;
	struct vgpu_version_reply r;
	if (vgpu_call(VGPU_OP_DRIVER_GET_VERSION, NULL, 0, NULL, 0, &r, sizeof r, NULL, 0, NULL) || r.version <= 0)
		return vgpu_procaddr_driver_version;
	c = r.version < vgpu_procaddr_driver_version ? r.version : vgpu_procaddr_driver_version;
	__atomic_store_n(&cached, c, __ATOMIC_RELAXED);
	return c;
}

CU_API cuDriverGetVersion(int *v)
{
	VGPU_API();
	if (!v)
		return VGPU_E_INVALID_VALUE;
	*v = vgpu_driver_version();
	return 0;
}

CU_API cuDeviceGetCount(int *n)
{
	VGPU_API();
	if (!n)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	return rc ? rc : vgpu_device_count(n);
}

CU_API cuDeviceGet(CUdevice *d, int ordinal)
{
	VGPU_API();
	int n;
	if (!d)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	if (!rc)
		rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (ordinal < 0 || ordinal >= n)
		return VGPU_E_INVALID_DEVICE;
	*d = ordinal;
	return 0;
}

static CUresult info(CUdevice d, const struct vgpu_device_info **di)
{
	CUresult rc = need_init();
	return rc ? rc : vgpu_device_info(d, di);
}

CU_API cuDeviceGetName(char *name, int len, CUdevice d)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!name || len <= 0)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = info(d, &di);
	if (rc)
		return rc;
	snprintf(name, (size_t)len, "%.*s", (int)sizeof di->name, (const char *)di->name);
	return 0;
}

CU_API cuDeviceGetUuid(void *uuid, CUdevice d)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!uuid)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = info(d, &di);
	if (!rc)
		memcpy(uuid, di->uuid, 16);
	return rc;
}
VGPU_ALIAS(cuDeviceGetUuid_v2, cuDeviceGetUuid);

CU_API cuDeviceGetLuid(char *luid, unsigned *mask, CUdevice d)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!luid || !mask)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = info(d, &di);
	if (!rc) {
		memcpy(luid, di->luid, 8);
		*mask = di->luid_node_mask;
	}
	return rc;
}

CU_API cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!bytes)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = info(d, &di);
	if (!rc)
		*bytes = di->total_mem;
	return rc;
}

CU_API cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	VGPU_API();
	if (!v)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	return rc ? rc : vgpu_device_attr(d, attr, v);
}

CU_API cuDeviceComputeCapability(int *major, int *minor, CUdevice d)
{
	VGPU_API();
	if (!major || !minor)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	if (!rc)
		rc = vgpu_device_attr(d, 75, major);
	if (!rc)
		rc = vgpu_device_attr(d, 76, minor);
	return rc;
}

CU_API cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
	VGPU_API();
	int bus, dev, dom;
	if (!id || len <= 0)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	if (!rc)
		rc = vgpu_device_attr(d, 33, &bus);
	if (!rc)
		rc = vgpu_device_attr(d, 34, &dev);
	if (!rc)
		rc = vgpu_device_attr(d, 50, &dom);
	if (!rc)
		snprintf(id, (size_t)len, "%08x:%02x:%02x.0", dom, bus, dev);
	return rc;
}

CU_API cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b)
{
	VGPU_API();
	(void)a;
	(void)b;
	if (!can)
		return VGPU_E_INVALID_VALUE;
	*can = 0;
	return need_init();
}

/* ---------------- memory ---------------- */

static CUresult ctx_dev(int *d)
{
	CUresult rc = need_init();
	return rc ? rc : vgpu_ctx_device(d);
}

CU_API cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	VGPU_API();
	int d;
	if (!p)
		return VGPU_E_INVALID_VALUE;
	if (!size)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = ctx_dev(&d);
	uint64_t ptr;
	if (!rc)
		rc = vgpu_mem_alloc(d, size, &ptr);
	if (!rc)
		*p = ptr;
	return rc;
}

CU_API cuMemFree_v2(CUdeviceptr p)
{
	VGPU_API();
	if (!p)
		return 0;
	return vgpu_mem_free(p);
}

CU_API cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
	VGPU_API();
	int d;
	uint64_t f, t;
	CUresult rc = ctx_dev(&d);
	if (!rc)
		rc = vgpu_mem_get_info(d, &f, &t);
	if (!rc) {
		if (free_b)
			*free_b = f;
		if (total_b)
			*total_b = t;
	}
	return rc;
}

/*
 * The granularity of the virtual-memory API's allocations, asked of the
 * host's driver for device memory (NCCL sizes its buffers by it).
 *
 * Host locations (HOST 2, HOST_NUMA 3, HOST_NUMA_CURRENT 4) would be the
 * guest's own memory, whose unit is the guest's page: that is the answer.
 * cuMemCreate then refuses host locations with CUDA_ERROR_NOT_SUPPORTED,
 * which is the probe NCCL (2.23 and later) makes before it falls back to
 * its /dev/shm host buffers; failing this query instead would make NCCL
 * fail its initialisation.
 */
CU_API cuMemGetAllocationGranularity(size_t *granularity, const struct mem_alloc_prop *p, int option)
{
	VGPU_API();
	int n;
	if (!granularity || !p)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = need_init();
	if (rc)
		return rc;
	if (p->loc_type >= 2 && p->loc_type <= 4) {
		if (option < 0 || option > 1 || p->type != 1)
			return VGPU_E_INVALID_VALUE;
		long page = sysconf(_SC_PAGESIZE);
		*granularity = page > 0 ? (size_t)page : 4096;
		return 0;
	}
	if (p->loc_type != 1)
		return VGPU_E_INVALID_VALUE;
	if ((rc = vgpu_device_count(&n)))
		return rc;
	if (p->loc_id < 0 || p->loc_id >= n)
		return VGPU_E_INVALID_DEVICE;
	struct vgpu_granularity_req req = {
		.device = (uint32_t)p->loc_id, .option = (uint32_t)option, .type = p->type,
		.handle_types = p->handle_types, .compression = p->compression, .rdma = p->rdma, .usage = p->usage,
	};
	uint64_t g;
	if ((rc = vgpu_mem_granularity(&req, &g)))
		return rc;
	*granularity = (size_t)g;
	return 0;
}

CU_API cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	VGPU_API();
	uint64_t b, s;
	if (!vgpu_devmap_find(p, &b, &s, NULL))
		return VGPU_E_NOT_FOUND;
	if (base)
		*base = b;
	if (size)
		*size = s;
	return 0;
}

CU_API cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	VGPU_API();
	return vgpu_memcpy_htod(dst, src, n, 0, 0);
}
VGPU_ALIAS(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2);

CU_API cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	VGPU_API();
	CUresult rc = vgpu_memcpy_dtoh(dst, src, n, 0, 0);
	int d = vgpu_take_deferred_error();
	return d ? d : rc;
}
VGPU_ALIAS(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2);

CU_API cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	VGPU_API();
	return vgpu_memcpy_dtod(dst, src, n, 0, 1);
}
VGPU_ALIAS(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2);

CU_API cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memcpy_htod(dst, src, n, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2);

CU_API cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memcpy_dtoh(dst, src, n, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2);

CU_API cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memcpy_dtod(dst, src, n, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2);

/* Unified addressing: classify by the library's map of allocations. */
static CUresult memcpy_any(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	int dd = vgpu_devmap_find(dst, NULL, NULL, NULL), sd = vgpu_devmap_find(src, NULL, NULL, NULL);
	uint64_t h = vgpu_stream_handle(s);
	if (dd && sd)
		return vgpu_memcpy_dtod(dst, src, n, h, 1);
	if (dd)
		return vgpu_memcpy_htod(dst, (const void *)(uintptr_t)src, n, h, async);
	if (sd)
		return vgpu_memcpy_dtoh((void *)(uintptr_t)dst, src, n, h, async);
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return 0;
}

CU_API cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	VGPU_API();
	return memcpy_any(dst, src, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpy_ptds, cuMemcpy);

CU_API cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	VGPU_API();
	return memcpy_any(dst, src, n, s, 1);
}
VGPU_ALIAS(cuMemcpyAsync_ptsz, cuMemcpyAsync);

CU_API cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
	VGPU_API();
	return vgpu_memset(p, v, 1, n, 0, 0, 0, 1);
}
VGPU_ALIAS(cuMemsetD8_v2_ptds, cuMemsetD8_v2);

CU_API cuMemsetD16_v2(CUdeviceptr p, unsigned short v, size_t n)
{
	VGPU_API();
	return vgpu_memset(p, v, 2, n, 0, 0, 0, 1);
}
VGPU_ALIAS(cuMemsetD16_v2_ptds, cuMemsetD16_v2);

CU_API cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n)
{
	VGPU_API();
	return vgpu_memset(p, v, 4, n, 0, 0, 0, 1);
}
VGPU_ALIAS(cuMemsetD32_v2_ptds, cuMemsetD32_v2);

CU_API cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memset(p, v, 1, n, 0, 0, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemsetD8Async_ptsz, cuMemsetD8Async);

CU_API cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memset(p, v, 2, n, 0, 0, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemsetD16Async_ptsz, cuMemsetD16Async);

CU_API cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s)
{
	VGPU_API();
	return vgpu_memset(p, v, 4, n, 0, 0, vgpu_stream_handle(s), 1);
}
VGPU_ALIAS(cuMemsetD32Async_ptsz, cuMemsetD32Async);

CU_API cuMemAllocHost_v2(void **p, size_t size)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	return vgpu_host_alloc(size, 0, p);
}

CU_API cuMemHostAlloc(void **p, size_t size, unsigned flags)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	return vgpu_host_alloc(size, flags, p);
}

CU_API cuMemFreeHost(void *p)
{
	VGPU_API();
	return vgpu_host_free(p);
}

CU_API cuMemHostGetDevicePointer_v2(CUdeviceptr *dp, void *p, unsigned flags)
{
	VGPU_API();
	struct vgpu_hostrange r;
	(void)flags;
	if (!dp || !p)
		return VGPU_E_INVALID_VALUE;
	if (!vgpu_hostmap_find(p, 1, &r))
		return VGPU_E_INVALID_VALUE;
	if (!r.dev_ptr)
		return VGPU_E_NOT_SUPPORTED; /* host mode, or not mapped */
	*dp = r.dev_ptr + (uint64_t)((uint8_t *)p - (uint8_t *)r.addr);
	return 0;
}

CU_API cuMemHostGetFlags(unsigned *flags, void *p)
{
	VGPU_API();
	struct vgpu_hostrange r;
	if (!flags || !vgpu_hostmap_find(p, 1, &r))
		return VGPU_E_INVALID_VALUE;
	*flags = r.flags;
	return 0;
}

CU_API cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
	VGPU_API();
	return vgpu_host_register(p, size, flags);
}
VGPU_ALIAS(cuMemHostRegister, cuMemHostRegister_v2);

CU_API cuMemHostUnregister(void *p)
{
	VGPU_API();
	return vgpu_host_unregister(p);
}

/* ---------------- streams ---------------- */

CU_API cuStreamCreateWithPriority(CUstream *ps, unsigned flags, int prio)
{
	VGPU_API();
	int d;
	if (!ps)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = ctx_dev(&d);
	if (rc)
		return rc;
	struct vgpu_stream *s = calloc(1, sizeof *s);
	if (!s)
		return VGPU_E_OUT_OF_MEMORY;
	rc = vgpu_stream_create(d, flags, prio, &s->handle);
	if (rc) {
		free(s);
		return rc;
	}
	s->dev = d;
	s->flags = flags;
	s->priority = prio;
	*ps = s;
	return 0;
}

CU_API cuStreamCreate(CUstream *ps, unsigned flags)
{
	VGPU_API();
	return cuStreamCreateWithPriority(ps, flags, 0);
}

CU_API cuStreamDestroy_v2(CUstream s)
{
	VGPU_API();
	if (!s || s == VGPU_STREAM_LEGACY || s == VGPU_STREAM_PER_THREAD)
		return VGPU_E_INVALID_HANDLE;
	struct vgpu_handle_req req = {.handle = s->handle};
	CUresult rc = vgpu_queue(VGPU_OP_STREAM_DESTROY, &req, sizeof req);
	free(s);
	return rc;
}
VGPU_ALIAS(cuStreamDestroy, cuStreamDestroy_v2);

CU_API cuStreamSynchronize(CUstream s)
{
	VGPU_API();
	return vgpu_simple(VGPU_OP_STREAM_SYNCHRONIZE, vgpu_stream_handle(s));
}
VGPU_ALIAS(cuStreamSynchronize_ptsz, cuStreamSynchronize);

CU_API cuStreamQuery(CUstream s)
{
	VGPU_API();
	return vgpu_simple(VGPU_OP_STREAM_QUERY, vgpu_stream_handle(s));
}
VGPU_ALIAS(cuStreamQuery_ptsz, cuStreamQuery);

CU_API cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	return vgpu_stream_wait_event(vgpu_stream_handle(s), e->handle, flags);
}
VGPU_ALIAS(cuStreamWaitEvent_ptsz, cuStreamWaitEvent);

CU_API cuStreamGetFlags(CUstream s, unsigned *flags)
{
	VGPU_API();
	if (!flags)
		return VGPU_E_INVALID_VALUE;
	*flags = vgpu_stream_handle(s) ? s->flags : 0;
	return 0;
}
VGPU_ALIAS(cuStreamGetFlags_ptsz, cuStreamGetFlags);

CU_API cuStreamGetPriority(CUstream s, int *prio)
{
	VGPU_API();
	if (!prio)
		return VGPU_E_INVALID_VALUE;
	*prio = vgpu_stream_handle(s) ? s->priority : 0;
	return 0;
}
VGPU_ALIAS(cuStreamGetPriority_ptsz, cuStreamGetPriority);

/* Stream attributes (CUstreamAttrID: access policy window 1,
 * synchronization policy 3, priority 8, memory sync domain map 9 and
 * domain 10), forwarded. CUstreamAttrValue is a union of 32 bytes in CUDA
 * 11 and 64 in 12+: only the attribute's own bytes are read or written. */
struct access_policy_window { /* CUaccessPolicyWindow (cuda.h) */
	uint64_t base;
	uint64_t bytes;
	float hit_ratio;
	uint32_t hit_prop, miss_prop;
};

static CUresult stream_attr_dev(CUstream s, uint32_t *dev)
{
	if (vgpu_stream_handle(s)) {
		*dev = (uint32_t)s->dev;
		return 0;
	}
	int d;
	CUresult rc = ctx_dev(&d);
	*dev = (uint32_t)d;
	return rc;
}

int vgpu_attr_encode(int attr, const void *value, struct vgpu_stream_attr_value *out)
{
	memset(out, 0, sizeof *out);
	switch (attr) {
	case 1: {
		struct access_policy_window w;
		memcpy(&w, value, sizeof w);
		out->window.base = w.base;
		out->window.bytes = w.bytes;
		memcpy(&out->window.hit_ratio, &w.hit_ratio, 4);
		out->window.hit_prop = w.hit_prop;
		out->window.miss_prop = w.miss_prop;
		return 0;
	}
	case 2: case 3: case 8: case 10: {
		int32_t v;
		memcpy(&v, value, sizeof v);
		out->value = (uint32_t)v;
		return 0;
	}
	case 9: {
		const uint8_t *m = value;
		out->value = m[0] | (uint32_t)m[1] << 8;
		return 0;
	}
	}
	return VGPU_E_INVALID_VALUE;
}

void vgpu_attr_decode(int attr, const struct vgpu_stream_attr_value *v, void *out)
{
	if (attr == 1) {
		struct access_policy_window w = {.base = v->window.base, .bytes = v->window.bytes,
			.hit_prop = v->window.hit_prop, .miss_prop = v->window.miss_prop};
		memcpy(&w.hit_ratio, &v->window.hit_ratio, 4);
		memcpy(out, &w, sizeof w);
	} else if (attr == 9) {
		uint8_t m[2] = {(uint8_t)v->value, (uint8_t)(v->value >> 8)};
		memcpy(out, m, sizeof m);
	} else {
		int32_t i = (int32_t)v->value;
		memcpy(out, &i, sizeof i);
	}
}

CU_API cuStreamSetAttribute(CUstream s, int attr, const void *value)
{
	VGPU_API();
	struct vgpu_stream_attr_req req = {.stream = vgpu_stream_handle(s), .attr = (uint32_t)attr};
	if (!value || attr == 2) /* COOPERATIVE: a launch's, not a stream's */
		return VGPU_E_INVALID_VALUE;
	CUresult rc = stream_attr_dev(s, &req.device);
	if (rc)
		return rc;
	if ((rc = vgpu_attr_encode(attr, value, &req.value)))
		return rc; /* not a stream attribute */
	rc = vgpu_call(VGPU_OP_STREAM_SET_ATTRIBUTE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (!rc && attr == 8 && vgpu_stream_handle(s))
		s->priority = (int)req.value.value;
	return rc;
}
VGPU_ALIAS(cuStreamSetAttribute_ptsz, cuStreamSetAttribute);

CU_API cuStreamGetAttribute(CUstream s, int attr, void *out)
{
	VGPU_API();
	struct vgpu_stream_attr_req req = {.stream = vgpu_stream_handle(s), .attr = (uint32_t)attr};
	struct vgpu_stream_attr_value rep = {0};
	if (!out || !(attr == 1 || attr == 3 || (attr >= 8 && attr <= 10)))
		return VGPU_E_INVALID_VALUE;
	CUresult rc = stream_attr_dev(s, &req.device);
	if (!rc)
		rc = vgpu_call(VGPU_OP_STREAM_GET_ATTRIBUTE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	vgpu_attr_decode(attr, &rep, out);
	return 0;
}
VGPU_ALIAS(cuStreamGetAttribute_ptsz, cuStreamGetAttribute);

CU_API cuStreamCopyAttributes(CUstream dst, CUstream src)
{
	VGPU_API();
	struct vgpu_stream_copy_attr_req req = {.dst = vgpu_stream_handle(dst), .src = vgpu_stream_handle(src)};
	CUresult rc = stream_attr_dev(vgpu_stream_handle(dst) ? dst : src, &req.device);
	if (!rc)
		rc = vgpu_call(VGPU_OP_STREAM_COPY_ATTRIBUTES, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (!rc && vgpu_stream_handle(dst))
		dst->priority = vgpu_stream_handle(src) ? src->priority : 0;
	return rc;
}
VGPU_ALIAS(cuStreamCopyAttributes_ptsz, cuStreamCopyAttributes);

/* ---------------- stream capture queries, ids, devices ----------------
 * A stream captures when the host's driver captures it
 * (cuStreamBeginCapture*, graph.c). NVIDIA's runtime and PyTorch's
 * allocator ask before much of their work, so the queries are answered
 * locally while no driver capture is in progress in the process, and by
 * the host (one round trip) while one is. */

static int capturing(CUstream s, unsigned long long *id)
{
	int status = 0;
	if (vgpu_cu_captures_active()) {
		/* A driver capture in progress somewhere in the process: the
		 * host knows which streams it holds (joined ones too). */
		if (vgpu_cu_capture_status(s, &status))
			status = 0;
	}
	if (status && id)
		*id = vgpu_stream_handle(s) ? s->capture_id : 0;
	return status; /* 0 NONE, 1 ACTIVE, 2 INVALIDATED */
}

CU_API cuStreamIsCapturing(CUstream s, int *status)
{
	VGPU_API();
	if (!status)
		return VGPU_E_INVALID_VALUE;
	*status = capturing(s, NULL);
	return 0;
}
VGPU_ALIAS(cuStreamIsCapturing_ptsz, cuStreamIsCapturing);

CU_API cuStreamGetCaptureInfo(CUstream s, int *status, unsigned long long *id)
{
	VGPU_API();
	if (!status)
		return VGPU_E_INVALID_VALUE;
	*status = capturing(s, id);
	return 0;
}
VGPU_ALIAS(cuStreamGetCaptureInfo_ptsz, cuStreamGetCaptureInfo);

/* _v2 adds the graph and the dependency set: not known here (the host's
 * driver holds the capture's graph). */
CU_API cuStreamGetCaptureInfo_v2(CUstream s, int *status, unsigned long long *id, void **graph,
				 const void **deps, size_t *ndeps)
{
	VGPU_API();
	if (!status)
		return VGPU_E_INVALID_VALUE;
	*status = capturing(s, id);
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (ndeps)
		*ndeps = 0;
	return 0;
}
VGPU_ALIAS(cuStreamGetCaptureInfo_v2_ptsz, cuStreamGetCaptureInfo_v2);

/* _v3 adds the edge data of the dependencies. */
CU_API cuStreamGetCaptureInfo_v3(CUstream s, int *status, unsigned long long *id, void **graph,
				 const void **deps, const void **edges, size_t *ndeps)
{
	VGPU_API();
	if (edges)
		*edges = NULL;
	return cuStreamGetCaptureInfo_v2(s, status, id, graph, deps, ndeps);
}
VGPU_ALIAS(cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo_v3);

/* The calling thread's capture interaction mode (CU_STREAM_CAPTURE_MODE_*:
 * global 0, thread-local 1, relaxed 2), exchanged as the driver does. */
static __thread int capture_mode;

CU_API cuThreadExchangeStreamCaptureMode(int *mode)
{
	VGPU_API();
	if (!mode || *mode < 0 || *mode > 2)
		return VGPU_E_INVALID_VALUE;
	int old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return 0;
}

/* Stream ids, unique in the process: a created stream's host handle, the
 * legacy stream 1, each thread's per-thread stream its own number. */
#define STREAM_ID_PER_THREAD (1ULL << 62)
static unsigned long long next_thread_stream_id;
static __thread unsigned long long thread_stream_id;

static CUresult stream_id(CUstream s, int per_thread_default, unsigned long long *id)
{
	if (!id)
		return VGPU_E_INVALID_VALUE;
	if (vgpu_stream_handle(s)) {
		*id = s->handle;
	} else if (s == VGPU_STREAM_PER_THREAD || (!s && per_thread_default)) {
		if (!thread_stream_id)
			thread_stream_id = STREAM_ID_PER_THREAD | __atomic_add_fetch(&next_thread_stream_id, 1, __ATOMIC_RELAXED);
		*id = thread_stream_id;
	} else {
		*id = 1;
	}
	return 0;
}

CU_API cuStreamGetId(CUstream s, unsigned long long *id)
{
	VGPU_API();
	return stream_id(s, 0, id);
}

CU_API cuStreamGetId_ptsz(CUstream s, unsigned long long *id)
{
	VGPU_API();
	return stream_id(s, 1, id); /* the NULL stream is the thread's own */
}

CU_API cuStreamGetDevice(CUstream s, CUdevice *dev)
{
	VGPU_API();
	if (!dev)
		return VGPU_E_INVALID_VALUE;
	if (vgpu_stream_handle(s)) {
		*dev = s->dev;
		return 0;
	}
	return ctx_dev(dev); /* a default stream is the current context's */
}
VGPU_ALIAS(cuStreamGetDevice_ptsz, cuStreamGetDevice);

struct cb {
	CUhostFn fn;
	CUstreamCallback scb;
	CUstream stream;
	void *user;
};

static void run_cb(void *p, int status)
{
	struct cb *c = p;
	if (c->fn)
		c->fn(c->user);
	else
		c->scb(c->stream, status, c->user);
	free(c);
}

CU_API cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user)
{
	VGPU_API();
	struct cb *c = calloc(1, sizeof *c);
	if (!c)
		return VGPU_E_OUT_OF_MEMORY;
	c->fn = fn;
	c->user = user;
	CUresult rc = vgpu_host_func(vgpu_stream_handle(s), run_cb, c);
	if (rc)
		free(c);
	return rc;
}
VGPU_ALIAS(cuLaunchHostFunc_ptsz, cuLaunchHostFunc);

CU_API cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *user, unsigned flags)
{
	VGPU_API();
	if (flags || !fn)
		return VGPU_E_INVALID_VALUE;
	struct cb *c = calloc(1, sizeof *c);
	if (!c)
		return VGPU_E_OUT_OF_MEMORY;
	c->scb = fn;
	c->stream = s;
	c->user = user;
	CUresult rc = vgpu_host_func(vgpu_stream_handle(s), run_cb, c);
	if (rc)
		free(c);
	return rc;
}
VGPU_ALIAS(cuStreamAddCallback_ptsz, cuStreamAddCallback);

/* ---------------- events ---------------- */

/* Every live CUevent by host handle (vgpu_event_by_handle): chains of
 * hnext in buckets. */
#define EVENT_BUCKETS 256
static struct vgpu_event *event_table[EVENT_BUCKETS];
static pthread_mutex_t event_table_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned event_bucket(uint64_t h)
{
	return (unsigned)((h * 0x9e3779b97f4a7c15ull) >> 56) % EVENT_BUCKETS;
}

struct vgpu_event *vgpu_event_by_handle(uint64_t h)
{
	struct vgpu_event *e;
	pthread_mutex_lock(&event_table_mu);
	for (e = event_table[event_bucket(h)]; e && e->handle != h; e = e->hnext)
		;
	pthread_mutex_unlock(&event_table_mu);
	return e;
}

static void event_table_add(struct vgpu_event *e)
{
	pthread_mutex_lock(&event_table_mu);
	unsigned b = event_bucket(e->handle);
	e->hnext = event_table[b];
	event_table[b] = e;
	pthread_mutex_unlock(&event_table_mu);
}

static void event_table_remove(struct vgpu_event *e)
{
	pthread_mutex_lock(&event_table_mu);
	for (struct vgpu_event **p = &event_table[event_bucket(e->handle)]; *p; p = &(*p)->hnext)
		if (*p == e) {
			*p = e->hnext;
			break;
		}
	pthread_mutex_unlock(&event_table_mu);
}

CU_API cuEventCreate(CUevent *pe, unsigned flags)
{
	VGPU_API();
	int d;
	if (!pe)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = ctx_dev(&d);
	if (rc)
		return rc;
	struct vgpu_event *e = calloc(1, sizeof *e);
	if (!e)
		return VGPU_E_OUT_OF_MEMORY;
	rc = vgpu_event_create(d, flags, &e->handle);
	if (rc) {
		free(e);
		return rc;
	}
	e->dev = d;
	e->flags = flags;
	event_table_add(e);
	*pe = e;
	return 0;
}

CU_API cuEventDestroy_v2(CUevent e)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	struct vgpu_handle_req req = {.handle = e->handle};
	CUresult rc = vgpu_queue(VGPU_OP_EVENT_DESTROY, &req, sizeof req);
	event_table_remove(e);
	free(e);
	return rc;
}
VGPU_ALIAS(cuEventDestroy, cuEventDestroy_v2);

CU_API cuEventRecord(CUevent e, CUstream s)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	return vgpu_event_record(e->handle, vgpu_stream_handle(s), 0);
}
VGPU_ALIAS(cuEventRecord_ptsz, cuEventRecord);

CU_API cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	return vgpu_event_record(e->handle, vgpu_stream_handle(s), flags);
}
VGPU_ALIAS(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags);

CU_API cuEventSynchronize(CUevent e)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	return vgpu_simple(VGPU_OP_EVENT_SYNCHRONIZE, e->handle);
}

CU_API cuEventQuery(CUevent e)
{
	VGPU_API();
	if (!e)
		return VGPU_E_INVALID_HANDLE;
	return vgpu_simple(VGPU_OP_EVENT_QUERY, e->handle);
}

CU_API cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	VGPU_API();
	if (!ms || !a || !b)
		return VGPU_E_INVALID_VALUE;
	return vgpu_elapsed(a->handle, b->handle, ms);
}
VGPU_ALIAS(cuEventElapsedTime_v2, cuEventElapsedTime);

/* ---------------- misc ---------------- */

CU_API cuProfilerStart(void)
{
	VGPU_API();
	return 0;
}

CU_API cuProfilerStop(void)
{
	VGPU_API();
	return 0;
}

CU_API cuProfilerInitialize(const char *a, const char *b, int c)
{
	VGPU_API();
	(void)a;
	(void)b;
	(void)c;
	return 0;
}

/*
 * vgpu's own extensions, found with dlsym by tools that know vgpu (vgpu
 * bench); NVIDIA's library has neither, which is how they tell them apart.
 *
 * vgpuSetOption(key, value):
 *   VGPU_OPTION_COPY_ENGINE (1): the backend's memcpy engine for this
 *     process's copies (VGPU_ENGINE_*), sent to the host (SET_OPTION).
 *   0x100: library-local: 1 sends copy data inline in the frame instead of
 *     naming guest-physical segments (the path through the vsock stream).
 * vgpuGetStats(out, size): the backend's view of this session
 *   (struct vgpu_session_stats, GET_STATS); copies min(size, sizeof) bytes.
 */
#define VGPU_LIBOPT_INLINE 0x100u

VGPU_EXPORT int vgpuSetOption(uint32_t key, uint64_t value)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (key == VGPU_LIBOPT_INLINE) {
		vgpu_set_force_inline(value != 0);
		return 0;
	}
	struct vgpu_set_option_req req = {.key = key, .value = value};
	return vgpu_call(VGPU_OP_SET_OPTION, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

VGPU_EXPORT int vgpuGetStats(void *out, uint64_t size)
{
	struct vgpu_session_stats s;
	if (!out)
		return VGPU_E_INVALID_VALUE;
	int rc = vgpu_init();
	if (!rc)
		rc = vgpu_session_stats(&s);
	if (rc)
		return rc;
	memcpy(out, &s, size < sizeof s ? size : sizeof s);
	return 0;
}
