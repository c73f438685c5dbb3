/*
 * nvml_export.c - nvmlInternalGetExportTable: NVML's private table of
 * entry points, which nvidia-smi asks for right after nvmlInit and
 * without which it stops ("Mismatch in versions between nvidia-smi and
 * NVML", exit 255). Behaviour measured with Debian 12's nvidia-smi
 * 535.261.03 against this library (docs/NVML.md has the details):
 *
 *  - nvidia-smi asks for one table, id c4fe3e6c-c98f-6c4e-a327-ee696e12f7c4
 *    (16 bytes in memory order below). Word 0 is the table's size in
 *    bytes; nvidia-smi calls slot i (word i) only if i * 8 < size, and
 *    falls back to the public API when a slot fails.
 *  - Slots 213, 214, 215 list a device's processes: (device, unsigned
 *    *count: in the capacity, out the number written, entries). 213 is
 *    compute (the Type "C" rows and --query-compute-apps); 214 and 215
 *    follow it and must succeed for the list to be shown. An entry is 4128
 *    bytes: u32 pid at 0, u64 used bytes at 8, u32 GPU and compute
 *    instance ids at 16 and 20 (~0 without MIG), the process name at 32
 *    (4096 bytes, NUL-terminated).
 *  - Every other slot seen (26 with pointers into nvidia-smi's strings;
 *    81: a handle by index, then the public call) answers
 *    NVML_ERROR_NOT_SUPPORTED here, and nvidia-smi goes on without it.
 *
 * Each slot is its own function, so a call says which slot it is; none
 * writes through an argument it does not understand.
 */
#include <string.h>

#include "nvml_int.h"

#define SLOTS 256
#define SLOT_COMPUTE_PROCS 213
#define SLOT_GRAPHICS_PROCS 214
#define SLOT_MPS_PROCS 215

/* One process entry as nvidia-smi lays it out. */
struct smi_proc {
	uint32_t pid;
	uint32_t pad0;
	uint64_t used;
	uint32_t gpu_instance, compute_instance;
	uint64_t reserved;
	char name[4096];
};
_Static_assert(sizeof(struct smi_proc) == 4128, "nvidia-smi process entry");

static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					       0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

static nvmlReturn_t proc_list(int slot, void *dev, void *countp, void *entries)
{
	const struct vgpu_device_info *di;
	unsigned *count = countp;
	nvmlReturn_t r = nvml_dev_info(dev, &di);
	if (r)
		return r;
	if (!count || *count > 65536 || (*count && !entries))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (slot != SLOT_COMPUTE_PROCS) { /* no graphics or MPS processes */
		*count = 0;
		return NVML_SUCCESS;
	}
	static struct vgpu_process_info list[VGPU_MAX_PROCESSES];
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	unsigned n;
	pthread_mutex_lock(&mu);
	r = nvml_processes(dev, list, &n);
	if (r)
		n = 0;
	if (n > *count) /* shown as far as it fits */
		n = *count;
	for (unsigned i = 0; i < n; i++) {
		struct smi_proc *e = (struct smi_proc *)entries + i;
		memset(e, 0, sizeof *e);
		e->pid = list[i].pid;
		e->used = list[i].used_memory;
		e->gpu_instance = e->compute_instance = NVML_NO_INSTANCE_ID;
		if (nvml_process_name(e->pid, e->name, sizeof e->name))
			e->name[0] = 0;
	}
	pthread_mutex_unlock(&mu);
	*count = n;
	return r;
}

static nvmlReturn_t slot_call(int slot, void *a0, void *a1, void *a2)
{
	static int logged[SLOTS];
	switch (slot) {
	case SLOT_COMPUTE_PROCS:
	case SLOT_GRAPHICS_PROCS:
	case SLOT_MPS_PROCS:
		return proc_list(slot, a0, a1, a2);
	}
	if (!__atomic_exchange_n(&logged[slot], 1, __ATOMIC_RELAXED))
		VDEBUG("nvidia-smi's internal NVML slot %d is not served by vgpu; returning NOT_SUPPORTED", slot);
	return NVML_ERROR_NOT_SUPPORTED;
}

#define SLOT(n) \
	static nvmlReturn_t slot_##n(void *a0, void *a1, void *a2) { return slot_call(n, a0, a1, a2); }
#define SLOT8(n) SLOT(n##0) SLOT(n##1) SLOT(n##2) SLOT(n##3) SLOT(n##4) SLOT(n##5) SLOT(n##6) SLOT(n##7)
#define ADDR(n) (const void *)slot_##n,
#define ADDR8(n) ADDR(n##0) ADDR(n##1) ADDR(n##2) ADDR(n##3) ADDR(n##4) ADDR(n##5) ADDR(n##6) ADDR(n##7)
/* Slots 1..255 in octal groups: 0001..0377. */
#define ALL(M8, M) M(1) M(2) M(3) M(4) M(5) M(6) M(7) \
	M8(01) M8(02) M8(03) M8(04) M8(05) M8(06) M8(07) M8(010) M8(011) M8(012) M8(013) M8(014) M8(015) \
	M8(016) M8(017) M8(020) M8(021) M8(022) M8(023) M8(024) M8(025) M8(026) M8(027) M8(030) M8(031) \
	M8(032) M8(033) M8(034) M8(035) M8(036) M8(037)

ALL(SLOT8, SLOT)

static const void *const smi_table[SLOTS] = {
	(const void *)(uintptr_t)(SLOTS * sizeof(void *)),
	ALL(ADDR8, ADDR)
};

VGPU_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
	VGPU_API();
	if (!table || !id)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memcmp(id, smi_table_id, sizeof smi_table_id)) {
		*table = NULL;
		VDEBUG("nvmlInternalGetExportTable: unknown table id; returning INVALID_ARGUMENT");
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	*table = smi_table;
	return NVML_SUCCESS;
}
