/*
 * context.c - driver API contexts (libcuda.so.1), all guest-local: the host
 * keeps one context per device and session, so a guest context is the
 * device it names plus what NVIDIA's runtime keeps in it.
 *
 * - Primary contexts: one per device in a fixed table; retained with
 *   cuDevicePrimaryCtxRetain (active while the count is > 0), reset with
 *   cuDevicePrimaryCtxReset. The handle exists before the first retain:
 *   CUDART_INTERFACE slot 2 hands it out neither retained nor current.
 * - Created contexts (cuCtxCreate_v2/v3/v4) live on a list; a handle that
 *   is not on it (destroyed, or never ours) is CUDA_ERROR_INVALID_CONTEXT.
 * - The current context is a per-thread stack (push/pop; set replaces the
 *   top).
 * - Context-local storage (EXPORT-TABLES.md §3), what each copy of
 *   NVIDIA's runtime keeps its per-context state in: entries keyed by
 *   (context, key), under one lock; put of an existing key and get or
 *   delete of a missing one are CUDA_ERROR_INVALID_HANDLE, no current
 *   context is CUDA_ERROR_INVALID_CONTEXT; delete does not run the
 *   destructor. Destructors run, once each and outside the lock (they call
 *   back into the driver), when a primary context is reset or released to
 *   zero and when a created context is destroyed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult

#define MAX_DEV 64
#define STACK_DEPTH 16

struct vgpu_cls_entry {
	void *key;
	void *value;
	vgpu_cls_dtor dtor;
};

static struct vgpu_ctx primaries[MAX_DEV];
static struct vgpu_ctx *created; /* live created contexts */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long next_id = 1;
static __thread struct vgpu_ctx *ctx_stack[STACK_DEPTH];
static __thread int ctx_depth;

static unsigned long long new_id(void) { return __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED); }

static int is_primary(const struct vgpu_ctx *c)
{
	uintptr_t p = (uintptr_t)c, b = (uintptr_t)primaries;
	return p >= b && p < (uintptr_t)(primaries + MAX_DEV) && (p - b) % sizeof *c == 0;
}

/* A handle this library gave out and that is still alive. Caller holds ctx_mu. */
static int valid_locked(const struct vgpu_ctx *c)
{
	if (!c)
		return 0;
	if (is_primary(c))
		return c->primary;
	for (struct vgpu_ctx *x = created; x; x = x->next)
		if (x == c)
			return 1;
	return 0;
}

static int valid(const struct vgpu_ctx *c)
{
	pthread_mutex_lock(&ctx_mu);
	int ok = valid_locked(c);
	pthread_mutex_unlock(&ctx_mu);
	return ok;
}

static struct vgpu_ctx *cur_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

static void set_cur(struct vgpu_ctx *c)
{
	if (ctx_depth == 0) {
		if (!c)
			return;
		ctx_depth = 1;
	}
	ctx_stack[ctx_depth - 1] = c;
	if (!c)
		ctx_depth--;
}

/* ctx, or the current one when NULL; INVALID_CONTEXT when there is none or
 * it is not alive. */
static CUresult resolve(CUcontext ctx, struct vgpu_ctx **out)
{
	struct vgpu_ctx *c = ctx ? ctx : cur_ctx();
	if (!c || !valid(c))
		return VGPU_E_INVALID_CONTEXT;
	*out = c;
	return 0;
}

int vgpu_ctx_device(int *dev)
{
	struct vgpu_ctx *c = cur_ctx();
	if (!c)
		return VGPU_E_INVALID_CONTEXT;
	*dev = c->dev;
	return 0;
}

static void primary_init_locked(int dev)
{
	struct vgpu_ctx *p = &primaries[dev];
	if (!p->primary) {
		p->dev = dev;
		p->primary = 1;
	}
	if (!p->id)
		p->id = new_id();
}

static CUresult check_dev(CUdevice d)
{
	int n;
	CUresult rc = vgpu_cu_need_init();
	if (!rc)
		rc = vgpu_device_count(&n);
	if (!rc && (d < 0 || d >= n || d >= MAX_DEV))
		rc = VGPU_E_INVALID_DEVICE;
	return rc;
}

/* ---------------- context-local storage ---------------- */

/* Takes every entry of c out of it (caller holds ctx_mu); the caller runs
 * their destructors once it has dropped the lock. */
static struct vgpu_cls_entry *cls_take_locked(struct vgpu_ctx *c, unsigned *n)
{
	struct vgpu_cls_entry *e = c->cls;
	*n = c->ncls;
	c->cls = NULL;
	c->ncls = c->cls_cap = 0;
	return e;
}

static void cls_run_dtors(struct vgpu_ctx *c, struct vgpu_cls_entry *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (e[i].dtor)
			e[i].dtor(c, e[i].key, e[i].value);
	free(e);
}

