/*
 * cuda_types.h - the driver API types the library implements, written from
 * the CUDA driver API's published ABI (cuda.h: sizes and values only).
 * Handles are the library's own objects.
 */
#ifndef VGPU_CUDA_TYPES_H
#define VGPU_CUDA_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "vgpu_internal.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct vgpu_ctx *CUcontext;
typedef struct vgpu_module *CUmodule;
typedef struct vgpu_func *CUfunction;
typedef struct vgpu_stream *CUstream;
typedef struct vgpu_event *CUevent;
typedef void (*CUhostFn)(void *userData);
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

/* A context: the guest's view of a device's context (the host keeps one
 * per device and session). */
struct vgpu_ctx {
	int dev;
	unsigned flags;
	int primary;
	int refcount;
};

/* A stream. cudaStream_t and CUstream are both pointers to it. */
struct vgpu_stream {
	uint64_t handle; /* host stream handle */
	int dev;
	unsigned flags;
	int priority;
	void *capture; /* runtime: the graph being captured, or NULL */
	int capture_mode;
	unsigned long long capture_id;
};

/* An event. */
struct vgpu_event {
	uint64_t handle;
	int dev;
	unsigned flags;
	void *capture; /* runtime: recorded into this graph during capture */
};

/* Special stream handles (cuda.h). */
#define VGPU_STREAM_LEGACY ((struct vgpu_stream *)0x1)
#define VGPU_STREAM_PER_THREAD ((struct vgpu_stream *)0x2)

static inline uint64_t vgpu_stream_handle(const struct vgpu_stream *s)
{
	if (s == NULL || s == VGPU_STREAM_LEGACY || s == VGPU_STREAM_PER_THREAD)
		return 0;
	return s->handle;
}

/* CUlaunchConfig (cuda.h, CUDA 12.0+). */
typedef struct {
	unsigned gridDimX, gridDimY, gridDimZ;
	unsigned blockDimX, blockDimY, blockDimZ;
	unsigned sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned numAttrs;
} CUlaunchConfig;

/* CUDA_MEMCPY2D (cuda.h; tests/layout_test.c checks it against 11.8) */
typedef struct {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

#define VGPU_ALIAS(name, target) \
	extern __typeof(target) name __attribute__((alias(#target), visibility("default")))

/* Exported driver API calls the runtime uses. */
VGPU_EXPORT CUresult cuDriverGetVersion(int *v);
VGPU_EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d);

/* Private: the current context's device of the calling thread (driver API
 * state), used by the runtime to keep both APIs in step. */
VGPU_PRIVATE int vgpu_ctx_device(int *dev);
VGPU_PRIVATE void vgpu_ctx_use_primary(int dev);
VGPU_PRIVATE const char *vgpu_cu_error_name(int e);
VGPU_PRIVATE const char *vgpu_cu_error_string(int e);
/* Resolves a driver API symbol as cuGetProcAddress does. */
VGPU_PRIVATE int vgpu_proc_address(const char *name, void **pfn, int version, unsigned long long flags, int *status);

#endif
