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
typedef struct vgpu_library *CUlibrary;
typedef struct vgpu_kernel *CUkernel;
typedef struct vgpu_stream *CUstream;
typedef struct vgpu_event *CUevent;
/* Graphs are the backend session's handles, as opaque pointers (graph.c). */
typedef void *CUgraph;
typedef void *CUarray;
typedef void *CUgraphExec;
typedef void *CUgraphNode;
typedef void (*CUhostFn)(void *userData);
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

/* A context: the guest's view of a device's context (the host keeps one
 * per device and session). Primary contexts live in a fixed table, one per
 * device; created ones (cuCtxCreate) on a list of live contexts, so a
 * stale handle is an error, not a use after free (context.c). */
struct vgpu_cls_entry;
struct vgpu_ctx {
	int dev;
	unsigned flags;
	int primary;
	int refcount; /* primary: cuDevicePrimaryCtxRetain count (active while > 0) */
	unsigned long long id; /* cuCtxGetId: unique per context (per activation of a primary) */
	struct vgpu_cls_entry *cls; /* context-local storage (export table CLS) */
	unsigned ncls, cls_cap;
	struct vgpu_ctx *next; /* created contexts: the live list */
};

/* A stream: what a CUstream points to. */
struct vgpu_stream {
	uint64_t handle; /* host stream handle */
	int dev;
	unsigned flags;
	int priority;
	unsigned long long capture_id; /* the driver capture in progress (graph.c), or 0 */
};

/* An event. */
struct vgpu_event {
	uint64_t handle;
	int dev;
	unsigned flags;
	struct vgpu_event *hnext; /* vgpu_event_by_handle's chain */
};

/* The live CUevent of host handle h (an event node's, as the host names
 * it), or NULL. */
struct vgpu_event *vgpu_event_by_handle(uint64_t h);

/* A CUlaunchAttributeValue of attribute attr (1 access policy window; 2,
 * 3, 8, 10 an int; 9 a memory sync domain map) as the protocol carries a
 * stream attribute's value (VGPU_E_INVALID_VALUE: not one of those), and
 * back; only the attribute's own bytes are read or written. */
struct vgpu_stream_attr_value;
int vgpu_attr_encode(int attr, const void *value, struct vgpu_stream_attr_value *out);
void vgpu_attr_decode(int attr, const struct vgpu_stream_attr_value *v, void *out);

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