static long cls_find(const struct vgpu_ctx *c, const void *key)
{
	for (unsigned i = 0; i < c->ncls; i++)
		if (c->cls[i].key == key)
			return i;
	return -1;
}

CUresult vgpu_cls_put(CUcontext ctx, void *key, void *value, vgpu_cls_dtor dtor)
{
	struct vgpu_ctx *c = ctx ? ctx : cur_ctx();
	CUresult rc = 0;
	pthread_mutex_lock(&ctx_mu);
	if (!valid_locked(c)) {
		rc = VGPU_E_INVALID_CONTEXT;
	} else if (cls_find(c, key) >= 0) {
		rc = VGPU_E_INVALID_HANDLE; /* the old value stays */
	} else {
		if (c->ncls == c->cls_cap) {
			unsigned cap = c->cls_cap ? c->cls_cap * 2 : 8;
			struct vgpu_cls_entry *n = realloc(c->cls, cap * sizeof *n);
			if (!n) {
				pthread_mutex_unlock(&ctx_mu);
				return VGPU_E_OUT_OF_MEMORY;
			}
			c->cls = n;
			c->cls_cap = cap;
		}
		c->cls[c->ncls++] = (struct vgpu_cls_entry){key, value, dtor};
	}
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

CUresult vgpu_cls_delete(CUcontext ctx, void *key)
{
	struct vgpu_ctx *c = ctx ? ctx : cur_ctx();
	CUresult rc = 0;
	pthread_mutex_lock(&ctx_mu);
	long i;
	if (!valid_locked(c))
		rc = VGPU_E_INVALID_CONTEXT;
	else if ((i = cls_find(c, key)) < 0)
		rc = VGPU_E_INVALID_HANDLE;
	else
		c->cls[i] = c->cls[--c->ncls];
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

CUresult vgpu_cls_get(void **value, CUcontext ctx, void *key)
{
	struct vgpu_ctx *c = ctx ? ctx : cur_ctx();
	CUresult rc = 0;
	if (!value)
		return VGPU_E_INVALID_VALUE;
	pthread_mutex_lock(&ctx_mu);
	long i;
	if (!valid_locked(c))
		rc = VGPU_E_INVALID_CONTEXT;
	else if ((i = cls_find(c, key)) < 0)
		rc = VGPU_E_INVALID_HANDLE; /* *value untouched */
	else
		*value = c->cls[i].value;
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

/* ---------------- primary contexts ---------------- */

CUresult vgpu_primary_ctx(CUcontext *pctx, CUdevice d)
{
	if (!pctx)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	primary_init_locked(d);
	pthread_mutex_unlock(&ctx_mu);
	*pctx = &primaries[d];
	return 0;
}

CU_API cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
	VGPU_API();
	if (!pctx)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	primary_init_locked(d);
	primaries[d].refcount++;
	pthread_mutex_unlock(&ctx_mu);
	*pctx = &primaries[d];
	return 0;
}

CU_API cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	VGPU_API();
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	struct vgpu_cls_entry *e = NULL;
	unsigned n = 0;
	pthread_mutex_lock(&ctx_mu);
	if (primaries[d].refcount <= 0) {
		rc = VGPU_E_INVALID_CONTEXT; /* not retained */
	} else if (--primaries[d].refcount == 0) {
		/* the context ends: its storage goes, a later retain starts a new one */
		e = cls_take_locked(&primaries[d], &n);
		primaries[d].id = 0;
	}
	pthread_mutex_unlock(&ctx_mu);
	cls_run_dtors(&primaries[d], e, n);
	return rc;
}
VGPU_ALIAS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);

CU_API cuDevicePrimaryCtxReset_v2(CUdevice d)
{
	VGPU_API();
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	unsigned n;
	pthread_mutex_lock(&ctx_mu);
	struct vgpu_cls_entry *e = cls_take_locked(&primaries[d], &n);
	pthread_mutex_unlock(&ctx_mu);
	/* the runtimes free their per-context state here, before the host
	 * drops the device's allocations and modules */
	cls_run_dtors(&primaries[d], e, n);
	struct vgpu_device_req req = {.device = (uint32_t)d};
	rc = vgpu_call(VGPU_OP_DEVICE_RESET, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (!rc) {
		vgpu_devmap_forget(d); /* the host released the device's allocations */
		vgpu_library_forget(d); /* and modules: libraries load again when needed */
	}
	pthread_mutex_lock(&ctx_mu);
	primaries[d].id = primaries[d].refcount > 0 ? new_id() : 0;
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}
VGPU_ALIAS(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2);

CU_API cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active)
{
	VGPU_API();
	if (!flags || !active)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	*flags = primaries[d].flags;
	*active = primaries[d].refcount > 0;
	pthread_mutex_unlock(&ctx_mu);
	return 0;
}

