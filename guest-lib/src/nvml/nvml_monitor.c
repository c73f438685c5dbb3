/*
 * nvml_monitor.c - what a device is doing: utilization, temperature,
 * power, fan, performance state and clocks (DEVICE_GET_MONITOR: the
 * physical GPU as the host's NVML reads it; a reading the host cannot take
 * is NOT_SUPPORTED), the processes using it (DEVICE_GET_PROCESSES: this
 * VM's own, never another VM's), and field values.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvml_int.h"

/* ---- live readings ---- */

/* One reading per device serves the calls of the next 100 ms (nvidia-smi
 * asks for six of them per device in a row); NVML's own samples are as old. */
#define MONITOR_MAX_AGE_NS 100000000ull

static pthread_mutex_t mon_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t at;
	struct vgpu_device_monitor m;
} mon[NVML_MAX_DEV];

nvmlReturn_t nvml_monitor(nvmlDevice_t d, struct vgpu_device_monitor *m)
{
	const struct vgpu_device_info *di;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	int i = d->index, rc = 0;
	uint64_t now = vgpu_now_ns();
	pthread_mutex_lock(&mon_mu);
	if (!mon[i].at || now - mon[i].at > MONITOR_MAX_AGE_NS) {
		struct vgpu_device_req req = {.device = (uint32_t)i};
		struct vgpu_device_monitor rep;
		memset(&rep, 0, sizeof rep);
		rc = vgpu_call(VGPU_OP_DEVICE_GET_MONITOR, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
		if (!rc) {
			mon[i].m = rep;
			mon[i].at = now ? now : 1;
		}
	}
	if (!rc)
		*m = mon[i].m;
	pthread_mutex_unlock(&mon_mu);
	return nvml_from_cu(rc);
}

/* The reading selected by bit, or NOT_SUPPORTED if the host has none. */
static nvmlReturn_t reading(nvmlDevice_t d, uint32_t bit, struct vgpu_device_monitor *m)
{
	nvmlReturn_t r = nvml_monitor(d, m);
	if (!r && !(m->valid & bit))
		r = NVML_ERROR_NOT_SUPPORTED;
	return r;
}

/* Utilization of the whole physical GPU (every VM and host process on it),
 * not of this VM: the host's NVML cannot tell them apart. */
NVML_API nvmlDeviceGetUtilizationRates(nvmlDevice_t d, struct nvml_utilization *u)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!u)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_UTILIZATION, &m);
	if (!r) {
		u->gpu = m.gpu_util;
		u->memory = m.mem_util;
	}
	return r;
}

NVML_API nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *c)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!c || sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_TEMPERATURE, &m);
	if (!r)
		*c = m.temperature_c;
	return r;
}

/* nvmlTemperature_v1_t of nvml.h (NVML 12.8+): nvidia-smi 570+ reads the
 * GPU's temperature through it. */
struct vgpu_nvml_temperature_v1 {
	unsigned version;
	int sensor;
	int temperature;
};
#define VGPU_NVML_TEMPERATURE_V1 ((unsigned)sizeof(struct vgpu_nvml_temperature_v1) | (1u << 24))

NVML_API nvmlDeviceGetTemperatureV(nvmlDevice_t d, struct vgpu_nvml_temperature_v1 *t)
{
	VGPU_API();
	if (!t)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (t->version != VGPU_NVML_TEMPERATURE_V1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned c;
	nvmlReturn_t r = nvmlDeviceGetTemperature(d, t->sensor, &c);
	if (!r)
		t->temperature = (int)c;
	return r;
}

NVML_API nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!mw)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_POWER, &m);
	if (!r)
		*mw = m.power_milliwatts;
	return r;
}

NVML_API nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *mw)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!mw)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_POWER_LIMIT, &m);
	if (!r)
		*mw = m.power_limit_milliwatts;
	return r;
}

/* The management limit a guest could set is the enforced one: it sets
 * none. */
NVML_API nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned *mw) { return nvmlDeviceGetEnforcedPowerLimit(d, mw); }

NVML_API nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned *pct)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!pct)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_FAN, &m);
	if (!r)
		*pct = m.fan_percent;
	return r;
}

NVML_API nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *p)
{
	VGPU_API();
	struct vgpu_device_monitor m;
	if (!p)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, VGPU_MONITOR_PSTATE, &m);
	if (!r)
		*p = (int)m.pstate;
	return r;
}
NVML_API nvmlDeviceGetPowerState(nvmlDevice_t d, int *p) { return nvmlDeviceGetPerformanceState(d, p); }

static nvmlReturn_t clock_mhz(nvmlDevice_t d, int type, unsigned *mhz, int max)
{
	struct vgpu_device_monitor m;
	if (!mhz || type < 0 || type >= NVML_CLOCK_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = reading(d, (max ? VGPU_MONITOR_MAX_CLOCK : VGPU_MONITOR_CLOCK) << type, &m);
	if (!r)
		*mhz = max ? m.max_clocks[type] : m.clocks[type];
	return r;
}

NVML_API nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz)
{
	VGPU_API();
	return clock_mhz(d, type, mhz, 0);
}

