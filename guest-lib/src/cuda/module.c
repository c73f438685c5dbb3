/*
 * module.c - driver API modules, functions, globals, launches and
 * occupancy (libcuda.so.1), on the core's module layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_types.h"

#define CU_API VGPU_EXPORT CUresult

static CUresult cur_dev(int *d)
{
	return vgpu_ctx_device(d);
}

/* Image kind from its first bytes: fatbin, ELF cubin, or PTX text. */
static int image_kind(const void *img, uint64_t *size)
{
	const uint8_t *p = img;
	uint64_t fs = vgpu_fatbin_size(img);
	if (fs) {
		*size = fs;
		return VGPU_IMAGE_FATBIN;
	}
	if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
		/* ELF64: the image ends at the last byte any header or section
		 * names (the tables need not come last). */
		uint64_t shoff, phoff, end;
		uint16_t shentsize, shnum, phentsize, phnum;
		memcpy(&phoff, p + 0x20, 8);
		memcpy(&shoff, p + 0x28, 8);
		memcpy(&phentsize, p + 0x36, 2);
		memcpy(&phnum, p + 0x38, 2);
		memcpy(&shentsize, p + 0x3a, 2);
		memcpy(&shnum, p + 0x3c, 2);
		end = shoff + (uint64_t)shnum * shentsize;
		if (phoff + (uint64_t)phnum * phentsize > end)
			end = phoff + (uint64_t)phnum * phentsize;
		for (uint16_t i = 0; shentsize >= 0x28 && i < shnum; i++) {
			const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
			uint32_t type;
			uint64_t off, sz;
			memcpy(&type, sh + 4, 4);
			memcpy(&off, sh + 0x18, 8);
			memcpy(&sz, sh + 0x20, 8);
			if (type != 8 /* SHT_NOBITS */ && off + sz > end)
				end = off + sz;
		}
		for (uint16_t i = 0; phentsize >= 0x28 && i < phnum; i++) {
			const uint8_t *ph = p + phoff + (uint64_t)i * phentsize;
			uint64_t off, fsz;
			memcpy(&off, ph + 0x08, 8);
			memcpy(&fsz, ph + 0x20, 8);
			if (off + fsz > end)
				end = off + fsz;
		}
		*size = end;
		return VGPU_IMAGE_CUBIN;
	}
	*size = strlen((const char *)img) + 1;
	return VGPU_IMAGE_PTX;
}

/* Loads on device d, or on the current context's device when d < 0. */
static CUresult load(CUmodule *pm, const void *img, uint64_t size, int kind, int d)
{
	if (!pm || !img)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = d < 0 ? cur_dev(&d) : 0;
	if (rc)
		return rc;
	return vgpu_module_load(d, img, size, (uint32_t)kind, pm);
}

/* An image as cuModuleLoadData takes it (a fatbin wrapper, a fatbin, an ELF
 * cubin or PTX text): where its bytes start, how many, their VGPU_IMAGE_*. */
CUresult vgpu_image_span(const void *img, const void **start, uint64_t *size, int *kind)
{
	if (!img)
		return VGPU_E_INVALID_VALUE;
	uint32_t magic;
	memcpy(&magic, img, 4);
	if (magic == 0x466243b1) { /* a fatbin wrapper: {magic, version, data, ...} */
		const void *data;
		memcpy(&data, (const uint8_t *)img + 8, sizeof data);
		if (!data || !vgpu_fatbin_size(data))
			return VGPU_E_INVALID_IMAGE;
		img = data;
	}
	*kind = image_kind(img, size);
	*start = img;
	return 0;
}

/* An image as cuModuleLoadData takes it, loaded on device d (< 0: the
 * current context's). */
static CUresult load_data(CUmodule *pm, const void *img, int d)
{
	const void *start;
	uint64_t size;
	int kind;
	CUresult rc = vgpu_image_span(img, &start, &size, &kind);
	if (rc)
		return rc;
	return load(pm, start, size, kind, d);
}

CU_API cuModuleLoadData(CUmodule *pm, const void *img)
{
	VGPU_API();
	return load_data(pm, img, -1);
}

