/*
 * rt_register.c - what nvcc's generated host code calls: fatbin, kernel
 * and variable registration, the <<<>>> launch path (CUDA 11/12:
 * __cudaPushCallConfiguration + cudaLaunchKernel; CUDA 13:
 * __cudaGetKernel + __cudaLaunchKernel), and the calls that name kernels
 * or variables by their host address (function attributes, occupancy,
 * symbols).
 *
 * A registered fatbin is sent to the host lazily, once per process and
 * device, the first time one of its kernels or variables is used.
 */
#include <stdlib.h>
#include <string.h>

#include "rt.h"

#define WRAPPER_MAGIC 0x466243b1
#define MAX_DEV 64

/* The wrapper nvcc puts in .nvFatBinSegment. */
struct fatbin_wrapper {
	int magic;
	int version;
	const void *data;
	void *filename_or_fatbins;
};

struct rt_fatbin {
	const void *wrapper; /* first: nvcc's code may look through the handle */
	const void *image;
	uint64_t size;
	pthread_mutex_t mu;
	struct vgpu_module *mod[MAX_DEV];
	int load_err[MAX_DEV];
};

#define KERNEL_MAGIC 0x6b65726eu /* "kern" */
struct rt_kernel {
	uint32_t magic;
	const void *host_fun;
	struct rt_fatbin *fb;
	char *name;
	struct vgpu_func *func[MAX_DEV];
	struct rt_kernel *next; /* in kernels[], by host stub */
	struct rt_kernel *hnext; /* in handles[], by its own address (cudaKernel_t) */
};

struct rt_var {
	const void *host_var;
	struct rt_fatbin *fb;
	char *name;
	size_t size;
	uint64_t dptr[MAX_DEV];
	struct rt_var *next;
};

#define NBUCKET 4096
static pthread_rwlock_t reg_mu = PTHREAD_RWLOCK_INITIALIZER;
static struct rt_kernel *kernels[NBUCKET];
static struct rt_kernel *handles[NBUCKET];
static struct rt_var *vars[NBUCKET];

static unsigned bucket(const void *p)
{
	uintptr_t x = (uintptr_t)p;
	x ^= x >> 17;
	x *= 0x9E3779B97F4A7C15ull;
	return (unsigned)(x >> 52) & (NBUCKET - 1);
}

/* ---------------- registration ---------------- */

VGPU_EXPORT void **__cudaRegisterFatBinary(void *fat)
{
	VGPU_API();
	struct rt_fatbin *fb = calloc(1, sizeof *fb);
	if (!fb) {
		VERR("out of memory registering a fatbin");
		return NULL;
	}
	pthread_mutex_init(&fb->mu, NULL);
	fb->wrapper = fat;
	const struct fatbin_wrapper *w = fat;
	if (w && w->magic == WRAPPER_MAGIC && (w->version == 1 || w->version == 2) && vgpu_fatbin_size(w->data)) {
		/* version 1: whole-program compilation; version 2 (-rdc): data is
		 * the nvlink-linked fatbin (the prelinked list beside it is only
		 * for JIT linking, which the linked image makes unnecessary) */
		fb->image = w->data;
		fb->size = vgpu_fatbin_size(w->data);
	} else if (w && w->magic == WRAPPER_MAGIC) {
		VWARN("fatbin wrapper version %d without a fatbin is not supported", w->version);
	} else if (w && vgpu_fatbin_size(w)) {
		fb->image = w; /* a bare fatbin */
		fb->size = vgpu_fatbin_size(w);
	} else {
		VWARN("__cudaRegisterFatBinary: unknown wrapper");
	}
	VDEBUG("registered fatbin %p (%llu bytes)", fat, (unsigned long long)fb->size);
	return (void **)fb;
}

VGPU_EXPORT void __cudaRegisterFatBinaryEnd(void **handle)
{
	VGPU_API();
	(void)handle; /* modules load lazily */
}

