/* nvml_layout_real.c - offsets of NVIDIA's NVML structs (see nvml_layout_test.c). */
#include <stddef.h>

#include <nvml.h>

#define PCI nvmlPciInfo_t
#define MEM nvmlMemory_t
#define MEM2 nvmlMemory_v2_t
#define PROC1 nvmlProcessInfo_v1_t
#define PROC nvmlProcessInfo_t
#define UTIL nvmlUtilization_t
#define FIELD nvmlFieldValue_t
#define ROW(t, f) offsetof(t, f),
#define SIZE(t) sizeof(t),
const size_t nvml_layout_real[] = {
#include "nvml_layout_fields.h"
};

/* The values our library hard-codes. */
const unsigned nvml_consts_real[] = {
	nvmlMemory_v2, NVML_VALUE_NOT_AVAILABLE, NVML_DEVICE_ARCH_HOPPER, NVML_DEVICE_ARCH_AMPERE,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_UNKNOWN, NVML_FEATURE_ENABLED, NVML_TEMPERATURE_GPU,
	NVML_CLOCK_COUNT, NVML_PSTATE_UNKNOWN, NVML_DEVICE_UUID_BUFFER_SIZE,
};