CU_API cuModuleLoadDataEx(CUmodule *pm, const void *img, unsigned n, void *opts, void **vals)
{
	VGPU_API();
	(void)n;
	(void)opts;
	(void)vals; /* JIT options: the host driver decides */
	return cuModuleLoadData(pm, img);
}

CU_API cuModuleLoadFatBinary(CUmodule *pm, const void *img)
{
	VGPU_API();
	return cuModuleLoadData(pm, img);
}

CUresult vgpu_image_file(const char *path, void **image, uint64_t *size, int *kind)
{
	FILE *f = fopen(path, "rbe");
	if (!f)
		return VGPU_E_FILE_NOT_FOUND;
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len + 65536 + 1 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			uint8_t *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return VGPU_E_OUT_OF_MEMORY;
			}
			buf = nb;
		}
		size_t r = fread(buf + len, 1, 65536, f);
		len += r;
		if (r == 0)
			break;
	}
	fclose(f);
	if (!len) {
		free(buf);
		return VGPU_E_INVALID_IMAGE;
	}
	buf[len] = 0;
	*kind = image_kind(buf, size);
	*size = *kind == VGPU_IMAGE_PTX ? len + 1 : len; /* a file is the whole image */
	*image = buf;
	return 0;
}

CU_API cuModuleLoad(CUmodule *pm, const char *path)
{
	VGPU_API();
	if (!pm || !path)
		return VGPU_E_INVALID_VALUE;
	void *buf;
	uint64_t size;
	int kind;
	CUresult rc = vgpu_image_file(path, &buf, &size, &kind);
	if (rc)
		return rc;
	rc = load(pm, buf, size, kind, -1);
	free(buf);
	return rc;
}

CU_API cuModuleUnload(CUmodule m)
{
	VGPU_API();
	return vgpu_module_unload(m);
}

CU_API cuModuleGetFunctionCount(unsigned *count, CUmodule m)
{
	VGPU_API();
	uint32_t n = 0;
	if (!count || !m)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_module_functions(m, NULL, NULL, &n);
	if (!rc)
		*count = n;
	return rc;
}

struct fn_array {
	CUfunction *fns;
	unsigned n, got;
};

static int fn_array_add(void *user, struct vgpu_func *f)
{
	struct fn_array *a = user;
	a->fns[a->got++] = f;
	return a->got == a->n;
}

/* At most n of m's kernels, in the driver's order. */
CU_API cuModuleEnumerateFunctions(CUfunction *fns, unsigned n, CUmodule m)
{
	VGPU_API();
	if (!fns || !m || !n)
		return VGPU_E_INVALID_VALUE;
	struct fn_array a = {fns, n, 0};
	return vgpu_module_functions(m, fn_array_add, &a, NULL);
}

CU_API cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name)
{
	VGPU_API();
	if (!pf || !m || !name)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_module_get_function(m, name, pf);
	if (rc)
		VDEBUG("cuModuleGetFunction(%s): error %d", name, rc);
	return rc;
}

CU_API cuModuleGetGlobal_v2(CUdeviceptr *dp, size_t *bytes, CUmodule m, const char *name)
{
	VGPU_API();
	uint64_t p, s;
	CUresult rc = vgpu_module_get_global(m, name, &p, &s);
	if (rc)
		VDEBUG("cuModuleGetGlobal(%s): error %d", name ? name : "(null)", rc);
	if (!rc) {
		if (dp)
			*dp = p;
		if (bytes)
			*bytes = s;
	}
	return rc;
}

static int is_func(CUfunction f);

/*
 * A CUkernel is not a function here: NVIDIA's driver answers
 * CUDA_ERROR_INVALID_HANDLE (measured on the H100 in LAZY and EAGER,
 * bench/results/2026-11-27-h100-driver); cuKernelGetAttribute is the call.
 */
CU_API cuFuncGetAttribute(int *v, int attr, CUfunction f)
{
	VGPU_API();
	const int32_t *a;
	if (!v || attr < 0 || attr >= (int)VGPU_MAX_FUNC_ATTRS)
		return VGPU_E_INVALID_VALUE;
	if (f && !is_func(f))
		return VGPU_E_INVALID_HANDLE;
	CUresult rc = vgpu_func_attrs(f, &a);
	if (!rc)
		*v = a[attr];
	return rc;
}

