/*
 * nvml_device.c - what a device is: index, name, UUID, PCI identity,
 * compute capability and architecture, memory (MEM_GET_INFO, the VM's
 * --mem-limit), and the modes whose answer is fixed for a vGPU. Identity
 * comes from the device info the CUDA libraries use (DEVICE_GET_INFO,
 * fetched once), so NVML and CUDA always agree on UUIDs and bus ids.
 */
#include <stdio.h>
#include <string.h>

#include "nvml_int.h"

/* CUdevice_attribute numbers (cuda.h) read from the device info. */
enum {
	ATTR_ECC_ENABLED = 32,
	ATTR_PCI_BUS = 33,
	ATTR_PCI_DEVICE = 34,
	ATTR_MEMORY_BUS_WIDTH = 37,
	ATTR_PCI_DOMAIN = 50,
	ATTR_CC_MAJOR = 75,
	ATTR_CC_MINOR = 76,
	ATTR_PCI_DEVICE_ID = 139,    /* device id << 16 | vendor id (CUDA 12.8+) */
	ATTR_PCI_SUBSYSTEM_ID = 140, /* subsystem id << 16 | its vendor id */
};

NVML_API nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!i)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*i = (unsigned)d->index;
	return r;
}

/* The minor number of /dev/nvidiaN: vgpu has one device node for all
 * devices (/dev/vgpu), so the index stands in for it. */
NVML_API nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *minor)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*minor = (unsigned)d->index;
	return r;
}

NVML_API nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!name)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	size_t n = strnlen((const char *)di->name, sizeof di->name);
	if (n >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(name, di->name, n);
	name[n] = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!uuid)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	const uint8_t *u = di->uuid;
	if (len < sizeof "GPU-00000000-0000-0000-0000-000000000000")
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(uuid, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
		 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	return NVML_SUCCESS;
}

/* The PCI identity the host's driver reports (the same that
 * cuDeviceGetPCIBusId gives, so frameworks that look a CUDA device up in
 * NVML by bus id find it). */
NVML_API nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, struct nvml_pci_info *p)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!p)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	memset(p, 0, sizeof *p);
	p->domain = (unsigned)di->attrs[ATTR_PCI_DOMAIN];
	p->bus = (unsigned)di->attrs[ATTR_PCI_BUS];
	p->device = (unsigned)di->attrs[ATTR_PCI_DEVICE];
	p->pciDeviceId = (unsigned)di->attrs[ATTR_PCI_DEVICE_ID];
	p->pciSubSystemId = (unsigned)di->attrs[ATTR_PCI_SUBSYSTEM_ID];
	snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", p->domain, p->bus & 0xff, p->device & 0xff);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", p->domain & 0xffff, p->bus & 0xff,
		 p->device & 0xff);
	return NVML_SUCCESS;
}
NVML_API nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, struct nvml_pci_info *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

/* The unversioned call of binaries built before NVML 2.285: the 52-byte
 * struct, busId in the legacy format. */
NVML_API nvmlDeviceGetPciInfo(nvmlDevice_t d, struct nvml_pci_info_v1 *p)
{
	VGPU_API();
	struct nvml_pci_info v3;
	if (!p)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(d, &v3);
	if (r)
		return r;
	memset(p, 0, sizeof *p);
	memcpy(p->busId, v3.busIdLegacy, sizeof p->busId);
	p->domain = v3.domain;
	p->bus = v3.bus;
	p->device = v3.device;
	p->pciDeviceId = v3.pciDeviceId;
	p->pciSubSystemId = v3.pciSubSystemId;
	return NVML_SUCCESS;
}

/* Memory as MEM_GET_INFO gives it: with `vgpu serve --mem-limit`, total is
 * the VM's cap and free what is left of it (never more than the GPU has
 * free), so programs that size themselves from NVML stay inside the cap.
 * used = total - free. */
static nvmlReturn_t memory(nvmlDevice_t d, uint64_t *total, uint64_t *free_b)
{
	const struct vgpu_device_info *di;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	int rc = vgpu_mem_get_info(d->index, free_b, total);
	if (rc)
		return nvml_from_cu(rc);
	if (*free_b > *total)
		*free_b = *total;
	return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetMemoryInfo(nvmlDevice_t d, struct nvml_memory *m)
{
	VGPU_API();
	uint64_t t, f;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = memory(d, &t, &f);
	if (!r) {
		m->total = t;
		m->free = f;
		m->used = t - f;
	}
	return r;
}

/* _v2 adds "reserved" (memory the driver keeps for itself): none that a
 * guest could see, so 0. */
NVML_API nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, struct nvml_memory_v2 *m)
{
	VGPU_API();
	uint64_t t, f;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != NVML_MEMORY_V2_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	nvmlReturn_t r = memory(d, &t, &f);
	if (!r) {
		m->total = t;
		m->reserved = 0;
		m->free = f;
		m->used = t - f;
	}
	return r;
}

