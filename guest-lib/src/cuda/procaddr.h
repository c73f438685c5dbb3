/* procaddr.h - cuGetProcAddress's table (generated/libcuda.so.1.procaddr.c,
 * from tables/procaddr.tbl, a probe of a real driver). */
#ifndef VGPU_PROCADDR_H
#define VGPU_PROCADDR_H

/* From version on, a name resolves to fn, or (fn NULL) to status
 * (1 SYMBOL_NOT_FOUND, 2 VERSION_NOT_SUFFICIENT). */
struct vgpu_pa_step {
	int version;
	int status;
	void (*fn)(void);
};

struct vgpu_pa_list {
	unsigned n; /* 0 in flags2: the same as flags0 */
	const struct vgpu_pa_step *steps; /* ascending versions */
};

struct vgpu_pa_name {
	const char *name;
	struct vgpu_pa_list flags0; /* flags 0 and 1 */
	struct vgpu_pa_list flags2; /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
};

/* Sorted by name (strcmp order). */
extern const struct vgpu_pa_name vgpu_procaddr_names[];
extern const unsigned vgpu_procaddr_count;
/* cuDriverGetVersion of the probed driver: the newest version the table knows. */
extern const int vgpu_procaddr_driver_version;

#endif