CU_API cuFuncSetAttribute(CUfunction f, int attr, int v)
{
	VGPU_API();
	return vgpu_func_set_attr(f, attr, v);
}

CU_API cuFuncSetCacheConfig(CUfunction f, int c)
{
	VGPU_API();
	(void)f;
	(void)c;
	return 0;
}

CU_API cuFuncSetSharedMemConfig(CUfunction f, int c)
{
	VGPU_API();
	(void)f;
	(void)c;
	return 0;
}

/*
 * The calls below take a function only: given a CUkernel, NVIDIA's driver
 * answers cuFuncGetParamInfo with CUDA_ERROR_INVALID_HANDLE (measured on
 * the H100, bench/results/2026-11-25-h100-lazy-libraries), and these do
 * the same, as does cuFuncGetAttribute above (measured 2026-11-27).
 * (Launches and occupancy take either: core/module.c.)
 */
static int is_func(CUfunction f)
{
	return f && f->magic == VGPU_FUNC_MAGIC;
}

CU_API cuFuncGetName(const char **name, CUfunction f)
{
	VGPU_API();
	if (!name || !f)
		return VGPU_E_INVALID_VALUE;
	if (!is_func(f))
		return VGPU_E_INVALID_HANDLE;
	*name = f->name;
	return 0;
}

CU_API cuFuncGetModule(CUmodule *m, CUfunction f)
{
	VGPU_API();
	if (!m || !f)
		return VGPU_E_INVALID_VALUE;
	if (!is_func(f))
		return VGPU_E_INVALID_HANDLE;
	*m = f->mod;
	return 0;
}

CU_API cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
	VGPU_API();
	if (!is_func(f))
		return VGPU_E_INVALID_HANDLE;
	if (index >= f->nparams)
		return VGPU_E_INVALID_VALUE;
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return 0;
}

CU_API cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		      unsigned smem, CUstream s, void **params, void **extra)
{
	VGPU_API();
	uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	return vgpu_launch(f, vgpu_stream_handle(s), g, b, smem, params, extra);
}
VGPU_ALIAS(cuLaunchKernel_ptsz, cuLaunchKernel);

/* CUlaunchAttribute (cuda.h): an id, padding to 8 bytes, a 64-byte value. */
struct launch_attr {
	uint32_t id, pad;
	union {
		uint8_t bytes[64];
		uint32_t u32[16];
		int32_t i32;
	} v;
};

/*
 * What cuLaunchKernelEx does with a launch attribute. The cluster shape (4)
 * and scheduling policy (5) go to the host with the launch (cl); so do, in
 * la when the caller passes one (LAUNCH_KERNEL_ATTRS), the access policy
 * window 1, cooperative 2, synchronization policy 3, programmatic stream
 * serialization 6, priority 8, memory sync domain map 9 and domain 10 and
 * the shared memory carveout 14 (where la is NULL, occupancy, they do not
 * matter). Whatever else changes a launch's meaning (the events of 7 and
 * 12, any other id) is refused with CUDA_ERROR_NOT_SUPPORTED rather than
 * run wrongly, logged once.
 */