NVML_API nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!mode)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*mode = (int)di->compute_mode;
	return r;
}

NVML_API nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r) {
		*major = di->attrs[ATTR_CC_MAJOR];
		*minor = di->attrs[ATTR_CC_MINOR];
	}
	return r;
}

/* The architecture follows from the compute capability. */
NVML_API nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned *arch)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!arch)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	int cc = di->attrs[ATTR_CC_MAJOR] * 10 + di->attrs[ATTR_CC_MINOR];
	*arch = cc >= 100 ? NVML_DEVICE_ARCH_BLACKWELL
		: cc >= 90 ? NVML_DEVICE_ARCH_HOPPER
		: cc == 89 ? NVML_DEVICE_ARCH_ADA
		: cc >= 80 ? NVML_DEVICE_ARCH_AMPERE
		: cc >= 75 ? NVML_DEVICE_ARCH_TURING
		: cc >= 70 ? NVML_DEVICE_ARCH_VOLTA
		: cc >= 60 ? NVML_DEVICE_ARCH_PASCAL
		: cc >= 50 ? NVML_DEVICE_ARCH_MAXWELL
		: cc >= 30 ? NVML_DEVICE_ARCH_KEPLER
		: NVML_DEVICE_ARCH_UNKNOWN;
	return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetMemoryBusWidth(nvmlDevice_t d, unsigned *bits)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!bits)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*bits = (unsigned)di->attrs[ATTR_MEMORY_BUS_WIDTH];
	return r;
}

/* ECC as the host's driver reports it for the GPU (ECC_ENABLED); a guest
 * cannot change it, so pending equals current. */
NVML_API nvmlDeviceGetEccMode(nvmlDevice_t d, int *current, int *pending)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!current || !pending)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*current = *pending = di->attrs[ATTR_ECC_ENABLED] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return r;
}

/* Fixed answers, true of every vGPU. */
static nvmlReturn_t fixed(nvmlDevice_t d, unsigned *out, unsigned v)
{
	const struct vgpu_device_info *di;
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (!r)
		*out = v;
	return r;
}

/* Persistence mode keeps the driver's state while no client is running:
 * the backend holds the device's context whatever the guest runs, so it
 * is on. */
NVML_API nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned *mode)
{
	VGPU_API();
	return fixed(d, mode, NVML_FEATURE_ENABLED);
}

/* No display is attached to a vGPU or can be. */
NVML_API nvmlDeviceGetDisplayMode(nvmlDevice_t d, unsigned *mode)
{
	VGPU_API();
	return fixed(d, mode, NVML_FEATURE_DISABLED);
}

NVML_API nvmlDeviceGetDisplayActive(nvmlDevice_t d, unsigned *active)
{
	VGPU_API();
	return fixed(d, active, NVML_FEATURE_DISABLED);
}

/* vgpu hands out whole GPUs, never MIG instances (nvmlDeviceGetMigMode
 * answers NOT_SUPPORTED, as on a GPU without MIG). */
NVML_API nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig)
{
	VGPU_API();
	return fixed(d, is_mig, 0);
}

/* nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t (nvml.h). */
enum {
	P2P_CAPS_READ = 0,
	P2P_CAPS_WRITE = 1,
	P2P_CAPS_NVLINK = 2,
	P2P_CAPS_ATOMICS = 3,
	P2P_CAPS_PCI = 4, /* NVML_P2P_CAPS_INDEX_PROP before CUDA 12 */
	P2P_CAPS_UNKNOWN = 5,
	P2P_STATUS_OK = 0,
	P2P_STATUS_NOT_SUPPORTED = 5,
};

/*
 * Peer-to-peer capability between two devices. A device reads, writes and
 * does atomics on its own memory over its own bus (NCCL asks this of every
 * pair, the device with itself included, and stops unless it succeeds);
 * it has no NVLink to itself. Between two devices of a VM vgpu serves no
 * peer access (cuDeviceCanAccessPeer answers 0), so every capability is
 * NOT_SUPPORTED there.
 */
NVML_API nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int index, int *status)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	if (!status || index < P2P_CAPS_READ || index >= P2P_CAPS_UNKNOWN)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(a, &di);
	if (!r)
		r = nvml_dev_info(b, &di);
	if (r)
		return r;
	*status = a == b && index != P2P_CAPS_NVLINK ? P2P_STATUS_OK : P2P_STATUS_NOT_SUPPORTED;
	return NVML_SUCCESS;
}
