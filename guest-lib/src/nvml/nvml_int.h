/*
 * nvml_int.h - what the NVML files share: device handles, the init state,
 * the mapping from the core's CUresults to nvmlReturn_t, and the backend's
 * NVML calls (DEVICE_GET_MONITOR, DEVICE_GET_PROCESSES).
 */
#ifndef VGPU_NVML_INT_H
#define VGPU_NVML_INT_H

#include "vgpu_internal.h"
#include "nvml_abi.h"

#define NVML_API VGPU_EXPORT nvmlReturn_t
#define NVML_MAX_DEV 64

/* A device handle (nvmlDevice_t) points at one of these. */
struct nvml_dev {
	int index;
};
typedef struct nvml_dev *nvmlDevice_t;

/* NVML_SUCCESS between nvmlInit and the last nvmlShutdown, else
 * NVML_ERROR_UNINITIALIZED. */
nvmlReturn_t nvml_ready(void);
/* The handle of device i (no checks). */
nvmlDevice_t nvml_handle(int i);
/* Checks that NVML is initialised and d is one of our handles of an
 * existing device; gives its device info. */
nvmlReturn_t nvml_dev_info(nvmlDevice_t d, const struct vgpu_device_info **di);
/* The nvmlReturn_t for a CUresult of the core. */
nvmlReturn_t nvml_from_cu(int rc);

/* Exported calls the NVML files use themselves. */
VGPU_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len);
VGPU_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, struct nvml_pci_info *p);

/* The device's live readings (DEVICE_GET_MONITOR), at most 100 ms old. */
nvmlReturn_t nvml_monitor(nvmlDevice_t d, struct vgpu_device_monitor *m);
/* The VM's processes on the device (DEVICE_GET_PROCESSES): up to
 * VGPU_MAX_PROCESSES entries in out, their number in *n. */
nvmlReturn_t nvml_processes(nvmlDevice_t d, struct vgpu_process_info *out, unsigned *n);
/* The name NVML gives a process: its executable as /proc/PID/cmdline
 * names it (else /proc/PID/comm). 0, or NVML_ERROR_NOT_FOUND. */
nvmlReturn_t nvml_process_name(unsigned pid, char *name, unsigned len);

#endif