static CUresult launch_attr_ok(const struct launch_attr *a, struct vgpu_cluster *cl, struct vgpu_launch_attrs *la)
{
	static int seen[32];
	int *once = &seen[a->id < 31 ? a->id : 31];
	struct vgpu_launch_attrs ignored;
	if (!la)
		la = &ignored;
	switch (a->id) {
	case 0: /* CU_LAUNCH_ATTRIBUTE_IGNORE: an empty entry */
		return 0;
	case 1: {
		struct vgpu_access_policy_window *w = &la->window;
		memcpy(&w->base, &a->v.bytes[0], 8);
		memcpy(&w->bytes, &a->v.bytes[8], 8);
		memcpy(&w->hit_ratio, &a->v.bytes[16], 4);
		memcpy(&w->hit_prop, &a->v.bytes[20], 4);
		memcpy(&w->miss_prop, &a->v.bytes[24], 4);
		break;
	}
	case 2:
		if (!a->v.i32)
			return 0; /* an ordinary launch */
		la->cooperative = 1;
		break;
	case 3: la->sync_policy = a->v.u32[0]; break;
	case 6: la->programmatic_serialization = a->v.i32 != 0; break;
	case 8: la->priority = a->v.i32; break;
	case 9: la->mem_sync_domain_map = a->v.bytes[0] | (uint32_t)a->v.bytes[1] << 8; break;
	case 10: la->mem_sync_domain = a->v.u32[0]; break;
	case 14: la->carveout = a->v.u32[0]; break;
	case 4: /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
		cl->x = a->v.u32[0];
		cl->y = a->v.u32[1];
		cl->z = a->v.u32[2];
		return 0;
	case 5: /* CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE */
		cl->policy = a->v.u32[0];
		return 0;
	default:
		if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
			VWARN("cuLaunchKernelEx launch attribute %u is not supported by vgpu; returning an error", a->id);
		return VGPU_E_NOT_SUPPORTED;
	}
	la->has |= 1u << a->id;
	return 0;
}

/* The attributes of a CUlaunchConfig (unknown ones refused as
 * launch_attr_ok says); *any says whether there were cluster attributes. */
static CUresult launch_cluster(const CUlaunchConfig *c, struct vgpu_cluster *cl, struct vgpu_launch_attrs *la, int *any)
{
	memset(cl, 0, sizeof *cl);
	if (la)
		memset(la, 0, sizeof *la);
	if (c->numAttrs && !c->attrs)
		return VGPU_E_INVALID_VALUE;
	for (unsigned i = 0; i < c->numAttrs; i++) {
		CUresult rc = launch_attr_ok(&((const struct launch_attr *)c->attrs)[i], cl, la);
		if (rc)
			return rc;
	}
	*any = cl->x || cl->y || cl->z || cl->policy;
	return 0;
}

CU_API cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	VGPU_API();
	if (!c)
		return VGPU_E_INVALID_VALUE;
	uint32_t g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ}, b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
	struct vgpu_cluster cl;
	struct vgpu_launch_attrs la;
	int any;
	CUresult rc = launch_cluster(c, &cl, &la, &any);
	if (rc)
		return rc;
	if (la.has)
		return vgpu_launch_attrs(f, vgpu_stream_handle(c->hStream), g, b, c->sharedMemBytes, &cl, &la, params, extra);
	if (any)
		return vgpu_launch_cluster(f, vgpu_stream_handle(c->hStream), g, b, c->sharedMemBytes, &cl, params, extra);
	return vgpu_launch(f, vgpu_stream_handle(c->hStream), g, b, c->sharedMemBytes, params, extra);
}
VGPU_ALIAS(cuLaunchKernelEx_ptsz, cuLaunchKernelEx);

/* A launch whose blocks are all resident at once (grid synchronization):
 * the host's driver checks the grid against the occupancy calculator. */
CU_API cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				 unsigned bz, unsigned smem, CUstream s, void **params)
{
	VGPU_API();
	uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	struct vgpu_cluster cl = {0};
	struct vgpu_launch_attrs la = {.has = 1u << 2, .cooperative = 1};
	return vgpu_launch_attrs(f, vgpu_stream_handle(s), g, b, smem, &cl, &la, params, NULL);
}
VGPU_ALIAS(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel);

CU_API cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t smem,
							     unsigned flags)
{
	VGPU_API();
	if (!n)
		return VGPU_E_INVALID_VALUE;
	return vgpu_occupancy(f, block, smem, flags, n);
}

CU_API cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem)
{
	VGPU_API();
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, smem, 0);
}

/* How many clusters of f launched as c says can be resident at once,
 * computed by the host's driver (cuBLAS asks this of every device). */
CU_API cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c)
{
	VGPU_API();
	if (!n || !c)
		return VGPU_E_INVALID_VALUE;
	uint32_t g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ}, b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
	struct vgpu_cluster cl;
	int any;
	CUresult rc = launch_cluster(c, &cl, NULL, &any);
	if (rc)
		return rc;
	return vgpu_occupancy_clusters(f, g, b, c->sharedMemBytes, &cl, n);
}

