/*
 * procaddr.c - cuGetProcAddress and cuGetProcAddress_v2: resolve a driver
 * API base name, for the CUDA version whose ABI the caller wants and the
 * per-thread-default-stream flag, to a function of this library, exactly
 * as the real driver does.
 *
 * The answers come from tables/procaddr.tbl, a probe of the real driver
 * (scripts/probe/procaddr-probe.c; every name at 47 CUDA versions and both
 * flags), generated into libcuda.so.1.procaddr.c. Every symbol the real
 * driver hands out is exported here (hand-written, or a stub that returns
 * CUDA_ERROR_NOT_SUPPORTED when called), so a caller never gets a pointer
 * that crashes. Misses (EXPORT-TABLES.md §5, the probe's README):
 *   - a version above the one cuDriverGetVersion reports: INVALID_VALUE,
 *     *pfn untouched;
 *   - a name the driver does not know (a `_v2` name among them, or ""):
 *     _v2 returns CUDA_SUCCESS with *pfn NULL and status
 *     CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (the same return code with a
 *     NULL status pointer); v1 returns CUDA_ERROR_NOT_FOUND;
 *   - a known name at a version before it existed: status
 *     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (v1: NOT_FOUND).
 * Flags: only CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2) changes the
 * answer; LEGACY_STREAM (1) resolves like 0, as on the driver.
 */
#include <string.h>

#include "cuda_types.h"
#include "procaddr.h"

#define PER_THREAD_DEFAULT_STREAM 2ull
enum { FOUND = 0, SYMBOL_NOT_FOUND = 1, VERSION_NOT_SUFFICIENT = 2 };

static const struct vgpu_pa_name *lookup(const char *name)
{
	unsigned lo = 0, hi = vgpu_procaddr_count;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int c = strcmp(vgpu_procaddr_names[mid].name, name);
		if (!c)
			return &vgpu_procaddr_names[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The step in force at version, or NULL before the first one. */
static const struct vgpu_pa_step *step_at(const struct vgpu_pa_list *l, int version)
{
	const struct vgpu_pa_step *s = NULL;
	for (unsigned i = 0; i < l->n && l->steps[i].version <= version; i++)
		s = &l->steps[i];
	return s;
}

static int resolves_ever(const struct vgpu_pa_list *l)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->steps[i].fn)
			return 1;
	return 0;
}

int vgpu_proc_address(const char *name, void **pfn, int version, unsigned long long flags, int *status)
{
	if (!name || !pfn)
		return VGPU_E_INVALID_VALUE;
	if (version > vgpu_driver_version()) {
		VINFO("cuGetProcAddress(%s, %d): version above the %d this driver reports; CUDA_ERROR_INVALID_VALUE",
		      name, version, vgpu_driver_version());
		return VGPU_E_INVALID_VALUE;
	}
	*pfn = NULL;
	int st = SYMBOL_NOT_FOUND;
	const struct vgpu_pa_name *n = lookup(name);
	if (n) {
		const struct vgpu_pa_list *l = &n->flags0;
		if ((flags & PER_THREAD_DEFAULT_STREAM) && n->flags2.n)
			l = &n->flags2;
		const struct vgpu_pa_step *s = step_at(l, version);
		if (s && s->fn) {
			*pfn = (void *)s->fn;
			st = FOUND;
		} else if (s) {
			st = s->status;
		} else {
			st = resolves_ever(l) ? VERSION_NOT_SUFFICIENT : SYMBOL_NOT_FOUND;
		}
	}
	if (status)
		*status = st;
	if (st != FOUND) {
		/* info: what a runtime asks and does not get is a gap to list
		 * (the empty name every runtime probes first is not one) */
		if (*name)
			VINFO("cuGetProcAddress(%s, %d, flags %llu): %s", name, version, flags,
			      st == VERSION_NOT_SUFFICIENT ? "version not sufficient" : "symbol not found");
		return VGPU_E_NOT_FOUND;
	}
	return 0;
}

VGPU_EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version, unsigned long long flags)
{
	VGPU_API();
	return vgpu_proc_address(name, pfn, version, flags, NULL);
}

VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version, unsigned long long flags,
					 int *status)
{
	VGPU_API();
	int rc = vgpu_proc_address(name, pfn, version, flags, status);
	return rc == VGPU_E_NOT_FOUND ? 0 : rc; /* a miss is reported through *status */
}
