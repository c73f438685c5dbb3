/*
 * nvml_test.c - our libnvidia-ml.so.1 end to end against `vgpu serve
 * --device sim` (host mode, or guest mode through tests/fakedev.c): what
 * PyTorch (ctypes: nvmlInit, count, handles, UUIDs), pynvml and nvidia-smi
 * ask, the process list with memory this process holds through
 * libcuda.so.1, the memory limit, bad arguments, every error string, event
 * sets, the private table nvidia-smi uses, and shutdown.
 *
 *   nvml_test [--mem-limit BYTES] [--smi PATH]
 *
 * --mem-limit: the server runs with that cap (vgpu serve --mem-limit):
 * NVML's total must be the cap and used/free exact. --smi: also run that
 * nvidia-smi while this process holds device memory and check its default
 * view, -q and --query-compute-apps. Exit status: the number of failures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvml_abi.h"

typedef void *dev_t_;

/* NVML, as its header declares it (with our struct names). */
int nvmlInit(void);
int nvmlInit_v2(void);
int nvmlInitWithFlags(unsigned);
int nvmlShutdown(void);
const char *nvmlErrorString(int);
int nvmlSystemGetDriverVersion(char *, unsigned);
int nvmlSystemGetNVMLVersion(char *, unsigned);
int nvmlSystemGetCudaDriverVersion(int *);
int nvmlSystemGetCudaDriverVersion_v2(int *);
int nvmlSystemGetProcessName(unsigned, char *, unsigned);
int nvmlDeviceGetCount(unsigned *);
int nvmlDeviceGetCount_v2(unsigned *);
int nvmlDeviceGetHandleByIndex(unsigned, dev_t_ *);
int nvmlDeviceGetHandleByIndex_v2(unsigned, dev_t_ *);
int nvmlDeviceGetHandleByUUID(const char *, dev_t_ *);
int nvmlDeviceGetHandleByPciBusId_v2(const char *, dev_t_ *);
int nvmlDeviceGetHandleBySerial(const char *, dev_t_ *);
int nvmlDeviceGetIndex(dev_t_, unsigned *);
int nvmlDeviceGetMinorNumber(dev_t_, unsigned *);
int nvmlDeviceGetName(dev_t_, char *, unsigned);
int nvmlDeviceGetUUID(dev_t_, char *, unsigned);
int nvmlDeviceGetSerial(dev_t_, char *, unsigned);
int nvmlDeviceGetPciInfo(dev_t_, struct nvml_pci_info_v1 *);
int nvmlDeviceGetPciInfo_v2(dev_t_, struct nvml_pci_info *);
int nvmlDeviceGetPciInfo_v3(dev_t_, struct nvml_pci_info *);
int nvmlDeviceGetMemoryInfo(dev_t_, struct nvml_memory *);
int nvmlDeviceGetMemoryInfo_v2(dev_t_, struct nvml_memory_v2 *);
int nvmlDeviceGetComputeMode(dev_t_, int *);
int nvmlDeviceGetP2PStatus(dev_t_, dev_t_, int, int *);
int nvmlDeviceGetCudaComputeCapability(dev_t_, int *, int *);
int nvmlDeviceGetArchitecture(dev_t_, unsigned *);
int nvmlDeviceGetMemoryBusWidth(dev_t_, unsigned *);
int nvmlDeviceGetPersistenceMode(dev_t_, unsigned *);
int nvmlDeviceGetDisplayMode(dev_t_, unsigned *);
int nvmlDeviceGetDisplayActive(dev_t_, unsigned *);
int nvmlDeviceGetEccMode(dev_t_, int *, int *);
int nvmlDeviceIsMigDeviceHandle(dev_t_, unsigned *);
int nvmlDeviceGetMigMode(dev_t_, unsigned *, unsigned *);
int nvmlDeviceGetUtilizationRates(dev_t_, struct nvml_utilization *);
int nvmlDeviceGetTemperature(dev_t_, int, unsigned *);
struct temp_v1 {
	unsigned version;
	int sensor;
	int temperature;
};
int nvmlDeviceGetTemperatureV(dev_t_, struct temp_v1 *);
int nvmlDeviceGetPowerUsage(dev_t_, unsigned *);
int nvmlDeviceGetEnforcedPowerLimit(dev_t_, unsigned *);
int nvmlDeviceGetFanSpeed(dev_t_, unsigned *);
int nvmlDeviceGetPerformanceState(dev_t_, int *);
int nvmlDeviceGetClockInfo(dev_t_, int, unsigned *);
int nvmlDeviceGetMaxClockInfo(dev_t_, int, unsigned *);
int nvmlDeviceGetComputeRunningProcesses(dev_t_, unsigned *, struct nvml_process_info_v1 *);
int nvmlDeviceGetComputeRunningProcesses_v2(dev_t_, unsigned *, struct nvml_process_info *);
int nvmlDeviceGetComputeRunningProcesses_v3(dev_t_, unsigned *, struct nvml_process_info *);
int nvmlDeviceGetGraphicsRunningProcesses_v3(dev_t_, unsigned *, struct nvml_process_info *);
int nvmlDeviceGetMPSComputeRunningProcesses_v3(dev_t_, unsigned *, struct nvml_process_info *);
int nvmlDeviceGetFieldValues(dev_t_, int, struct nvml_field_value *);
int nvmlEventSetCreate(void **);
int nvmlEventSetFree(void *);
int nvmlEventSetWait_v2(void *, void *, unsigned);
int nvmlDeviceRegisterEvents(dev_t_, unsigned long long, void *);
int nvmlDeviceGetSupportedEventTypes(dev_t_, unsigned long long *);
int nvmlInternalGetExportTable(const void **, const void *);