VGPU_EXPORT void __cudaUnregisterFatBinary(void **handle)
{
	VGPU_API();
	(void)handle;
	/* At exit the host drops the session's modules with the session; a
	 * round trip per fatbin here would only slow exit. Kernels keep
	 * pointing at the (leaked) record so late launches fail cleanly. */
}

VGPU_EXPORT char __cudaInitModule(void **handle)
{
	VGPU_API();
	(void)handle;
	return 1;
}

VGPU_EXPORT void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun, const char *device_name,
					int thread_limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
	VGPU_API();
	(void)device_fun;
	(void)thread_limit;
	(void)tid;
	(void)bid;
	(void)bdim;
	(void)gdim;
	(void)wsize;
	struct rt_kernel *k = calloc(1, sizeof *k);
	if (!k || !device_name) {
		free(k);
		return;
	}
	k->magic = KERNEL_MAGIC;
	k->host_fun = host_fun;
	k->fb = (struct rt_fatbin *)handle;
	k->name = strdup(device_name);
	unsigned b = bucket(host_fun), hb = bucket(k);
	pthread_rwlock_wrlock(&reg_mu);
	k->next = kernels[b];
	kernels[b] = k;
	k->hnext = handles[hb];
	handles[hb] = k;
	pthread_rwlock_unlock(&reg_mu);
}

VGPU_EXPORT void __cudaRegisterVar(void **handle, char *host_var, char *device_address, const char *device_name,
				   int ext, size_t size, int constant, int global)
{
	VGPU_API();
	(void)device_address;
	(void)ext;
	(void)constant;
	(void)global;
	struct rt_var *v = calloc(1, sizeof *v);
	if (!v || !device_name) {
		free(v);
		return;
	}
	v->host_var = host_var;
	v->fb = (struct rt_fatbin *)handle;
	v->name = strdup(device_name);
	v->size = size;
	unsigned b = bucket(host_var);
	pthread_rwlock_wrlock(&reg_mu);
	v->next = vars[b];
	vars[b] = v;
	pthread_rwlock_unlock(&reg_mu);
}

VGPU_EXPORT void __cudaRegisterManagedVar(void **handle, void **host_var_ptr, char *device_address,
					  const char *device_name, int ext, size_t size, int constant, int global)
{
	VGPU_API();
	static int once;
	(void)handle;
	(void)host_var_ptr;
	(void)device_address;
	(void)ext;
	(void)size;
	(void)constant;
	(void)global;
	if (!__atomic_exchange_n(&once, 1, __ATOMIC_RELAXED))
		VERR("__managed__ variable %s: managed memory is not supported by vgpu; using it will fail",
		     device_name ? device_name : "?");
}

VGPU_EXPORT void __cudaRegisterHostVar(void **handle, const char *device_name, char *host_var, size_t size)
{
	VGPU_API();
	(void)handle;
	(void)host_var;
	(void)size;
	VWARN("__cudaRegisterHostVar(%s) is not supported by vgpu", device_name ? device_name : "?");
}

#if VGPU_CUDART_ABI != 13
VGPU_EXPORT void __cudaRegisterTexture(void **handle, const void *host_var, const void **device_address,
				       const char *device_name, int dim, int norm, int ext)
{
	VGPU_API();
	(void)handle;
	(void)host_var;
	(void)device_address;
	(void)dim;
	(void)norm;
	(void)ext;
	VWARN("texture reference %s is not supported by vgpu", device_name ? device_name : "?");
}

VGPU_EXPORT void __cudaRegisterSurface(void **handle, const void *host_var, const void **device_address,
				       const char *device_name, int dim, int ext)
{
	VGPU_API();
	(void)handle;
	(void)host_var;
	(void)device_address;
	(void)dim;
	(void)ext;
	VWARN("surface reference %s is not supported by vgpu", device_name ? device_name : "?");
}
#endif

