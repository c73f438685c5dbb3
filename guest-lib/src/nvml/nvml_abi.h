/*
 * nvml_abi.h - the NVML ABI our libnvidia-ml.so.1 answers: return codes,
 * enum values and the structs it fills, as NVIDIA's nvml.h defines them
 * (values cite nvml.h; tests/nvml_layout_test.c checks every size and
 * offset against the real header where it is installed). Our names are
 * nvml_* so this header and the real one can never be mixed up.
 */
#ifndef VGPU_NVML_ABI_H
#define VGPU_NVML_ABI_H

#include <stdint.h>

typedef int nvmlReturn_t;

/* nvmlReturn_t (nvml.h, driver 580). */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
	NVML_ERROR_UNKNOWN = 999,
};

/* Enum values and limits (nvml.h). */
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xffffffffffffffffull
#define NVML_NO_INSTANCE_ID 0xffffffffu /* gpuInstanceId/computeInstanceId without MIG */
#define NVML_FEATURE_DISABLED 0
#define NVML_FEATURE_ENABLED 1
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_COUNT 4 /* graphics, SM, memory, video */
#define NVML_PSTATE_UNKNOWN 32
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu
/* NVML_STRUCT_VERSION(Memory, 2): the struct's size | version << 24. */
#define NVML_MEMORY_V2_VERSION ((unsigned)(sizeof(struct nvml_memory_v2) | (2u << 24)))

/* nvmlPciInfo_t, what nvmlDeviceGetPciInfo_v2 and _v3 fill. */
struct nvml_pci_info {
	char busIdLegacy[16]; /* "%04X:%02X:%02X.0" */
	unsigned domain, bus, device;
	unsigned pciDeviceId;    /* device id << 16 | vendor id */
	unsigned pciSubSystemId; /* subsystem id << 16 | subsystem vendor id */
	char busId[32];          /* "%08X:%02X:%02X.0" */
};

/* The nvmlPciInfo_t of NVML before 2.285's v2 (what the unversioned
 * nvmlDeviceGetPciInfo of old binaries expects): 52 bytes. */
struct nvml_pci_info_v1 {
	char busId[16];
	unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
	unsigned reserved[4];
};

struct nvml_memory { /* nvmlMemory_t */
	unsigned long long total, free, used;
};

struct nvml_memory_v2 { /* nvmlMemory_v2_t */
	unsigned version;
	unsigned long long total, reserved, free, used;
};

struct nvml_process_info_v1 { /* nvmlProcessInfo_v1_t */
	unsigned pid;
	unsigned long long usedGpuMemory;
};

struct nvml_process_info { /* nvmlProcessInfo_t = nvmlProcessInfo_v2_t (_v2, _v3 calls) */
	unsigned pid;
	unsigned long long usedGpuMemory;
	unsigned gpuInstanceId, computeInstanceId;
};

struct nvml_utilization { /* nvmlUtilization_t */
	unsigned gpu, memory;
};

struct nvml_field_value { /* nvmlFieldValue_t */
	unsigned fieldId, scopeId;
	long long timestamp; /* microseconds since 1970 */
	long long latencyUsec;
	int valueType;
	nvmlReturn_t nvmlReturn;
	union {
		double dVal;
		unsigned uiVal;
		unsigned long ulVal;
		unsigned long long ullVal;
		signed long long sllVal;
	} value;
};

_Static_assert(sizeof(struct nvml_pci_info) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(struct nvml_pci_info_v1) == 52, "nvmlPciInfo_t before v2");
_Static_assert(sizeof(struct nvml_memory_v2) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(struct nvml_process_info_v1) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(struct nvml_process_info) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(struct nvml_field_value) == 40, "nvmlFieldValue_t");

#endif
