/*
 * library.c - context-independent libraries and their kernels (CUDA 12.0+:
 * cuLibrary*, cuKernel*), loaded lazily as NVIDIA's driver loads them under
 * CUDA_MODULE_LOADING=LAZY.
 *
 * NVIDIA's runtime 12 and 13 hands the driver every fatbin of a program and
 * of each library it loads (PyTorch: hundreds of cuLibraryLoadData calls,
 * 298 MB, before its first tensor) and uses few of them. So
 * cuLibraryLoadData sends nothing: it records the image. An image inside a
 * read-only segment of a loaded object (the .nv_fatbin of the program or a
 * shared library, where the runtime's images live) stays valid while that
 * object is loaded and is kept by pointer; any other image is copied. The
 * library is loaded on the host (MODULE_LOAD) per device when something
 * needs it there: a kernel's function, a global, its module.
 *
 * A CUkernel is {library, name}, given out with no round trip. The driver
 * API takes it wherever it takes a CUfunction (launches, attributes,
 * occupancy: vgpu_func_resolve in core/module.c); it becomes the function of
 * the current context's device (cuKernelGetAttribute: the device named) on
 * first use, loading the library there if need be.
 *
 * CUDA_MODULE_LOADING=EAGER (vgpu_module_loading_mode) loads the image at
 * cuLibraryLoadData on the current context's device (device 0 with none).
 * As NVIDIA's driver does (measured on the H100), an image with no code for
 * the GPU is accepted there even so: CUDA_ERROR_NO_BINARY_FOR_GPU comes at
 * the first use of a kernel, in both modes.
 *
 * Where vgpu differs: the guest does not parse images, so a kernel name the
 * image lacks is CUDA_ERROR_NOT_FOUND at the kernel's first use, not at
 * cuLibraryGetKernel; cuLibraryGetKernelCount and cuLibraryEnumerateKernels
 * are not supported.
 *
 * A reset of a device's primary context releases the device's modules on
 * the host (vgpu_library_forget): a library loads there again when next
 * needed. The structures of the released modules stay allocated, so a
 * function a program kept from before the reset fails on the host (an
 * unknown handle) rather than reading freed memory.
 */
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_types.h"

#define CU_API VGPU_EXPORT CUresult

#define MAX_DEV 64
#define LIBRARY_MAGIC 0x6c726276u /* "vbrl" */
#define NBUCKET 4096

struct vgpu_library {
	uint32_t magic;
	const void *image;
	uint64_t size;
	int kind;
	void *copy; /* the library's own copy of the image, or NULL */
	pthread_mutex_t mu; /* mod, load_err */
	struct vgpu_module *mod[MAX_DEV];
	int load_err[MAX_DEV]; /* the host's answer about the image on a device: not asked again */
	struct vgpu_kernel *kernels; /* given out (lib_mu) */
	struct vgpu_library *next, **prev; /* live libraries (lib_mu) */
};

/* A CUkernel begins with a function whose magic is VGPU_KERNEL_MAGIC and
 * whose other fields are zero: code that takes it for a function without
 * vgpu_func_resolve sends host handle 0, which no host gives out (an error,
 * never a wild read). */
struct vgpu_kernel {
	struct vgpu_func as_func;
	struct vgpu_library *lib;
	char *name;
	struct vgpu_func **func; /* per device, once resolved (MAX_DEV entries) */
	struct vgpu_kernel *lnext; /* the library's kernels */
	struct vgpu_kernel *hnext; /* bucket[hash(lib, name)] */
};

/* Guards the list of libraries, each library's kernel list and the kernel
 * table. Lock order: lib_mu, then a library's mu. */
static pthread_rwlock_t lib_mu = PTHREAD_RWLOCK_INITIALIZER;
static struct vgpu_library *libraries;
static struct vgpu_kernel *bucket[NBUCKET];

static unsigned kernel_hash(const struct vgpu_library *l, const char *name)
{
	uint64_t h = (uintptr_t)l * 0x9E3779B97F4A7C15ull;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return (unsigned)(h >> 40) & (NBUCKET - 1);
}

static int valid_lib(const struct vgpu_library *l)
{
	return l && l->magic == LIBRARY_MAGIC;
}

static int valid_kernel(const struct vgpu_kernel *k)
{
	return k && k->as_func.magic == VGPU_KERNEL_MAGIC;
}

/* ---------------- where an image lives ---------------- */

struct span {
	uintptr_t lo, hi;
	int found;
};

static int span_in_object(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct span *s = arg;
	(void)sz;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W))
			continue;
		uintptr_t b = info->dlpi_addr + ph->p_vaddr, e = b + ph->p_filesz;
		if (s->lo >= b && s->hi <= e) {
			s->found = 1;
			return 1;
		}
	}
	return 0;
}

