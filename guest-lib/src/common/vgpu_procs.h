/* vgpu_procs.h - the generated name -> function table (generated/libcuda.so.1.procs.c). */
#ifndef VGPU_PROCS_H
#define VGPU_PROCS_H

struct vgpu_proc {
	const char *name;
	void (*fn)(void);
};

/* Sorted by name (strcmp order). */
extern const struct vgpu_proc vgpu_procs[];
extern const unsigned vgpu_nprocs;

#endif