void rt_forget_device(int dev)
{
	if (dev < 0 || dev >= MAX_DEV)
		return;
	pthread_rwlock_wrlock(&reg_mu);
	for (unsigned b = 0; b < NBUCKET; b++) {
		for (struct rt_kernel *k = kernels[b]; k; k = k->next) {
			k->func[dev] = NULL;
			if (k->fb) {
				pthread_mutex_lock(&k->fb->mu);
				k->fb->mod[dev] = NULL; /* released by the host; the record stays */
				k->fb->load_err[dev] = 0;
				pthread_mutex_unlock(&k->fb->mu);
			}
		}
		for (struct rt_var *v = vars[b]; v; v = v->next) {
			v->dptr[dev] = 0;
			if (v->fb) {
				pthread_mutex_lock(&v->fb->mu);
				v->fb->mod[dev] = NULL;
				v->fb->load_err[dev] = 0;
				pthread_mutex_unlock(&v->fb->mu);
			}
		}
	}
	pthread_rwlock_unlock(&reg_mu);
}

/* ---------------- lookups ---------------- */

static struct rt_kernel *find_kernel(const void *host_fun)
{
	struct rt_kernel *k;
	pthread_rwlock_rdlock(&reg_mu);
	for (k = kernels[bucket(host_fun)]; k; k = k->next)
		if (k->host_fun == host_fun)
			break;
	if (!k) /* a cudaKernel_t from __cudaGetKernel / cudaGetKernel? */
		for (k = handles[bucket(host_fun)]; k; k = k->hnext)
			if ((const void *)k == host_fun)
				break;
	pthread_rwlock_unlock(&reg_mu);
	return k;
}

static struct rt_var *find_var(const void *host_var)
{
	struct rt_var *v;
	pthread_rwlock_rdlock(&reg_mu);
	for (v = vars[bucket(host_var)]; v; v = v->next)
		if (v->host_var == host_var)
			break;
	pthread_rwlock_unlock(&reg_mu);
	return v;
}

static cudaError_t fatbin_module(struct rt_fatbin *fb, int dev, struct vgpu_module **out)
{
	if (dev < 0 || dev >= MAX_DEV)
		return cudaErrorInvalidDevice;
	pthread_mutex_lock(&fb->mu);
	cudaError_t e = 0;
	if (!fb->mod[dev] && fb->load_err[dev]) {
		e = fb->load_err[dev]; /* the host refused this image: do not resend it */
	} else if (!fb->mod[dev]) {
		if (!fb->image || !fb->size)
			e = cudaErrorInvalidDeviceFunction;
		else
			e = vgpu_module_load(dev, fb->image, fb->size, VGPU_IMAGE_FATBIN, &fb->mod[dev]);
		if (e == VGPU_E_NO_BINARY_FOR_GPU || e == VGPU_E_INVALID_IMAGE || e == VGPU_E_INVALID_SOURCE) {
			VERR("the host refused the program's fatbin (%llu bytes) for device %d: error %d",
			     (unsigned long long)fb->size, dev, e);
			fb->load_err[dev] = e;
		}
	}
	*out = fb->mod[dev];
	pthread_mutex_unlock(&fb->mu);
	return e;
}

cudaError_t rt_kernel_func(const void *host_fun, struct vgpu_func **f)
{
	cudaError_t e = rt_init();
	if (e)
		return e;
	struct rt_kernel *k = find_kernel(host_fun);
	if (!k)
		return cudaErrorInvalidDeviceFunction;
	int dev = rt_device();
	if (dev >= MAX_DEV)
		return cudaErrorInvalidDevice;
	struct vgpu_func *fn = __atomic_load_n(&k->func[dev], __ATOMIC_ACQUIRE);
	if (!fn) {
		struct vgpu_module *m;
		e = fatbin_module(k->fb, dev, &m);
		if (!e)
			e = vgpu_module_get_function(m, k->name, &fn);
		if (e)
			return e == VGPU_E_NOT_FOUND ? cudaErrorInvalidDeviceFunction : e;
		__atomic_store_n(&k->func[dev], fn, __ATOMIC_RELEASE);
	}
	*f = fn;
	return 0;
}

