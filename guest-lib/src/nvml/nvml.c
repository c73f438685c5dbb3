/*
 * nvml.c - NVML's library and system calls: init and shutdown, error
 * strings, driver and NVML versions, device count and handles, process
 * names, and the private table nvidia-smi asks for. Device queries are in
 * nvml_device.c (identity, memory, fixed answers), nvml_monitor.c (live
 * readings, processes, field values) and nvml_events.c (event sets);
 * guest-lib/README.md lists what is answered from where. Everything else
 * is a generated stub returning NVML_ERROR_NOT_SUPPORTED (3) that writes
 * nothing.
 *
 * NVML shares the process's session with libcuda.so.1 (the core):
 * nvmlShutdown only drops NVML's reference count, the connection stays
 * for the CUDA libraries and closes at exit.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvml_int.h"

static struct nvml_dev devs[NVML_MAX_DEV] = {
#define D4(i) {i}, {i + 1}, {i + 2}, {i + 3}
	D4(0), D4(4), D4(8), D4(12), D4(16), D4(20), D4(24), D4(28),
	D4(32), D4(36), D4(40), D4(44), D4(48), D4(52), D4(56), D4(60),
#undef D4
};
static int init_count;

nvmlDevice_t nvml_handle(int i) { return &devs[i]; }

nvmlReturn_t nvml_from_cu(int rc)
{
	switch (rc) {
	case VGPU_OK: return NVML_SUCCESS;
	case VGPU_E_INVALID_VALUE:
	case VGPU_E_INVALID_DEVICE:
	case VGPU_E_INVALID_HANDLE: return NVML_ERROR_INVALID_ARGUMENT;
	case VGPU_E_NOT_SUPPORTED: return NVML_ERROR_NOT_SUPPORTED;
	case VGPU_E_OUT_OF_MEMORY: return NVML_ERROR_MEMORY;
	case VGPU_E_NOT_FOUND: return NVML_ERROR_NOT_FOUND;
	case VGPU_E_NO_DEVICE: return NVML_ERROR_DRIVER_NOT_LOADED;
	case 46: /* CUDA_ERROR_DEVICE_UNAVAILABLE: the backend went away */
		return NVML_ERROR_GPU_IS_LOST;
	default: return NVML_ERROR_UNKNOWN;
	}
}