/* Whether [p, p+n) lies in a read-only segment of a loaded object (the
 * program or a shared library): bytes that stay as they are while the
 * object is loaded. */
static int in_loaded_object(const void *p, uint64_t n)
{
	struct span s = {(uintptr_t)p, (uintptr_t)p + n, 0};
	if (s.hi < s.lo)
		return 0;
	dl_iterate_phdr(span_in_object, &s);
	return s.found;
}

/* ---------------- loading ---------------- */

/* The library's module on device dev, loaded now if it is not yet. */
static CUresult lib_module(struct vgpu_library *l, int dev, struct vgpu_module **out)
{
	if (dev < 0 || dev >= MAX_DEV)
		return VGPU_E_INVALID_DEVICE;
	CUresult rc = 0;
	pthread_mutex_lock(&l->mu);
	if (!l->mod[dev]) {
		rc = l->load_err[dev];
		if (!rc) {
			rc = vgpu_module_load(dev, l->image, l->size, (uint32_t)l->kind, &l->mod[dev]);
			if (rc == VGPU_E_NO_BINARY_FOR_GPU || rc == VGPU_E_INVALID_IMAGE || rc == VGPU_E_INVALID_SOURCE ||
			    rc == 218 /* CUDA_ERROR_INVALID_PTX */) {
				VINFO("library %p (%llu bytes) does not load on device %d: error %d", (void *)l,
				      (unsigned long long)l->size, dev, rc);
				l->load_err[dev] = rc;
			}
		}
	}
	*out = l->mod[dev];
	pthread_mutex_unlock(&l->mu);
	return rc;
}

/* The current context's device. */
static CUresult cur_dev(int *d)
{
	return vgpu_ctx_device(d);
}