/* Device address of a registered variable (or of a device pointer given
 * as a symbol, which CUDA also accepts). */
static cudaError_t symbol_addr(const void *sym, uint64_t *ptr, size_t *size)
{
	cudaError_t e = rt_init();
	if (e)
		return e;
	struct rt_var *v = find_var(sym);
	if (!v) {
		uint64_t base, sz;
		if (vgpu_devmap_find((uint64_t)(uintptr_t)sym, &base, &sz, NULL)) {
			*ptr = (uint64_t)(uintptr_t)sym;
			if (size)
				*size = sz - (*ptr - base);
			return 0;
		}
		return cudaErrorInvalidSymbol;
	}
	int dev = rt_device();
	if (dev >= MAX_DEV)
		return cudaErrorInvalidDevice;
	if (!v->dptr[dev]) {
		struct vgpu_module *m;
		uint64_t p, s;
		e = fatbin_module(v->fb, dev, &m);
		if (!e)
			e = vgpu_module_get_global(m, v->name, &p, &s);
		if (e)
			return e == VGPU_E_NOT_FOUND ? cudaErrorInvalidSymbol : e;
		v->dptr[dev] = p;
	}
	*ptr = v->dptr[dev];
	if (size)
		*size = v->size;
	return 0;
}

/* ---------------- launch ---------------- */

struct call_config {
	dim3 grid, block;
	size_t smem;
	cudaStream_t stream;
};
#define CONFIG_DEPTH 16
static __thread struct call_config configs[CONFIG_DEPTH];
static __thread int nconfig;

VGPU_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, void *stream)
{
	VGPU_API();
	if (nconfig >= CONFIG_DEPTH)
		return 1;
	configs[nconfig++] = (struct call_config){grid, block, smem, (cudaStream_t)stream};
	return 0;
}

RT_API __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *smem, void *stream)
{
	VGPU_API();
	if (!nconfig)
		return cudaErrorMissingConfiguration;
	struct call_config c = configs[--nconfig];
	if (grid)
		*grid = c.grid;
	if (block)
		*block = c.block;
	if (smem)
		*smem = c.smem;
	if (stream)
		*(cudaStream_t *)stream = c.stream;
	return cudaSuccess;
}

cudaError_t rt_launch(const void *host_fun, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
	struct vgpu_func *f;
	cudaError_t e = rt_kernel_func(host_fun, &f);
	if (e)
		return e;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
		return cudaErrorInvalidConfiguration;
	if (rt_capturing(s))
		return rt_capture_kernel(s, host_fun, f, grid, block, smem, args);
	uint32_t g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
	return vgpu_launch(f, vgpu_stream_handle(s), g, b, (uint32_t)smem, args, NULL);
}

RT_API cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(rt_launch(func, grid, block, args, smem, s));
}
VGPU_ALIAS(cudaLaunchKernel_ptsz, cudaLaunchKernel);


RT_API cudaLaunchKernelExC(const struct rt_launch_config *c, const void *func, void **args)
{
	VGPU_API();
	if (!c)
		RT_RETURN(cudaErrorInvalidValue);
	if (c->numAttrs) {
		static int once;
		vgpu_unsupported("cudaLaunchKernelExC launch attributes (ignored)", &once);
	}
	RT_RETURN(rt_launch(func, c->gridDim, c->blockDim, args, c->dynamicSmemBytes, c->stream));
}
VGPU_ALIAS(cudaLaunchKernelExC_ptsz, cudaLaunchKernelExC);

RT_API cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
	VGPU_API();
	/* The host launches it as an ordinary kernel; grid-wide sync works
	 * only if all blocks are resident, as CUDA requires anyway. */
	RT_RETURN(rt_launch(func, grid, block, args, smem, s));
}
VGPU_ALIAS(cudaLaunchCooperativeKernel_ptsz, cudaLaunchCooperativeKernel);