NVML_API nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned *mhz)
{
	VGPU_API();
	return clock_mhz(d, type, mhz, 1);
}

/* ---- processes ---- */

nvmlReturn_t nvml_processes(nvmlDevice_t d, struct vgpu_process_info *out, unsigned *n)
{
	const struct vgpu_device_info *di;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	struct vgpu_device_req req = {.device = (uint32_t)d->index};
	struct vgpu_process_list_reply rep;
	uint32_t tail = 0;
	memset(&rep, 0, sizeof rep);
	int rc = vgpu_call(VGPU_OP_DEVICE_GET_PROCESSES, &req, sizeof req, NULL, 0, &rep, sizeof rep, out,
			   VGPU_MAX_PROCESSES * sizeof *out, &tail);
	if (rc)
		return nvml_from_cu(rc);
	unsigned got = tail / sizeof *out;
	*n = rep.count < got ? rep.count : got;
	return NVML_SUCCESS;
}

nvmlReturn_t nvml_process_name(unsigned pid, char *name, unsigned len)
{
	char path[64], buf[4096];
	ssize_t n = -1;
	snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	if (n <= 0 || !buf[0]) { /* a kernel thread, or no cmdline: its comm */
		snprintf(path, sizeof path, "/proc/%u/comm", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return NVML_ERROR_NOT_FOUND;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			return NVML_ERROR_NOT_FOUND;
		if (buf[n - 1] == '\n')
			n--;
	}
	buf[n] = 0; /* cmdline: the first NUL ends argv[0] */
	snprintf(name, len, "%s", buf);
	return NVML_SUCCESS;
}

/* The running-process calls share one shape: fill up to *count entries of
 * size esz with fill(), or say how many there are. With *count too small
 * the answer is NVML_ERROR_INSUFFICIENT_SIZE and *count the number needed
 * (what callers that ask with *count = 0 first rely on). */
typedef void (*fill_fn)(void *entry, const struct vgpu_process_info *p);

static nvmlReturn_t running(nvmlDevice_t d, unsigned *count, void *infos, size_t esz, fill_fn fill, int compute)
{
	static struct vgpu_process_info list[VGPU_MAX_PROCESSES];
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	const struct vgpu_device_info *di;
	unsigned n = 0;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	if (compute) /* vgpu runs compute work only: no graphics or MPS processes */
		r = nvml_processes(d, list, &n);
	if (!r && n > *count)
		r = NVML_ERROR_INSUFFICIENT_SIZE;
	else if (!r && n && !infos)
		r = NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; !r && i < n; i++)
		fill((char *)infos + i * esz, &list[i]);
	pthread_mutex_unlock(&mu);
	if (!r || r == NVML_ERROR_INSUFFICIENT_SIZE)
		*count = n;
	return r;
}

static void fill_v1(void *e, const struct vgpu_process_info *p)
{
	struct nvml_process_info_v1 *o = e;
	o->pid = p->pid;
	o->usedGpuMemory = p->used_memory;
}

static void fill_v2(void *e, const struct vgpu_process_info *p)
{
	struct nvml_process_info *o = e;
	o->pid = p->pid;
	o->usedGpuMemory = p->used_memory;
	o->gpuInstanceId = o->computeInstanceId = NVML_NO_INSTANCE_ID;
}

#define RUNNING(name, compute)                                                                              \
	NVML_API name(nvmlDevice_t d, unsigned *count, struct nvml_process_info_v1 *infos)                 \
	{                                                                                                   \
		VGPU_API();                                                                                 \
		return running(d, count, infos, sizeof *infos, fill_v1, compute);                           \
	}                                                                                                   \
	NVML_API name##_v2(nvmlDevice_t d, unsigned *count, struct nvml_process_info *infos)               \
	{                                                                                                   \
		VGPU_API();                                                                                 \
		return running(d, count, infos, sizeof *infos, fill_v2, compute);                           \
	}                                                                                                   \
	NVML_API name##_v3(nvmlDevice_t d, unsigned *count, struct nvml_process_info *infos)               \
	{                                                                                                   \
		VGPU_API();                                                                                 \
		return running(d, count, infos, sizeof *infos, fill_v2, compute);                           \
	}
RUNNING(nvmlDeviceGetComputeRunningProcesses, 1)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses, 0)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses, 0)

/* ---- field values ---- */

/* No NVML field (NVML_FI_*) is served: each value says NOT_SUPPORTED in its
 * own nvmlReturn, and the call succeeds, as NVIDIA's does for fields a GPU
 * lacks (callers such as nvidia-smi read the per-field codes). */
NVML_API nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, struct nvml_field_value *values)
{
	VGPU_API();
	const struct vgpu_device_info *di;
	struct timespec ts;
	if (count < 0 || (count && !values))
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvml_dev_info(d, &di);
	if (r)
		return r;
	clock_gettime(CLOCK_REALTIME, &ts);
	for (int i = 0; i < count; i++) {
		values[i].timestamp = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
		values[i].latencyUsec = 0;
		values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
	}
	return NVML_SUCCESS;
}