/* The driver API, to hold device memory as a CUDA program would. */
int cuInit(unsigned);
int cuDeviceGet(int *, int);
int cuCtxCreate_v2(void **, unsigned, int);
int cuMemAlloc_v2(unsigned long long *, size_t);
int cuMemFree_v2(unsigned long long);

static int failures;
#define CHECK(cond)                                                                     \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                     \
			return;                                                         \
		}                                                                       \
	} while (0)
#define IS(call, want) CHECK((call) == (want))
#define OK(call) IS(call, NVML_SUCCESS)

static unsigned long long mem_limit;
static const char *smi;
static dev_t_ dev0;
#define HELD (64ull << 20)

/* Before nvmlInit every call says so; nvmlInit as PyTorch calls it. */
static void test_init(void)
{
	unsigned n;
	IS(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	IS(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	OK(nvmlInit());
	OK(nvmlInitWithFlags(0));
	OK(nvmlShutdown());
	OK(nvmlDeviceGetCount_v2(&n)); /* still one reference */
	CHECK(n >= 1);
	OK(nvmlDeviceGetHandleByIndex_v2(0, &dev0));
}

/* What pynvml's and nvidia-smi's first calls return. */
static void test_system(void)
{
	char s[96];
	int v = 0, v2 = 0;
	OK(nvmlSystemGetDriverVersion(s, sizeof s));
	CHECK(!strcmp(s, "vgpu-sim"));
	IS(nvmlSystemGetDriverVersion(s, 4), NVML_ERROR_INSUFFICIENT_SIZE);
	OK(nvmlSystemGetNVMLVersion(s, sizeof s));
	CHECK(!strcmp(s, "13.vgpu-sim"));
	OK(nvmlSystemGetCudaDriverVersion(&v));
	OK(nvmlSystemGetCudaDriverVersion_v2(&v2));
	CHECK(v == 13000 && v2 == v);
	IS(nvmlSystemGetCudaDriverVersion(NULL), NVML_ERROR_INVALID_ARGUMENT);
	OK(nvmlSystemGetProcessName((unsigned)getpid(), s, sizeof s));
	CHECK(strstr(s, "nvml_test") != NULL);
	IS(nvmlSystemGetProcessName(0x7ffffff0u, s, sizeof s), NVML_ERROR_NOT_FOUND);
}

/* Identity: handles by index, UUID and PCI bus id (every format) agree. */
static void test_identity(void)
{
	unsigned n, i;
	dev_t_ d;
	char name[96], uuid[96], bus[40];
	struct nvml_pci_info p3, p2;
	OK(nvmlDeviceGetCount(&n));
	for (i = 0; i < n; i++) {
		OK(nvmlDeviceGetHandleByIndex(i, &d));
		unsigned idx = 99, minor = 99;
		OK(nvmlDeviceGetIndex(d, &idx));
		OK(nvmlDeviceGetMinorNumber(d, &minor));
		CHECK(idx == i && minor == i);
	}
	IS(nvmlDeviceGetHandleByIndex_v2(n, &d), NVML_ERROR_INVALID_ARGUMENT);
	OK(nvmlDeviceGetName(dev0, name, sizeof name));
	CHECK(strstr(name, "kernels not executed") != NULL);
	IS(nvmlDeviceGetName(dev0, name, 8), NVML_ERROR_INSUFFICIENT_SIZE);
	OK(nvmlDeviceGetUUID(dev0, uuid, sizeof uuid));
	CHECK(strlen(uuid) == 40 && !strncmp(uuid, "GPU-", 4) && uuid[12] == '-' && uuid[27] == '-');
	IS(nvmlDeviceGetUUID(dev0, uuid, 40), NVML_ERROR_INSUFFICIENT_SIZE);
	OK(nvmlDeviceGetHandleByUUID(uuid, &d));
	CHECK(d == dev0);
	IS(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d), NVML_ERROR_NOT_FOUND);
	IS(nvmlDeviceGetSerial(dev0, name, sizeof name), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetHandleBySerial("1321021039853", &d), NVML_ERROR_NOT_FOUND);

	OK(nvmlDeviceGetPciInfo_v3(dev0, &p3));
	OK(nvmlDeviceGetPciInfo_v2(dev0, &p2));
	CHECK(!memcmp(&p2, &p3, sizeof p3));
	CHECK(!strcmp(p3.busId, "00000000:10:00.0") && !strcmp(p3.busIdLegacy, "0000:10:00.0"));
	CHECK(p3.bus == 0x10 && p3.pciDeviceId == 0x233110de && p3.pciSubSystemId == 0x162610de);
	/* the unversioned call writes the 52-byte struct of old binaries */
	unsigned char buf[80];
	memset(buf, 0xa5, sizeof buf);
	OK(nvmlDeviceGetPciInfo(dev0, (struct nvml_pci_info_v1 *)buf));
	CHECK(!strcmp((char *)buf, "0000:10:00.0") && buf[52] == 0xa5);
	/* by bus id: CUDA's lower-case form, NVML's, short */
	const char *ids[] = {"00000000:10:00.0", "0000:10:00.0", "0000:10:00.0", "10:00.0"};
	for (i = 0; i < 4; i++) {
		snprintf(bus, sizeof bus, "%s", ids[i]);
		d = NULL;
		OK(nvmlDeviceGetHandleByPciBusId_v2(bus, &d));
		CHECK(d == dev0);
	}
	IS(nvmlDeviceGetHandleByPciBusId_v2("0000:99:00.0", &d), NVML_ERROR_NOT_FOUND);
	IS(nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &d), NVML_ERROR_INVALID_ARGUMENT);
	/* P2P (NCCL asks every pair, each device with itself too): a device
	 * reaches its own memory, not over NVLink; no peer access between two */
	int st = -1, idx;
	for (idx = 0; idx < 5; idx++) {
		OK(nvmlDeviceGetP2PStatus(dev0, dev0, idx, &st));
		CHECK(st == (idx == 2 ? 5 : 0));
	}
	if (n > 1) {
		OK(nvmlDeviceGetHandleByIndex(1, &d));
		OK(nvmlDeviceGetP2PStatus(dev0, d, 0, &st));
		CHECK(st == 5);
	}
	IS(nvmlDeviceGetP2PStatus(dev0, dev0, 5, &st), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetP2PStatus(dev0, dev0, 0, NULL), NVML_ERROR_INVALID_ARGUMENT);
}