int vgpu_kernel_function(void *kernel, int dev, struct vgpu_func **out)
{
	struct vgpu_kernel *k = kernel;
	if (!valid_kernel(k))
		return VGPU_E_INVALID_HANDLE;
	CUresult rc = dev < 0 ? cur_dev(&dev) : 0;
	if (rc)
		return rc;
	if (dev >= MAX_DEV)
		return VGPU_E_INVALID_DEVICE;
	struct vgpu_func **fs = __atomic_load_n(&k->func, __ATOMIC_ACQUIRE);
	if (!fs) {
		struct vgpu_func **n = calloc(MAX_DEV, sizeof *n), **want = NULL;
		if (!n)
			return VGPU_E_OUT_OF_MEMORY;
		if (!__atomic_compare_exchange_n(&k->func, &want, n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			free(n); /* another thread's came first */
		fs = __atomic_load_n(&k->func, __ATOMIC_ACQUIRE);
	}
	struct vgpu_func *f = __atomic_load_n(&fs[dev], __ATOMIC_ACQUIRE);
	if (!f) {
		struct vgpu_module *m;
		rc = lib_module(k->lib, dev, &m);
		if (!rc)
			rc = vgpu_module_get_function(m, k->name, &f);
		if (rc)
			return rc;
		__atomic_store_n(&fs[dev], f, __ATOMIC_RELEASE);
	}
	*out = f;
	return 0;
}

void vgpu_library_forget(int dev)
{
	if (dev < 0 || dev >= MAX_DEV)
		return;
	pthread_rwlock_wrlock(&lib_mu);
	for (struct vgpu_library *l = libraries; l; l = l->next) {
		pthread_mutex_lock(&l->mu);
		l->mod[dev] = NULL; /* released by the host; the structure stays (see above) */
		l->load_err[dev] = 0;
		pthread_mutex_unlock(&l->mu);
		for (struct vgpu_kernel *k = l->kernels; k; k = k->lnext) {
			struct vgpu_func **fs = __atomic_load_n(&k->func, __ATOMIC_ACQUIRE);
			if (fs)
				__atomic_store_n(&fs[dev], NULL, __ATOMIC_RELEASE);
		}
	}
	pthread_rwlock_unlock(&lib_mu);
}

/* ---------------- libraries ---------------- */

/* A library of the image [img, img+size); copy: malloc'd bytes it owns
 * (NULL: keep img if it lives in a loaded object, else copy it). */
static CUresult library_new(CUlibrary *out, const void *img, uint64_t size, int kind, void *copy)
{
	if (!size)
		return VGPU_E_INVALID_IMAGE;
	struct vgpu_library *l = calloc(1, sizeof *l);
	if (!l) {
		free(copy);
		return VGPU_E_OUT_OF_MEMORY;
	}
	if (!copy && !in_loaded_object(img, size)) {
		copy = malloc(size);
		if (!copy) {
			free(l);
			return VGPU_E_OUT_OF_MEMORY;
		}
		memcpy(copy, img, size);
	}
	l->magic = LIBRARY_MAGIC;
	l->image = copy ? copy : img;
	l->copy = copy;
	l->size = size;
	l->kind = kind;
	pthread_mutex_init(&l->mu, NULL);
	if (vgpu_module_loading_mode() == 1) { /* EAGER */
		int d;
		struct vgpu_module *m;
		if (cur_dev(&d))
			d = 0; /* no context current: NVIDIA's runtime may load before it makes one */
		CUresult rc = lib_module(l, d, &m);
		if (rc && rc != VGPU_E_NO_BINARY_FOR_GPU) { /* no code for the GPU: at first kernel use */
			pthread_mutex_destroy(&l->mu);
			free(l->copy);
			free(l);
			return rc;
		}
	}
	pthread_rwlock_wrlock(&lib_mu);
	l->next = libraries;
	if (libraries)
		libraries->prev = &l->next;
	l->prev = &libraries;
	libraries = l;
	pthread_rwlock_unlock(&lib_mu);
	VDEBUG("library %p: %llu bytes, %s", (void *)l, (unsigned long long)size,
	       l->copy ? "copied" : "kept where it is loaded");
	*out = l;
	return 0;
}

CU_API cuLibraryLoadData(CUlibrary *lib, const void *code, void *jopts, void **jvals, unsigned njit, void *lopts,
			 void **lvals, unsigned nlib)
{
	VGPU_API();
	/* JIT and library options: the host's driver decides (the image is
	 * kept or copied as above whatever CU_LIBRARY_BINARY_IS_PRESERVED says) */
	(void)jopts;
	(void)jvals;
	(void)njit;
	(void)lopts;
	(void)lvals;
	(void)nlib;
	if (!lib || !code)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_cu_need_init();
	if (rc)
		return rc;
	const void *img;
	uint64_t size;
	int kind;
	rc = vgpu_image_span(code, &img, &size, &kind);
	if (rc)
		return rc;
	return library_new(lib, img, size, kind, NULL);
}

CU_API cuLibraryLoadFromFile(CUlibrary *lib, const char *path, void *jopts, void **jvals, unsigned njit, void *lopts,
			     void **lvals, unsigned nlib)
{
	VGPU_API();
	(void)jopts;
	(void)jvals;
	(void)njit;
	(void)lopts;
	(void)lvals;
	(void)nlib;
	if (!lib || !path)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_cu_need_init();
	if (rc)
		return rc;
	void *buf;
	uint64_t size;
	int kind;
	rc = vgpu_image_file(path, &buf, &size, &kind);
	if (rc)
		return rc;
	return library_new(lib, buf, size, kind, buf);
}

CU_API cuLibraryUnload(CUlibrary l)
{
	VGPU_API();
	pthread_rwlock_wrlock(&lib_mu);
	if (!valid_lib(l)) {
		pthread_rwlock_unlock(&lib_mu);
		return VGPU_E_INVALID_HANDLE;
	}
	l->magic = 0;
	*l->prev = l->next;
	if (l->next)
		l->next->prev = l->prev;
	struct vgpu_kernel *ks = l->kernels;
	for (struct vgpu_kernel *k = ks; k; k = k->lnext) {
		struct vgpu_kernel **pp = &bucket[kernel_hash(l, k->name)];
		while (*pp != k)
			pp = &(*pp)->hnext;
		*pp = k->hnext;
	}
	pthread_rwlock_unlock(&lib_mu);
	CUresult rc = 0;
	for (int d = 0; d < MAX_DEV; d++) {
		if (!l->mod[d])
			continue;
		CUresult r = vgpu_module_unload(l->mod[d]); /* frees its functions */
		if (!rc)
			rc = r;
	}
	for (struct vgpu_kernel *k = ks, *n; k; k = n) {
		n = k->lnext;
		k->as_func.magic = 0;
		free(k->func);
		free(k->name);
		free(k);
	}
	pthread_mutex_destroy(&l->mu);
	free(l->copy);
	free(l);
	return rc;
}

CU_API cuLibraryGetKernel(CUkernel *out, CUlibrary l, const char *name)
{
	VGPU_API();
	if (!out || !name)
		return VGPU_E_INVALID_VALUE;
	size_t n = strlen(name);
	if (!n || n > 4096) /* the host's longest kernel name */
		return VGPU_E_INVALID_VALUE;
	unsigned h = kernel_hash(l, name);
	pthread_rwlock_rdlock(&lib_mu);
	if (!valid_lib(l)) {
		pthread_rwlock_unlock(&lib_mu);
		return VGPU_E_INVALID_HANDLE;
	}
	struct vgpu_kernel *k;
	for (k = bucket[h]; k; k = k->hnext)
		if (k->lib == l && !strcmp(k->name, name))
			break;
	pthread_rwlock_unlock(&lib_mu);
	if (k) {
		*out = k;
		return 0;
	}
	struct vgpu_kernel *nk = calloc(1, sizeof *nk);
	char *nm = strdup(name);
	if (!nk || !nm) {
		free(nk);
		free(nm);
		return VGPU_E_OUT_OF_MEMORY;
	}
	nk->as_func.magic = VGPU_KERNEL_MAGIC;
	nk->lib = l;
	nk->name = nm;
	pthread_rwlock_wrlock(&lib_mu);
	if (!valid_lib(l)) { /* unloaded meanwhile */
		pthread_rwlock_unlock(&lib_mu);
		free(nm);
		free(nk);
		return VGPU_E_INVALID_HANDLE;
	}
	for (k = bucket[h]; k; k = k->hnext) /* another thread's may have come first */
		if (k->lib == l && !strcmp(k->name, name))
			break;
	if (!k) {
		nk->hnext = bucket[h];
		bucket[h] = nk;
		nk->lnext = l->kernels;
		l->kernels = nk;
		k = nk;
		nk = NULL;
	}
	pthread_rwlock_unlock(&lib_mu);
	if (nk) {
		free(nm);
		free(nk);
	}
	*out = k;
	return 0;
}

CU_API cuLibraryGetModule(CUmodule *m, CUlibrary l)
{
	VGPU_API();
	if (!m)
		return VGPU_E_INVALID_VALUE;
	if (!valid_lib(l))
		return VGPU_E_INVALID_HANDLE;
	int d;
	CUresult rc = cur_dev(&d);
	if (rc)
		return rc;
	return lib_module(l, d, m);
}

CU_API cuLibraryGetGlobal(CUdeviceptr *dp, size_t *bytes, CUlibrary l, const char *name)
{
	VGPU_API();
	if (!name)
		return VGPU_E_INVALID_VALUE;
	if (!valid_lib(l))
		return VGPU_E_INVALID_HANDLE;
	int d;
	struct vgpu_module *m;
	CUresult rc = cur_dev(&d);
	if (!rc)
		rc = lib_module(l, d, &m);
	uint64_t p, s;
	if (!rc)
		rc = vgpu_module_get_global(m, name, &p, &s);
	if (rc)
		return rc;
	if (dp)
		*dp = p;
	if (bytes)
		*bytes = s;
	return 0;
}

/* ---------------- kernels ---------------- */

CU_API cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	VGPU_API();
	if (!f)
		return VGPU_E_INVALID_VALUE;
	return vgpu_kernel_function(k, -1, f);
}

CU_API cuKernelGetLibrary(CUlibrary *l, CUkernel k)
{
	VGPU_API();
	if (!l)
		return VGPU_E_INVALID_VALUE;
	if (!valid_kernel(k))
		return VGPU_E_INVALID_HANDLE;
	*l = k->lib;
	return 0;
}

CU_API cuKernelGetName(const char **name, CUkernel k)
{
	VGPU_API();
	if (!name)
		return VGPU_E_INVALID_VALUE;
	if (!valid_kernel(k))
		return VGPU_E_INVALID_HANDLE;
	*name = k->name;
	return 0;
}

/* k's function on device d, which must exist. */
static CUresult kernel_on(CUkernel k, CUdevice d, CUfunction *f)
{
	int n;
	CUresult rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (d < 0 || d >= n)
		return VGPU_E_INVALID_DEVICE;
	return vgpu_kernel_function(k, d, f);
}

CU_API cuKernelGetAttribute(int *v, int attr, CUkernel k, CUdevice d)
{
	VGPU_API();
	if (!v || attr < 0 || attr >= (int)VGPU_MAX_FUNC_ATTRS)
		return VGPU_E_INVALID_VALUE;
	CUfunction f;
	const int32_t *a;
	CUresult rc = kernel_on(k, d, &f);
	if (!rc)
		rc = vgpu_func_attrs(f, &a);
	if (!rc)
		*v = a[attr];
	return rc;
}

CU_API cuKernelSetAttribute(int attr, int v, CUkernel k, CUdevice d)
{
	VGPU_API();
	CUfunction f;
	CUresult rc = kernel_on(k, d, &f);
	if (!rc)
		rc = vgpu_func_set_attr(f, attr, v);
	return rc;
}

CU_API cuKernelGetParamInfo(CUkernel k, size_t index, size_t *offset, size_t *size)
{
	VGPU_API();
	CUfunction f;
	CUresult rc = vgpu_kernel_function(k, -1, &f);
	if (rc)
		return rc;
	if (index >= f->nparams)
		return VGPU_E_INVALID_VALUE;
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return 0;
}

CU_API cuKernelSetCacheConfig(CUkernel k, int c, CUdevice d)
{
	VGPU_API();
	(void)c;
	(void)d;
	return valid_kernel(k) ? 0 : VGPU_E_INVALID_HANDLE; /* a preference: vgpu keeps the driver's */
}