#if VGPU_CUDART_ABI >= 12
typedef void *cudaKernel_t;

RT_API __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun)
{
	VGPU_API();
	if (!kernel)
		return cudaErrorInvalidValue;
	struct rt_kernel *k = find_kernel(host_fun);
	if (!k)
		return cudaErrorInvalidDeviceFunction;
	*kernel = k;
	return cudaSuccess;
}

RT_API cudaGetKernel(cudaKernel_t *kernel, const void *host_fun)
{
	VGPU_API();
	RT_RETURN(__cudaGetKernel(kernel, host_fun));
}

RT_API __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(rt_launch(kernel, grid, block, args, smem, s));
}
VGPU_ALIAS(__cudaLaunchKernel_ptsz, __cudaLaunchKernel);
#endif

/* ---------------- functions ---------------- */

RT_API cudaFuncGetAttributes(struct rt_func_attrs *a, const void *func)
{
	VGPU_API();
	struct vgpu_func *f;
	const int32_t *v;
	if (!a)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_kernel_func(func, &f);
	if (!e)
		e = vgpu_func_attrs(f, &v);
	if (e)
		RT_RETURN(e);
	/* CUfunction_attribute numbers (cuda.h) */
	a->maxThreadsPerBlock = v[0];
	a->sharedSizeBytes = (size_t)v[1];
	a->constSizeBytes = (size_t)v[2];
	a->localSizeBytes = (size_t)v[3];
	a->numRegs = v[4];
	a->ptxVersion = v[5];
	a->binaryVersion = v[6];
	a->cacheModeCA = v[7];
	a->maxDynamicSharedSizeBytes = v[8];
	a->preferredShmemCarveout = v[9];
#if VGPU_CUDART_ABI >= 12
	struct rt_func_attrs12 *x = (struct rt_func_attrs12 *)a;
	x->clusterDimMustBeSet = v[10];
	x->requiredClusterWidth = v[11];
	x->requiredClusterHeight = v[12];
	x->requiredClusterDepth = v[13];
	x->nonPortableClusterSizeAllowed = v[14];
	x->clusterSchedulingPolicyPreference = v[15];
	memset(x->reserved, 0, sizeof x->reserved);
#endif
	return cudaSuccess;
}

RT_API cudaFuncSetAttribute(const void *func, int attr, int value)
{
	VGPU_API();
	struct vgpu_func *f;
	cudaError_t e = rt_kernel_func(func, &f);
	if (!e)
		e = vgpu_func_set_attr(f, attr == 8 ? 8 : attr == 9 ? 9 : attr, value);
	RT_RETURN(e);
}

RT_API cudaFuncSetCacheConfig(const void *func, int c)
{
	VGPU_API();
	(void)func;
	(void)c;
	return cudaSuccess;
}

RT_API cudaFuncSetSharedMemConfig(const void *func, int c)
{
	VGPU_API();
	(void)func;
	(void)c;
	return cudaSuccess;
}

RT_API cudaGetFuncBySymbol(struct vgpu_func **out, const void *func)
{
	VGPU_API();
	if (!out)
		RT_RETURN(cudaErrorInvalidValue);
	RT_RETURN(rt_kernel_func(func, out));
}

#if VGPU_CUDART_ABI >= 12
RT_API cudaFuncGetName(const char **name, const void *func)
{
	VGPU_API();
	struct rt_kernel *k = find_kernel(func);
	if (!name)
		RT_RETURN(cudaErrorInvalidValue);
	if (!k)
		RT_RETURN(cudaErrorInvalidDeviceFunction);
	*name = k->name;
	return cudaSuccess;
}

RT_API cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size)
{
	VGPU_API();
	struct vgpu_func *f;
	cudaError_t e = rt_kernel_func(func, &f);
	if (e)
		RT_RETURN(e);
	if (index >= f->nparams)
		RT_RETURN(cudaErrorInvalidValue);
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return cudaSuccess;
}
#endif