CU_API cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags)
{
	VGPU_API();
	CUresult rc = check_dev(d);
	if (!rc) {
		pthread_mutex_lock(&ctx_mu);
		primaries[d].flags = flags;
		pthread_mutex_unlock(&ctx_mu);
	}
	return rc;
}
VGPU_ALIAS(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2);

/* ---------------- created contexts ---------------- */

CU_API cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice d)
{
	VGPU_API();
	if (!pctx)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	if (ctx_depth >= STACK_DEPTH)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return VGPU_E_OUT_OF_MEMORY;
	c->dev = d;
	c->flags = flags;
	c->refcount = 1;
	c->id = new_id();
	pthread_mutex_lock(&ctx_mu);
	c->next = created;
	created = c;
	pthread_mutex_unlock(&ctx_mu);
	ctx_stack[ctx_depth++] = c; /* a new context is pushed on the caller's stack */
	*pctx = c;
	return 0;
}
VGPU_ALIAS(cuCtxCreate, cuCtxCreate_v2);

/* What vgpu cannot give a context: execution affinity (a share of the SMs,
 * MPS-like) and CUDA-in-graphics (CIG) interop. */
static CUresult unsupported_ctx_params(const char *what)
{
	static int once;
	if (!__atomic_exchange_n(&once, 1, __ATOMIC_RELAXED))
		VWARN("%s: vgpu has no execution affinity or CIG contexts; returning CUDA_ERROR_NOT_SUPPORTED "
		      "(create the context without them)", what);
	return VGPU_E_NOT_SUPPORTED;
}

CU_API cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned flags, CUdevice d)
{
	VGPU_API();
	if (n < 0 || (n > 0 && !params))
		return VGPU_E_INVALID_VALUE;
	if (n > 0)
		return unsupported_ctx_params("cuCtxCreate_v3 with execution affinity parameters");
	return cuCtxCreate_v2(pctx, flags, d);
}

/* CUctxCreateParams (cuda.h, CUDA 12.5+). */
struct ctx_create_params {
	void *exec_affinity;
	int num_exec_affinity;
	void *cig;
};

CU_API cuCtxCreate_v4(CUcontext *pctx, const struct ctx_create_params *params, unsigned flags, CUdevice d)
{
	VGPU_API();
	if (params) {
		if (params->num_exec_affinity < 0 || (params->num_exec_affinity > 0 && !params->exec_affinity))
			return VGPU_E_INVALID_VALUE;
		if (params->num_exec_affinity > 0 || params->cig)
			return unsupported_ctx_params("cuCtxCreate_v4 with execution affinity or CIG parameters");
	}
	return cuCtxCreate_v2(pctx, flags, d);
}

/* Execution affinity (CUexecAffinityType 0: a share of the SMs) is an
 * MPS feature no vgpu context has: support reads 0, and a context's
 * affinity is the whole device, as a driver answers for a context created
 * without one. */
CU_API cuDeviceGetExecAffinitySupport(int *pi, int type, CUdevice d)
{
	VGPU_API();
	if (!pi || type != 0)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = check_dev(d);
	if (rc)
		return rc;
	*pi = 0;
	return 0;
}

/* CUexecAffinityParam (cuda.h): a type and a union whose SM count member
 * is one unsigned. */
struct exec_affinity_param {
	int type;
	unsigned sm_count;
};

VGPU_EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d);

CU_API cuCtxGetExecAffinity(struct exec_affinity_param *p, int type)
{
	VGPU_API();
	int dev, sms;
	if (!p || type != 0)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_ctx_device(&dev);
	if (!rc)
		rc = cuDeviceGetAttribute(&sms, 16, dev); /* MULTIPROCESSOR_COUNT */
	if (rc)
		return rc;
	p->type = 0;
	p->sm_count = (unsigned)sms;
	return 0;
}

CU_API cuCtxDestroy_v2(CUcontext c)
{
	VGPU_API();
	if (!c)
		return VGPU_E_INVALID_VALUE;
	if (is_primary(c))
		return VGPU_E_INVALID_CONTEXT; /* primary contexts are released, not destroyed */
	pthread_mutex_lock(&ctx_mu);
	struct vgpu_ctx **pp = &created;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (!*pp) {
		pthread_mutex_unlock(&ctx_mu);
		return VGPU_E_INVALID_CONTEXT;
	}
	*pp = c->next;
	unsigned n;
	struct vgpu_cls_entry *e = cls_take_locked(c, &n);
	pthread_mutex_unlock(&ctx_mu);
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] == c) {
			memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof c);
			ctx_depth--;
			i--;
		}
	cls_run_dtors(c, e, n);
	vgpu_device_sync(c->dev);
	free(c);
	return 0;
}
VGPU_ALIAS(cuCtxDestroy, cuCtxDestroy_v2);