/* Answers that follow from the device info or are fixed for a vGPU. */
static void test_properties(void)
{
	int mode = -1, major = 0, minor = -1, cur = -1, pend = -1;
	unsigned arch = 0, width = 0, v = 9;
	OK(nvmlDeviceGetComputeMode(dev0, &mode));
	OK(nvmlDeviceGetCudaComputeCapability(dev0, &major, &minor));
	OK(nvmlDeviceGetArchitecture(dev0, &arch));
	OK(nvmlDeviceGetMemoryBusWidth(dev0, &width));
	CHECK(mode == 0 && major == 9 && minor == 0 && arch == NVML_DEVICE_ARCH_HOPPER && width == 5120);
	OK(nvmlDeviceGetEccMode(dev0, &cur, &pend));
	CHECK(cur == NVML_FEATURE_ENABLED && pend == cur);
	OK(nvmlDeviceGetPersistenceMode(dev0, &v));
	CHECK(v == NVML_FEATURE_ENABLED);
	OK(nvmlDeviceGetDisplayMode(dev0, &v));
	CHECK(v == NVML_FEATURE_DISABLED);
	OK(nvmlDeviceGetDisplayActive(dev0, &v));
	CHECK(v == NVML_FEATURE_DISABLED);
	OK(nvmlDeviceIsMigDeviceHandle(dev0, &v));
	CHECK(v == 0);
	IS(nvmlDeviceGetMigMode(dev0, &v, &v), NVML_ERROR_NOT_SUPPORTED);
}