/* CUDA_MEMCPY3D (cuda.h, 200 bytes) */
typedef struct {
	size_t srcXInBytes, srcY, srcZ, srcLOD;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	void *reserved0;
	size_t srcPitch, srcHeight;
	size_t dstXInBytes, dstY, dstZ, dstLOD;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	void *reserved1;
	size_t dstPitch, dstHeight;
	size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

/* CUDA_ARRAY_DESCRIPTOR and CUDA_ARRAY3D_DESCRIPTOR (cuda.h) */
typedef struct {
	size_t Width, Height;
	int Format;
	unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct {
	size_t Width, Height, Depth;
	int Format;
	unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC, CUDA_RESOURCE_VIEW_DESC (cuda.h;
 * 144, 104 and 112 bytes) */
typedef struct {
	int resType;
	union {
		struct {
			CUarray hArray;
		} array;
		struct {
			void *hMipmappedArray;
		} mipmap;
		struct {
			CUdeviceptr devPtr;
			int format;
			unsigned numChannels;
			size_t sizeInBytes;
		} linear;
		struct {
			CUdeviceptr devPtr;
			int format;
			unsigned numChannels;
			size_t width, height, pitchInBytes;
		} pitch2D;
		struct {
			int reserved[32];
		} reserved;
	} res;
	unsigned flags;
} CUDA_RESOURCE_DESC;
typedef struct {
	int addressMode[3];
	int filterMode;
	unsigned flags, maxAnisotropy;
	int mipmapFilterMode;
	float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
	float borderColor[4];
	int reserved[12];
} CUDA_TEXTURE_DESC;
typedef struct {
	int format;
	size_t width, height, depth;
	unsigned firstMipmapLevel, lastMipmapLevel, firstLayer, lastLayer;
	unsigned reserved[16];
} CUDA_RESOURCE_VIEW_DESC;
typedef unsigned long long CUtexObject;
typedef unsigned long long CUsurfObject;

/* CUmemorytype (cuda.h) */
enum { VGPU_MT_HOST = 1, VGPU_MT_DEVICE = 2, VGPU_MT_ARRAY = 3, VGPU_MT_UNIFIED = 4 };

/* array.c: a 3D copy between any of host memory, device memory and CUDA
 * arrays (cuMemcpy3D); memory2d.c sends 2D copies with an array side here. */
CUresult vgpu_copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async);
/* memory2d.c: a 2D copy between host and device memory (no arrays). */
CUresult vgpu_copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async);

#define VGPU_ALIAS(name, target) \
	extern __typeof(target) name __attribute__((alias(#target), visibility("default")))

/* CUmemAllocationProp (cuda.h, 32 bytes): cuMemGetAllocationGranularity, cuMemCreate. */
struct mem_alloc_prop {
	uint32_t type, handle_types;
	uint32_t loc_type; /* CUmemLocationType: 1 device, 2 host, 3 host NUMA, 4 current NUMA */
	int32_t loc_id;
	void *win32_meta;
	uint8_t compression, rdma;
	uint16_t usage;
	uint8_t reserved[4];
};
_Static_assert(sizeof(struct mem_alloc_prop) == 32, "CUmemAllocationProp");

/* CUmemLocation and CUmemAccessDesc (cuda.h): vmm.c, mempool.c. */
struct mem_location {
	int32_t type; /* CUmemLocationType: 1 device */
	int32_t id;
};
struct mem_access_desc {
	struct mem_location location;
	int32_t flags; /* CUmemAccess_flags: 0 none, 1 read, 3 read-write */
};
_Static_assert(sizeof(struct mem_access_desc) == 12, "CUmemAccessDesc");

/* Graphs (calls_gen.c, graph.c): captures in progress, the host's status. */
VGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
int vgpu_cu_captures_active(void);
CUresult vgpu_cu_capture_status(CUstream s, int *status);

/* Inside libcuda.so.1 (driver.c): CUDA_ERROR_NOT_INITIALIZED until cuInit. */
CUresult vgpu_cu_need_init(void);

/* Inside libcuda.so.1 (context.c): context-local storage, the CLS export
 * table's put/delete/get (EXPORT-TABLES.md §3); ctx NULL is the calling
 * thread's current context. */
typedef void (*vgpu_cls_dtor)(CUcontext ctx, void *key, void *value);
CUresult vgpu_cls_put(CUcontext ctx, void *key, void *value, vgpu_cls_dtor dtor);
CUresult vgpu_cls_delete(CUcontext ctx, void *key);
CUresult vgpu_cls_get(void **value, CUcontext ctx, void *key);
/* The primary context's handle of device dev, neither retained nor made
 * current (export table CUDART_INTERFACE slot 2). */
CUresult vgpu_primary_ctx(CUcontext *pctx, CUdevice dev);

/* export_tables.c: cuGetExportTable without the API accounting. */
CUresult vgpu_export_table(const void **table, const uint8_t uuid[16]);
/* The integrity check's HMAC-MD2 (EXPORT-TABLES.md §2) over the given
 * inputs; exported for the tests and the GPU probe, which compare it with
 * the real driver's answer. */
struct vgpu_integrity_dev {
	uint8_t uuid[16];
	int pci_domain, pci_bus, pci_device;
};
VGPU_PRIVATE void vgpu_integrity_hash(uint32_t driver_version, uint32_t version, uint32_t pid, uint32_t tid,
				      uint64_t cudart_table, uint64_t integrity_table, uint64_t fn, uint64_t seconds,
				      int ndev, const struct vgpu_integrity_dev *devs, uint8_t out[16]);
VGPU_EXPORT CUresult cuModuleLoadData(CUmodule *pm, const void *img);
VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice d);
VGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext *pc);

/* The current context's device of the calling thread (context.c). */
int vgpu_ctx_device(int *dev);
/* The CUDA version cuDriverGetVersion reports (driver.c). */
int vgpu_driver_version(void);
int vgpu_module_loading_mode(void);
/* module.c: an image as cuModuleLoadData takes it (a fatbin wrapper, a
 * fatbin, a cubin or PTX): where its bytes start, their size and
 * VGPU_IMAGE_* kind; and a module file read whole into *image (malloc'd). */
CUresult vgpu_image_span(const void *img, const void **start, uint64_t *size, int *kind);
CUresult vgpu_image_file(const char *path, void **image, uint64_t *size, int *kind);
/* Resolves a driver API symbol as cuGetProcAddress does: 0, or
 * VGPU_E_NOT_FOUND with *status (if non-NULL) saying why, or
 * VGPU_E_INVALID_VALUE (bad arguments, a version above ours). */
int vgpu_proc_address(const char *name, void **pfn, int version, unsigned long long flags, int *status);

#endif