nvmlReturn_t nvml_ready(void)
{
	return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvml_dev_info(nvmlDevice_t d, const struct vgpu_device_info **di)
{
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	uintptr_t p = (uintptr_t)d, base = (uintptr_t)devs;
	if (p < base || p >= base + sizeof devs || (p - base) % sizeof devs[0])
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvml_from_cu(vgpu_device_info(d->index, di));
}

/* ---- init ---- */

/* nvmlInit_v2 connects (the core's one session of the process); without a
 * backend it fails like NVML without a driver. The unversioned nvmlInit
 * differs only in failing on an inaccessible GPU, which we never have. */
NVML_API nvmlInit_v2(void)
{
	VGPU_API();
	int rc = vgpu_init();
	if (rc)
		return rc == VGPU_E_INVALID_VALUE ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_DRIVER_NOT_LOADED;
	__atomic_add_fetch(&init_count, 1, __ATOMIC_ACQ_REL);
	return NVML_SUCCESS;
}

NVML_API nvmlInit(void) { return nvmlInit_v2(); }

/* Flags NVML_INIT_FLAG_NO_GPUS (1) and _NO_ATTACH (2) change nothing here:
 * init never fails for want of GPUs and attaches to none. */
NVML_API nvmlInitWithFlags(unsigned flags)
{
	(void)flags;
	return nvmlInit_v2();
}

NVML_API nvmlShutdown(void)
{
	VGPU_API();
	int n = __atomic_load_n(&init_count, __ATOMIC_ACQUIRE);
	while (n > 0 && !__atomic_compare_exchange_n(&init_count, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

VGPU_EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
	case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vGPU operation is not available on target device because ECC is enabled";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
	case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	case NVML_ERROR_DEPRECATED: return "Deprecated";
	case NVML_ERROR_NOT_READY: return "Not ready";
	case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
	case NVML_ERROR_INVALID_STATE: return "Invalid state";
	case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
	case NVML_ERROR_UNKNOWN: return "Unknown Error";
	default: return "Unknown Error";
	}
}

/* ---- system ---- */

/* Writes s into buf of len bytes, or says it does not fit. */
static nvmlReturn_t put_string(char *buf, unsigned len, const char *s)
{
	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

/* The driver version is the host's NVIDIA driver (DRIVER_GET_INFO: what
 * the host's NVML says, "vgpu-sim" on the sim device); a backend without
 * the call gets "vgpu". */
static char release[33];

static void fetch_release(void)
{
	struct vgpu_driver_info_reply r;
	memset(&r, 0, sizeof r);
	snprintf(release, sizeof release, "vgpu");
	if (!vgpu_call(VGPU_OP_DRIVER_GET_INFO, NULL, 0, NULL, 0, &r, sizeof r, NULL, 0, NULL) && r.driver_version[0])
		snprintf(release, sizeof release, "%.32s", (const char *)r.driver_version);
}

static const char *driver_release(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, fetch_release);
	return release;
}

NVML_API nvmlSystemGetDriverVersion(char *v, unsigned len)
{
	VGPU_API();
	nvmlReturn_t r = nvml_ready();
	return r ? r : put_string(v, len, driver_release());
}

/* NVML's version is "<CUDA major>.<driver version>", as NVIDIA's
 * ("12.535.261.03" beside driver 535.261.03 for CUDA 12). */
NVML_API nvmlSystemGetNVMLVersion(char *v, unsigned len)
{
	VGPU_API();
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	int cuda = 0;
	const struct vgpu_device_info *di;
	if (!vgpu_device_info(0, &di))
		cuda = di->driver_version;
	char s[64];
	snprintf(s, sizeof s, "%d.%s", cuda ? cuda / 1000 : 13, driver_release());
	return put_string(v, len, s);
}

/* The CUDA version of the driver behind the vGPU (what cuDriverGetVersion
 * says); needs no nvmlInit, like NVIDIA's. */
NVML_API nvmlSystemGetCudaDriverVersion(int *v)
{
	VGPU_API();
	int n;
	const struct vgpu_device_info *di;
	if (!v)
		return NVML_ERROR_INVALID_ARGUMENT;
	int rc = vgpu_device_count(&n);
	if (rc)
		return nvml_from_cu(rc);
	if (n == 0 || vgpu_device_info(0, &di) || !di->driver_version)
		return NVML_ERROR_NOT_SUPPORTED;
	*v = di->driver_version;
	return NVML_SUCCESS;
}
NVML_API nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

NVML_API nvmlSystemGetProcessName(unsigned pid, char *name, unsigned len)
{
	VGPU_API();
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	if (!name || !len)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvml_process_name(pid, name, len);
}

/* ---- devices and handles ---- */

NVML_API nvmlDeviceGetCount_v2(unsigned *n)
{
	VGPU_API();
	int c;
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	int rc = vgpu_device_count(&c);
	if (rc)
		return nvml_from_cu(rc);
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
	if (i >= n || i >= NVML_MAX_DEV)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devs[i];
	return NVML_SUCCESS;
}
NVML_API nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

/* Calls match(device i, arg) for each device until one matches. */
static nvmlReturn_t find_device(int (*match)(nvmlDevice_t, const void *), const void *arg, nvmlDevice_t *out)
{
	unsigned n;
	nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
	for (unsigned i = 0; !r && i < n && i < NVML_MAX_DEV; i++)
		if (match(&devs[i], arg)) {
			*out = &devs[i];
			return NVML_SUCCESS;
		}
	return r ? r : NVML_ERROR_NOT_FOUND;
}

static int uuid_is(nvmlDevice_t d, const void *uuid)
{
	char u[NVML_DEVICE_UUID_BUFFER_SIZE];
	return !nvmlDeviceGetUUID(d, u, sizeof u) && !strcasecmp(u, uuid);
}

NVML_API nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out)
{
	VGPU_API();
	if (!uuid || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	return find_device(uuid_is, uuid, out);
}

/* A PCI bus id as NVML takes it: "domain:bus:device.function" or
 * "bus:device.function", hexadecimal (either case, any width). */
struct bus_id {
	unsigned domain, bus, device;
};

static int parse_bus_id(const char *s, struct bus_id *b)
{
	unsigned fn;
	char end;
	if (sscanf(s, "%x:%x:%x.%x%c", &b->domain, &b->bus, &b->device, &fn, &end) == 4)
		return 1;
	b->domain = 0;
	return sscanf(s, "%x:%x.%x%c", &b->bus, &b->device, &fn, &end) == 3;
}

static int bus_id_is(nvmlDevice_t d, const void *arg)
{
	const struct bus_id *b = arg;
	struct nvml_pci_info p;
	return !nvmlDeviceGetPciInfo_v3(d, &p) && p.domain == b->domain && p.bus == b->bus && p.device == b->device;
}

NVML_API nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *out)
{
	VGPU_API();
	struct bus_id b;
	if (!bus || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_ready();
	if (r)
		return r;
	if (!parse_bus_id(bus, &b))
		return NVML_ERROR_INVALID_ARGUMENT;
	return find_device(bus_id_is, &b, out);
}
NVML_API nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *out) { return nvmlDeviceGetHandleByPciBusId_v2(bus, out); }

/* A vGPU has no board serial number (nvmlDeviceGetSerial answers
 * NOT_SUPPORTED), so no device has the serial asked for. */
NVML_API nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *out)
{
	VGPU_API();
	if (!serial || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_ready();
	return r ? r : NVML_ERROR_NOT_FOUND;
}