/* ---------------- the current context ---------------- */

CU_API cuCtxSetCurrent(CUcontext c)
{
	VGPU_API();
	if (c && !valid(c))
		return VGPU_E_INVALID_CONTEXT;
	set_cur(c);
	return 0;
}

CU_API cuCtxGetCurrent(CUcontext *pc)
{
	VGPU_API();
	if (!pc)
		return VGPU_E_INVALID_VALUE;
	*pc = cur_ctx();
	return 0;
}

CU_API cuCtxPushCurrent_v2(CUcontext c)
{
	VGPU_API();
	if (!c || !valid(c))
		return VGPU_E_INVALID_CONTEXT;
	if (ctx_depth >= STACK_DEPTH)
		return VGPU_E_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = c;
	return 0;
}
VGPU_ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2);

CU_API cuCtxPopCurrent_v2(CUcontext *pc)
{
	VGPU_API();
	if (!ctx_depth)
		return VGPU_E_INVALID_CONTEXT;
	struct vgpu_ctx *c = ctx_stack[--ctx_depth];
	if (pc)
		*pc = c;
	return 0;
}
VGPU_ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2);

/* ---------------- queries on a context ---------------- */

CU_API cuCtxGetDevice(CUdevice *d)
{
	VGPU_API();
	if (!d)
		return VGPU_E_INVALID_VALUE;
	return vgpu_ctx_device(d);
}

/* CUDA 13.0: the device of ctx, or of the current context when NULL. */
CU_API cuCtxGetDevice_v2(CUdevice *d, CUcontext ctx)
{
	VGPU_API();
	struct vgpu_ctx *c;
	if (!d)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = resolve(ctx, &c);
	if (!rc)
		*d = c->dev;
	return rc;
}

CU_API cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	VGPU_API();
	struct vgpu_ctx *c;
	if (!id)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = resolve(ctx, &c);
	if (rc)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	if (!c->id)
		c->id = new_id(); /* a primary context queried before its first retain */
	*id = c->id;
	pthread_mutex_unlock(&ctx_mu);
	return 0;
}

CU_API cuCtxGetFlags(unsigned *flags)
{
	VGPU_API();
	struct vgpu_ctx *c = cur_ctx();
	if (!flags)
		return VGPU_E_INVALID_VALUE;
	if (!c)
		return VGPU_E_INVALID_CONTEXT;
	*flags = c->flags;
	return 0;
}

CU_API cuCtxSetFlags(unsigned flags)
{
	VGPU_API();
	struct vgpu_ctx *c = cur_ctx();
	if (!c)
		return VGPU_E_INVALID_CONTEXT;
	pthread_mutex_lock(&ctx_mu);
	c->flags = flags;
	pthread_mutex_unlock(&ctx_mu);
	return 0;
}

CU_API cuCtxGetApiVersion(CUcontext ctx, unsigned *v)
{
	VGPU_API();
	struct vgpu_ctx *c;
	if (!v)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = resolve(ctx, &c);
	if (!rc)
		*v = 3020; /* what the driver says of contexts made by the _v2 entry points */
	return rc;
}

CU_API cuCtxSynchronize(void)
{
	VGPU_API();
	int d;
	CUresult rc = vgpu_ctx_device(&d);
	return rc ? rc : vgpu_device_sync(d);
}

/* CUDA 13.0: synchronizes ctx, or the current context when NULL. */
CU_API cuCtxSynchronize_v2(CUcontext ctx)
{
	VGPU_API();
	struct vgpu_ctx *c;
	CUresult rc = resolve(ctx, &c);
	return rc ? rc : vgpu_device_sync(c->dev);
}

CU_API cuCtxSetLimit(int limit, size_t value)
{
	VGPU_API();
	int d;
	CUresult rc = vgpu_ctx_device(&d);
	if (rc)
		return rc;
	struct vgpu_limit_req req = {.device = (uint32_t)d, .limit = (uint32_t)limit, .value = value};
	return vgpu_call(VGPU_OP_DEVICE_SET_LIMIT, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuCtxGetLimit(size_t *value, int limit)
{
	VGPU_API();
	int d;
	if (!value)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_ctx_device(&d);
	if (rc)
		return rc;
	struct vgpu_limit_req req = {.device = (uint32_t)d, .limit = (uint32_t)limit};
	struct vgpu_limit_reply r;
	rc = vgpu_call(VGPU_OP_DEVICE_GET_LIMIT, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*value = r.value;
	return rc;
}

CU_API cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	VGPU_API();
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return 0;
}

CU_API cuCtxGetCacheConfig(int *c)
{
	VGPU_API();
	if (c)
		*c = 0;
	return 0;
}

CU_API cuCtxSetCacheConfig(int c)
{
	VGPU_API();
	(void)c;
	return 0;
}
