/*
 * nvml.c - the part of NVML that tools and frameworks ask first (init,
 * device count and handles, names, UUIDs, memory, versions), answered from
 * the same device info as the CUDA libraries. Everything else is a
 * generated stub returning NVML_ERROR_NOT_SUPPORTED (3).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "vgpu_internal.h"

typedef int nvmlReturn_t;
typedef struct nvml_dev *nvmlDevice_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
       NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
       NVML_ERROR_UNKNOWN = 999 };

#define NVML_API VGPU_EXPORT nvmlReturn_t
#define MAX_DEV 64

struct nvml_dev {
	int index;
};
static struct nvml_dev devs[MAX_DEV];
static int init_count;

static nvmlReturn_t map(int rc)
{
	return rc == 0 ? NVML_SUCCESS : rc == VGPU_E_INVALID_VALUE ? NVML_ERROR_INVALID_ARGUMENT
		: NVML_ERROR_DRIVER_NOT_LOADED;
}

NVML_API nvmlInit_v2(void)
{
	VGPU_API();
	int rc = vgpu_init();
	if (rc)
		return map(rc);
	for (int i = 0; i < MAX_DEV; i++)
		devs[i].index = i;
	__atomic_add_fetch(&init_count, 1, __ATOMIC_RELAXED);
	return NVML_SUCCESS;
}

NVML_API nvmlInit(void) { return nvmlInit_v2(); }
NVML_API nvmlInitWithFlags(unsigned flags) { (void)flags; return nvmlInit_v2(); }

NVML_API nvmlShutdown(void)
{
	VGPU_API();
	if (__atomic_load_n(&init_count, __ATOMIC_RELAXED) <= 0)
		return NVML_ERROR_UNINITIALIZED;
	__atomic_sub_fetch(&init_count, 1, __ATOMIC_RELAXED);
	return NVML_SUCCESS;
}

VGPU_EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t ready(void)
{
	return __atomic_load_n(&init_count, __ATOMIC_RELAXED) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

NVML_API nvmlDeviceGetCount_v2(unsigned *n)
{
	VGPU_API();
	int c;
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = ready();
	if (r)
		return r;
	int rc = vgpu_device_count(&c);
	if (rc)
		return map(rc);
	*n = (unsigned)c;
	return NVML_SUCCESS;
}
NVML_API nvmlDeviceGetCount(unsigned *n) { return nvmlDeviceGetCount_v2(n); }

NVML_API nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
	VGPU_API();
	unsigned n;
	if (!d)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
	if (r)
		return r;
	if (i >= n || i >= MAX_DEV)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devs[i];
	return NVML_SUCCESS;
}
NVML_API nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

static nvmlReturn_t info(nvmlDevice_t d, const struct vgpu_device_info **di)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!d || d < devs || d >= devs + MAX_DEV)
		return NVML_ERROR_INVALID_ARGUMENT;
	return map(vgpu_device_info(d->index, di));
}

NVML_API nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!i)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (!r)
		*i = (unsigned)d->index;
	return r;
}

NVML_API nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!name || !len)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (!r)
		snprintf(name, len, "%.*s", (int)sizeof di->name, (const char *)di->name);
	return r;
}

NVML_API nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!uuid)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (r)
		return r;
	const uint8_t *u = di->uuid;
	if (len < 41)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(uuid, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
		 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	return NVML_SUCCESS;
}

struct nvml_memory {
	unsigned long long total, free, used;
};

NVML_API nvmlDeviceGetMemoryInfo(nvmlDevice_t d, struct nvml_memory *m)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	uint64_t f, t;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (r)
		return r;
	if (vgpu_mem_get_info(d->index, &f, &t)) {
		t = di->total_mem;
		f = t;
	}
	m->total = t;
	m->free = f;
	m->used = t - f;
	return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (!r) {
		*major = di->attrs[75];
		*minor = di->attrs[76];
	}
	return r;
}

NVML_API nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *minor)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (!r)
		*minor = (unsigned)d->index;
	return r;
}

NVML_API nvmlSystemGetDriverVersion(char *v, unsigned len)
{
	VGPU_API();
	if (!v || !len)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(v, len, "vgpu");
	return NVML_SUCCESS;
}

NVML_API nvmlSystemGetCudaDriverVersion(int *v)
{
	VGPU_API();
	if (!v)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = 13000;
	const struct vgpu_device_info *di;
	if (!vgpu_device_info(0, &di) && di->driver_version)
		*v = di->driver_version;
	return NVML_SUCCESS;
}
NVML_API nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

NVML_API nvmlSystemGetNVMLVersion(char *v, unsigned len)
{
	VGPU_API();
	if (!v || !len)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(v, len, "13.0-vgpu");
	return NVML_SUCCESS;
}

/* struct nvmlPciInfo_t (nvml.h, v2/v3 layout) */
struct nvml_pci {
	char busIdLegacy[16];
	unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
};

NVML_API nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, struct nvml_pci *p)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!p)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (r)
		return r;
	memset(p, 0, sizeof *p);
	p->domain = (unsigned)di->attrs[50];
	p->bus = (unsigned)di->attrs[33];
	p->device = (unsigned)di->attrs[34];
	p->pciDeviceId = (unsigned)di->attrs[139];
	p->pciSubSystemId = (unsigned)di->attrs[140];
	snprintf(p->busId, sizeof p->busId, "%08x:%02x:%02x.0", p->domain, p->bus, p->device);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04x:%02x:%02x.0", p->domain & 0xffff, p->bus, p->device);
	return NVML_SUCCESS;
}
NVML_API nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, struct nvml_pci *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

NVML_API nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out)
{
	VGPU_API();
	unsigned n;
	if (!uuid || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
	for (unsigned i = 0; !r && i < n && i < MAX_DEV; i++) {
		char u[96];
		if (!nvmlDeviceGetUUID(&devs[i], u, sizeof u) && !strcmp(u, uuid)) {
			*out = &devs[i];
			return NVML_SUCCESS;
		}
	}
	return r ? r : 6; /* NVML_ERROR_NOT_FOUND */
}

NVML_API nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *out)
{
	VGPU_API();
	unsigned n;
	if (!bus || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
	for (unsigned i = 0; !r && i < n && i < MAX_DEV; i++) {
		struct nvml_pci p;
		if (!nvmlDeviceGetPciInfo_v3(&devs[i], &p) &&
		    (!strcasecmp(p.busId, bus) || !strcasecmp(p.busIdLegacy, bus))) {
			*out = &devs[i];
			return NVML_SUCCESS;
		}
	}
	return r ? r : 6;
}

NVML_API nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!mode)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = info(d, &di);
	if (!r)
		*mode = (int)di->compute_mode;
	return r;
}

/* nvmlMemory_v2_t: version, total, reserved, free, used */
struct nvml_memory2 {
	unsigned version;
	unsigned long long total, reserved, free, used;
};

NVML_API nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, struct nvml_memory2 *m)
{
	VGPU_API();
	struct nvml_memory m1;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmlDeviceGetMemoryInfo(d, &m1);
	if (!r) {
		m->total = m1.total;
		m->reserved = 0;
		m->free = m1.free;
		m->used = m1.used;
	}
	return r;
}