/*
 * The most dynamic shared memory a block of f may ask for so that nblocks
 * blocks of bsize threads still fit on one SM, computed here from the
 * device's and the function's attributes the way the driver's occupancy
 * calculator treats shared memory: an equal share of the SM's shared
 * memory, less the per-block reservation and f's static shared memory, in
 * 128-byte allocation units, at most the opt-in per-block maximum; 0 when
 * that many blocks do not fit by threads or block count. (Registers are not
 * counted: the host does not report a per-SM register file split.)
 */
CU_API cuOccupancyAvailableDynamicSMemPerBlock(size_t *size, CUfunction f, int nblocks, int bsize)
{
	VGPU_API();
	const int32_t *a;
	int d;
	if (!size || nblocks <= 0 || bsize <= 0)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_func_attrs(f, &a);
	if (!rc)
		rc = cur_dev(&d);
	if (rc)
		return rc;
	int per_sm = 0, optin = 0, reserved = 0, threads_sm = 0, blocks_sm = 0;
	if ((rc = vgpu_device_attr(d, 81, &per_sm)) || /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
	    (rc = vgpu_device_attr(d, 97, &optin)) ||  /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
	    (rc = vgpu_device_attr(d, 111, &reserved)) || /* RESERVED_SHARED_MEMORY_PER_BLOCK */
	    (rc = vgpu_device_attr(d, 39, &threads_sm)) || /* MAX_THREADS_PER_MULTIPROCESSOR */
	    (rc = vgpu_device_attr(d, 106, &blocks_sm)))   /* MAX_BLOCKS_PER_MULTIPROCESSOR */
		return rc;
	long long stat = a[1] > 0 ? a[1] : 0; /* SHARED_SIZE_BYTES */
	if ((a[0] > 0 && bsize > a[0]) || (threads_sm > 0 && (long long)nblocks * bsize > threads_sm) ||
	    (blocks_sm > 0 && nblocks > blocks_sm)) {
		*size = 0;
		return 0;
	}
	long long avail = (long long)per_sm / nblocks - reserved - stat;
	if (optin > 0 && avail > optin - stat)
		avail = optin - stat;
	avail &= ~127LL;
	*size = avail > 0 ? (size_t)avail : 0;
	return 0;
}

typedef size_t (*CUoccupancyB2DSize)(int block);

CU_API cuOccupancyMaxPotentialBlockSizeWithFlags(int *grid, int *block, CUfunction f, CUoccupancyB2DSize fn,
						 size_t smem, int limit, unsigned flags)
{
	VGPU_API();
	const int32_t *a;
	if (!grid || !block)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_func_attrs(f, &a);
	if (rc)
		return rc;
	int d, sms = 1;
	if (!cur_dev(&d))
		vgpu_device_attr(d, 16, &sms); /* MULTIPROCESSOR_COUNT */
	int maxb = a[0] > 0 ? a[0] : 1024; /* MAX_THREADS_PER_BLOCK */
	if (limit > 0 && limit < maxb)
		maxb = limit;
	int best = 0, bestb = 32;
	for (int b = (maxb / 32) * 32; b >= 32; b -= 32) {
		int n = 0;
		size_t s = fn ? fn(b) : smem;
		if (vgpu_occupancy(f, b, s, flags, &n))
			break;
		if (n * b > best) {
			best = n * b;
			bestb = b;
		}
		if (b <= maxb / 4)
			break; /* a few candidates are enough; each is a round trip */
	}
	*block = bestb;
	*grid = best / bestb * sms;
	if (*grid <= 0)
		*grid = sms;
	return 0;
}

CU_API cuOccupancyMaxPotentialBlockSize(int *grid, int *block, CUfunction f, CUoccupancyB2DSize fn, size_t smem,
					int limit)
{
	VGPU_API();
	return cuOccupancyMaxPotentialBlockSizeWithFlags(grid, block, f, fn, smem, limit, 0);
}