RT_API cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *func, int block, size_t smem,
							       unsigned flags)
{
	VGPU_API();
	struct vgpu_func *f;
	if (!n)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_kernel_func(func, &f);
	if (!e)
		e = vgpu_occupancy(f, block, smem, flags, n);
	RT_RETURN(e);
}

RT_API cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block, size_t smem)
{
	VGPU_API();
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, smem, 0);
}

RT_API cudaOccupancyAvailableDynamicSMemPerBlock(size_t *smem, const void *func, int nblocks, int block)
{
	VGPU_API();
	struct vgpu_func *f;
	const int32_t *v;
	int per_sm;
	if (!smem)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_kernel_func(func, &f);
	if (!e)
		e = vgpu_func_attrs(f, &v);
	if (!e)
		e = vgpu_device_attr(rt_device(), 81, &per_sm);
	if (e)
		RT_RETURN(e);
	(void)block;
	size_t avail = (size_t)per_sm / (size_t)(nblocks > 0 ? nblocks : 1);
	*smem = avail > (size_t)v[1] ? avail - (size_t)v[1] : 0;
	return cudaSuccess;
}

/* ---------------- symbols ---------------- */

RT_API cudaGetSymbolAddress(void **dp, const void *sym)
{
	VGPU_API();
	uint64_t p;
	if (!dp)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = symbol_addr(sym, &p, NULL);
	if (!e)
		*dp = (void *)(uintptr_t)p;
	RT_RETURN(e);
}

RT_API cudaGetSymbolSize(size_t *size, const void *sym)
{
	VGPU_API();
	uint64_t p;
	if (!size)
		RT_RETURN(cudaErrorInvalidValue);
	RT_RETURN(symbol_addr(sym, &p, size));
}

static cudaError_t symbol_copy(void *host, const void *sym, size_t n, size_t off, int kind, cudaStream_t s, int async,
			       int to_symbol)
{
	uint64_t p;
	size_t size;
	cudaError_t e = symbol_addr(sym, &p, &size);
	if (e)
		return e;
	if (off > size || n > size - off)
		return cudaErrorInvalidValue;
	void *dev = (void *)(uintptr_t)(p + off);
	if (to_symbol) {
		if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost)
			return cudaErrorInvalidMemcpyDirection;
		return rt_memcpy(dev, host, n, kind, s, async);
	}
	if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost)
		return cudaErrorInvalidMemcpyDirection;
	return rt_memcpy(host, dev, n, kind, s, async);
}

RT_API cudaMemcpyToSymbol(const void *sym, const void *src, size_t n, size_t off, int kind)
{
	VGPU_API();
	RT_RETURN(symbol_copy((void *)src, sym, n, off, kind, NULL, 0, 1));
}
VGPU_ALIAS(cudaMemcpyToSymbol_ptds, cudaMemcpyToSymbol);

RT_API cudaMemcpyFromSymbol(void *dst, const void *sym, size_t n, size_t off, int kind)
{
	VGPU_API();
	RT_RETURN(symbol_copy(dst, sym, n, off, kind, NULL, 0, 0));
}
VGPU_ALIAS(cudaMemcpyFromSymbol_ptds, cudaMemcpyFromSymbol);

RT_API cudaMemcpyToSymbolAsync(const void *sym, const void *src, size_t n, size_t off, int kind, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(symbol_copy((void *)src, sym, n, off, kind, s, 1, 1));
}
VGPU_ALIAS(cudaMemcpyToSymbolAsync_ptsz, cudaMemcpyToSymbolAsync);

RT_API cudaMemcpyFromSymbolAsync(void *dst, const void *sym, size_t n, size_t off, int kind, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(symbol_copy(dst, sym, n, off, kind, s, 1, 0));
}
VGPU_ALIAS(cudaMemcpyFromSymbolAsync_ptsz, cudaMemcpyFromSymbolAsync);