/* The sim's readings: zero utilization, its model's maximum clocks, no
 * temperature, power, fan, state or current clocks (NOT_SUPPORTED). */
static void test_monitor(void)
{
	struct nvml_utilization u = {7, 7};
	unsigned v;
	int p;
	OK(nvmlDeviceGetUtilizationRates(dev0, &u));
	CHECK(u.gpu == 0 && u.memory == 0);
	OK(nvmlDeviceGetMaxClockInfo(dev0, 1, &v));
	CHECK(v == 1755);
	OK(nvmlDeviceGetMaxClockInfo(dev0, 2, &v));
	CHECK(v == 1593);
	IS(nvmlDeviceGetMaxClockInfo(dev0, 3, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetMaxClockInfo(dev0, 4, &v), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetClockInfo(dev0, 1, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetTemperature(dev0, NVML_TEMPERATURE_GPU, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetTemperature(dev0, 1, &v), NVML_ERROR_INVALID_ARGUMENT);
	{ /* the versioned form nvidia-smi 570+ uses: same answer, version checked */
		struct temp_v1 t = {.version = (unsigned)sizeof(struct temp_v1) | (1u << 24), .sensor = 0};
		IS(nvmlDeviceGetTemperatureV(dev0, &t), NVML_ERROR_NOT_SUPPORTED);
		t.version = 1;
		IS(nvmlDeviceGetTemperatureV(dev0, &t), 25 /* ARGUMENT_VERSION_MISMATCH */);
		IS(nvmlDeviceGetTemperatureV(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	}
	IS(nvmlDeviceGetPowerUsage(dev0, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetEnforcedPowerLimit(dev0, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetFanSpeed(dev0, &v), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlDeviceGetPerformanceState(dev0, &p), NVML_ERROR_NOT_SUPPORTED);

	struct nvml_field_value fv[2];
	memset(fv, 0, sizeof fv);
	fv[0].fieldId = 186; /* NVML_FI_DEV_POWER_INSTANT */
	fv[1].fieldId = 1;
	OK(nvmlDeviceGetFieldValues(dev0, 2, fv));
	CHECK(fv[0].nvmlReturn == NVML_ERROR_NOT_SUPPORTED && fv[1].nvmlReturn == NVML_ERROR_NOT_SUPPORTED && fv[0].timestamp > 0);
	IS(nvmlDeviceGetFieldValues(dev0, 1, NULL), NVML_ERROR_INVALID_ARGUMENT);
}

static void memory(unsigned long long *total, unsigned long long *used, unsigned long long *free_b)
{
	struct nvml_memory m;
	struct nvml_memory_v2 m2;
	memset(&m2, 0, sizeof m2);
	*total = 0;
	IS(nvmlDeviceGetMemoryInfo_v2(dev0, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	m2.version = (unsigned)sizeof m2 | 2u << 24;
	OK(nvmlDeviceGetMemoryInfo_v2(dev0, &m2));
	OK(nvmlDeviceGetMemoryInfo(dev0, &m));
	CHECK(m.total == m2.total && m2.reserved == 0 && m.used + m.free == m.total && m2.used + m2.free == m2.total);
	*total = m.total;
	*used = m.used;
	*free_b = m.free;
}

/* The process list: this process, once it holds device memory through
 * libcuda.so.1, with that memory; memory info that agrees with it (and,
 * with a cap, total = the cap); pynvml's ask-for-the-count sequence. */
static void test_processes_and_memory(void)
{
	unsigned long long total, used0, free0, used1, free1;
	unsigned n = 5;
	struct nvml_process_info pi[4];
	struct nvml_process_info_v1 p1[4];
	memory(&total, &used0, &free0);
	CHECK(total);
	if (mem_limit)
		CHECK(total == mem_limit && used0 == 0);
	OK(nvmlDeviceGetComputeRunningProcesses_v3(dev0, &n, pi));
	CHECK(n == 0);

	int cd;
	void *ctx;
	unsigned long long p;
	CHECK(!cuInit(0) && !cuDeviceGet(&cd, 0) && !cuCtxCreate_v2(&ctx, 0, cd));
	CHECK(!cuMemAlloc_v2(&p, HELD));
	memory(&total, &used1, &free1);
	CHECK(used1 == used0 + HELD && free1 == free0 - HELD);

	n = 0;
	IS(nvmlDeviceGetComputeRunningProcesses_v3(dev0, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK(n == 1);
	n = 4;
	memset(pi, 0, sizeof pi);
	OK(nvmlDeviceGetComputeRunningProcesses_v3(dev0, &n, pi));
	CHECK(n == 1 && pi[0].pid == (unsigned)getpid() && pi[0].usedGpuMemory == HELD);
	CHECK(pi[0].gpuInstanceId == NVML_NO_INSTANCE_ID && pi[0].computeInstanceId == NVML_NO_INSTANCE_ID);
	n = 4;
	OK(nvmlDeviceGetComputeRunningProcesses_v2(dev0, &n, pi));
	CHECK(n == 1 && pi[0].pid == (unsigned)getpid());
	n = 4;
	OK(nvmlDeviceGetComputeRunningProcesses(dev0, &n, p1));
	CHECK(n == 1 && p1[0].pid == (unsigned)getpid() && p1[0].usedGpuMemory == HELD);
	n = 4;
	OK(nvmlDeviceGetGraphicsRunningProcesses_v3(dev0, &n, pi));
	CHECK(n == 0);
	n = 4;
	OK(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev0, &n, pi));
	CHECK(n == 0);
	IS(nvmlDeviceGetComputeRunningProcesses_v3(dev0, NULL, pi), NVML_ERROR_INVALID_ARGUMENT);
}

/* nvidia-smi's table: its process-list slot lists this process; other
 * slots and other tables answer errors and write nothing. */
static void test_export_table(void)
{
	static const unsigned char smi_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
						 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
	unsigned char other[16] = {1};
	const void *t = &t;
	IS(nvmlInternalGetExportTable(&t, other), NVML_ERROR_INVALID_ARGUMENT);
	CHECK(t == NULL);
	OK(nvmlInternalGetExportTable(&t, smi_id));
	const uintptr_t *w = t;
	CHECK(w[0] == 256 * sizeof(void *));
	typedef int (*slot3)(void *, void *, void *);
	static unsigned char entries[2][4128];
	unsigned cap = 2;
	memset(entries, 0xa5, sizeof entries);
	OK(((slot3)w[213])(dev0, &cap, entries));
	CHECK(cap == 1 && *(unsigned *)entries[0] == (unsigned)getpid() &&
	      *(unsigned long long *)(entries[0] + 8) == HELD && strstr((char *)entries[0] + 32, "nvml_test"));
	CHECK(entries[1][0] == 0xa5);
	cap = 2;
	OK(((slot3)w[214])(dev0, &cap, entries));
	CHECK(cap == 0);
	cap = 2;
	IS(((slot3)w[213])(&cap, &cap, entries), NVML_ERROR_INVALID_ARGUMENT);
	IS(((slot3)w[26])(NULL, NULL, NULL), NVML_ERROR_NOT_SUPPORTED);
}

/* Runs cmd, returns its output (static buffer) and exit status. */
static const char *run(const char *cmd, int *status)
{
	static char out[1 << 16];
	size_t n = 0;
	FILE *f = popen(cmd, "r");
	if (!f) {
		*status = -1;
		return "";
	}
	while (n < sizeof out - 1) {
		size_t k = fread(out + n, 1, sizeof out - 1 - n, f);
		if (!k)
			break;
		n += k;
	}
	out[n] = 0;
	*status = pclose(f);
	return out;
}

/* Debian's nvidia-smi against this library while this process holds
 * memory: the default view, -q and the process query work, list this
 * process and exit 0 (no crash at shutdown or exit). */
static void test_nvidia_smi(void)
{
	char cmd[512], pid[32], row[64];
	int st;
	if (!smi)
		return;
	snprintf(pid, sizeof pid, " %d ", (int)getpid());
	const char *out = run(smi, &st);
	if (st || !strstr(out, "vgpu-sim") || !strstr(out, pid) || !strstr(out, "64MiB"))
		fprintf(stderr, "%s\n", out);
	CHECK(st == 0 && strstr(out, "vgpu-sim") && strstr(out, pid) && strstr(out, "64MiB"));
	snprintf(cmd, sizeof cmd, "%s -q", smi);
	out = run(cmd, &st);
	snprintf(pid, sizeof pid, ": %d\n", (int)getpid());
	CHECK(st == 0 && strstr(out, "Product Architecture                  : Hopper") && strstr(out, pid));
	if (mem_limit) {
		snprintf(row, sizeof row, ": %llu MiB", mem_limit >> 20);
		CHECK(strstr(out, row) != NULL);
	}
	snprintf(cmd, sizeof cmd, "%s --query-compute-apps=pid,used_memory --format=csv,noheader", smi);
	out = run(cmd, &st);
	snprintf(row, sizeof row, "%d, 64 MiB", (int)getpid());
	CHECK(st == 0 && strstr(out, row));
}

/* Every hand-written call refuses NULL outputs and foreign handles. */
static void test_bad_arguments(void)
{
	int local, i;
	dev_t_ bogus = &local, past = (char *)dev0 + 1;
	unsigned v;
	char s[96];
	struct nvml_memory m;
	IS(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetHandleByUUID(NULL, &bogus), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetHandleByPciBusId_v2(NULL, &bogus), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetName(bogus, s, sizeof s), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetName(past, s, sizeof s), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetName(NULL, s, sizeof s), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetName(dev0, NULL, sizeof s), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetUUID(dev0, NULL, sizeof s), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetMemoryInfo(bogus, &m), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetMemoryInfo(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetMemoryInfo_v2(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetPciInfo_v3(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetPciInfo(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetIndex(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetComputeMode(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetCudaComputeCapability(dev0, NULL, &i), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetArchitecture(bogus, &v), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetEccMode(dev0, &i, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetPersistenceMode(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetUtilizationRates(dev0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetUtilizationRates(bogus, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetTemperature(dev0, 0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetClockInfo(dev0, -1, &v), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetComputeRunningProcesses_v3(bogus, &v, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlDeviceGetFieldValues(dev0, -1, NULL), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlSystemGetDriverVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlSystemGetProcessName(1, NULL, 80), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlInternalGetExportTable(NULL, s), NVML_ERROR_INVALID_ARGUMENT);
}

/* Every return code has its own text; unknown codes are "Unknown Error". */
static void test_error_strings(void)
{
	const char *seen[31];
	for (int r = 0; r <= 30; r++) {
		seen[r] = nvmlErrorString(r);
		CHECK(seen[r] && seen[r][0] && strcmp(seen[r], "Unknown Error"));
		for (int q = 0; q < r; q++)
			CHECK(strcmp(seen[q], seen[r]));
	}
	CHECK(!strcmp(nvmlErrorString(999), "Unknown Error") && !strcmp(nvmlErrorString(-1), "Unknown Error") &&
	      !strcmp(nvmlErrorString(31), "Unknown Error"));
}

/* Event sets: no event types, none delivered, waits time out. */
static void test_events(void)
{
	void *set, *set2;
	unsigned long long types = 1;
	char data[64];
	OK(nvmlEventSetCreate(&set));
	OK(nvmlDeviceGetSupportedEventTypes(dev0, &types));
	CHECK(types == 0);
	OK(nvmlDeviceRegisterEvents(dev0, 0, set));
	IS(nvmlDeviceRegisterEvents(dev0, 8 /* Xid critical errors */, set), NVML_ERROR_NOT_SUPPORTED);
	IS(nvmlEventSetWait_v2(set, data, 10), NVML_ERROR_TIMEOUT);
	OK(nvmlEventSetCreate(&set2));
	CHECK(set2 != set);
	OK(nvmlEventSetFree(set));
	IS(nvmlEventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlEventSetWait_v2(set, data, 10), NVML_ERROR_INVALID_ARGUMENT);
	IS(nvmlEventSetFree(data), NVML_ERROR_INVALID_ARGUMENT);
	OK(nvmlEventSetFree(set2));
}

/* The last nvmlShutdown ends NVML (not the process's CUDA session); NVML
 * can start again. */
static void test_shutdown(void)
{
	unsigned n;
	OK(nvmlShutdown());
	IS(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	IS(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	IS(nvmlDeviceGetName(dev0, (char *)&n, sizeof n), NVML_ERROR_UNINITIALIZED);
	OK(nvmlInit_v2());
	OK(nvmlDeviceGetCount_v2(&n));
	OK(nvmlShutdown());
}

static const struct {
	const char *name;
	void (*fn)(void);
} tests[] = {
	{"init", test_init},
	{"system", test_system},
	{"identity", test_identity},
	{"properties", test_properties},
	{"monitor", test_monitor},
	{"processes_and_memory", test_processes_and_memory},
	{"export_table", test_export_table},
	{"nvidia_smi", test_nvidia_smi},
	{"bad_arguments", test_bad_arguments},
	{"error_strings", test_error_strings},
	{"events", test_events},
	{"shutdown", test_shutdown},
};

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mem-limit"))
			mem_limit = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--smi"))
			smi = argv[i + 1];
	}
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		int before = failures;
		tests[i].fn();
		printf("%s nvml %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
		if (i == 0 && failures)
			break; /* no handle: nothing else can run */
	}
	return failures;
}
