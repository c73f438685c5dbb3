/*
 * nvml_events.c - event sets. vgpu delivers no NVML events (Xid errors,
 * clock changes, ...: the host's driver keeps them), so a device supports
 * no event types, registering any is NOT_SUPPORTED, and a wait ends with
 * NVML_ERROR_TIMEOUT after the time asked for. Sets themselves work:
 * nvidia-smi creates one before it prints anything and stops ("Internal
 * NVML error") if it cannot.
 */
#include <errno.h>
#include <time.h>

#include "nvml_int.h"

#define MAX_SETS 64

/* An nvmlEventSet_t points at one of these; a slot is in use or free, so a
 * freed or foreign set is refused, never dereferenced. */
static struct event_set {
	int used;
} sets[MAX_SETS];
static pthread_mutex_t sets_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct event_set *nvmlEventSet_t;

static int valid(nvmlEventSet_t s)
{
	uintptr_t p = (uintptr_t)s, base = (uintptr_t)sets;
	if (p < base || p >= base + sizeof sets || (p - base) % sizeof sets[0])
		return 0;
	return __atomic_load_n(&s->used, __ATOMIC_ACQUIRE);
}

NVML_API nvmlEventSetCreate(nvmlEventSet_t *out)
{
	VGPU_API();
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	pthread_mutex_lock(&sets_mu);
	r = NVML_ERROR_MEMORY;
	for (int i = 0; i < MAX_SETS; i++)
		if (!sets[i].used) {
			__atomic_store_n(&sets[i].used, 1, __ATOMIC_RELEASE);
			*out = &sets[i];
			r = NVML_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&sets_mu);
	return r;
}

NVML_API nvmlEventSetFree(nvmlEventSet_t s)
{
	VGPU_API();
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	pthread_mutex_lock(&sets_mu);
	r = valid(s) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
	if (!r)
		__atomic_store_n(&s->used, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&sets_mu);
	return r;
}

NVML_API nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!types)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*types = 0;
	return r;
}

NVML_API nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t s)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	if (!valid(s))
		return NVML_ERROR_INVALID_ARGUMENT;
	return types ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* No event ever comes: wait the time asked for, then time out. data is
 * not written. */
NVML_API nvmlEventSetWait_v2(nvmlEventSet_t s, void *data, unsigned timeout_ms)
{
	VGPU_API();
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	if (!valid(s) || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec left = {.tv_sec = timeout_ms / 1000, .tv_nsec = (long)(timeout_ms % 1000) * 1000000};
	while (nanosleep(&left, &left) && errno == EINTR)
		;
	return NVML_ERROR_TIMEOUT;
}
NVML_API nvmlEventSetWait(nvmlEventSet_t s, void *data, unsigned timeout_ms) { return nvmlEventSetWait_v2(s, data, timeout_ms); }
