/*
 * nvml_layout_test.c - the NVML structs and constants of our library
 * (src/nvml/nvml_abi.h) against NVIDIA's nvml.h, field by field:
 * nvml_layout_real.c is compiled against the real header, this file
 * against ours, from the same field list (nvml_layout_fields.h). Built only
 * where /usr/include/nvml.h exists (libnvidia-ml-dev, which the CUDA
 * toolkit package pulls in).
 */
#include <stddef.h>
#include <stdio.h>

#include "nvml_abi.h"

#define PCI struct nvml_pci_info
#define MEM struct nvml_memory
#define MEM2 struct nvml_memory_v2
#define PROC1 struct nvml_process_info_v1
#define PROC struct nvml_process_info
#define UTIL struct nvml_utilization
#define FIELD struct nvml_field_value
#define ROW(t, f) {#t "." #f, offsetof(t, f)},
#define SIZE(t) {"sizeof " #t, sizeof(t)},
static const struct {
	const char *what;
	size_t v;
} ours[] = {
#include "nvml_layout_fields.h"
};
extern const size_t nvml_layout_real[];

static const struct {
	const char *what;
	unsigned v;
} consts[] = {
	{"nvmlMemory_v2", NVML_MEMORY_V2_VERSION},
	{"NVML_VALUE_NOT_AVAILABLE", (unsigned)NVML_VALUE_NOT_AVAILABLE_ULL},
	{"NVML_DEVICE_ARCH_HOPPER", NVML_DEVICE_ARCH_HOPPER},
	{"NVML_DEVICE_ARCH_AMPERE", NVML_DEVICE_ARCH_AMPERE},
	{"NVML_ERROR_ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
	{"NVML_ERROR_UNKNOWN", NVML_ERROR_UNKNOWN},
	{"NVML_FEATURE_ENABLED", NVML_FEATURE_ENABLED},
	{"NVML_TEMPERATURE_GPU", NVML_TEMPERATURE_GPU},
	{"NVML_CLOCK_COUNT", NVML_CLOCK_COUNT},
	{"NVML_PSTATE_UNKNOWN", NVML_PSTATE_UNKNOWN},
	{"NVML_DEVICE_UUID_BUFFER_SIZE", NVML_DEVICE_UUID_BUFFER_SIZE},
};
extern const unsigned nvml_consts_real[];

int main(void)
{
	int bad = 0;
	size_t n = sizeof ours / sizeof ours[0], m = sizeof consts / sizeof consts[0];
	for (size_t i = 0; i < n; i++)
		if (ours[i].v != nvml_layout_real[i]) {
			printf("FAIL %s: %zu, real nvml.h %zu\n", ours[i].what, ours[i].v, nvml_layout_real[i]);
			bad++;
		}
	for (size_t i = 0; i < m; i++)
		if (consts[i].v != nvml_consts_real[i]) {
			printf("FAIL %s: %#x, real nvml.h %#x\n", consts[i].what, consts[i].v, nvml_consts_real[i]);
			bad++;
		}
	printf("%s %zu NVML offsets and sizes, %zu constants match nvml.h\n", bad ? "FAIL" : "ok  ", n, m);
	return bad != 0;
}
