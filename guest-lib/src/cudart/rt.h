/*
 * rt.h - the CUDA runtime library (libcudart.so.*), built once per ABI:
 * VGPU_CUDART_ABI is 11, 12 or 13. Types are written from the runtime's
 * published ABI (sizes, offsets and values of driver_types.h /
 * cuda_runtime_api.h); tests/layout_test.c checks the 11.x layouts
 * against the real 11.8 header where it is installed.
 */
#ifndef VGPU_RT_H
#define VGPU_RT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_types.h"

#ifndef VGPU_CUDART_ABI
#error "VGPU_CUDART_ABI must be 11, 12 or 13"
#endif

typedef int cudaError_t;
typedef struct vgpu_stream *cudaStream_t;
typedef struct vgpu_event *cudaEvent_t;
typedef struct { unsigned x, y, z; } dim3;

#define RT_API VGPU_EXPORT cudaError_t

/* cudaError_t values used here (identical to the CUresult numbers). */
enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidSymbol = 13,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorDevicesUnavailable = 46,
	cudaErrorMissingConfiguration = 52,
	cudaErrorInvalidDeviceFunction = 98,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalState = 401,
	cudaErrorSymbolNotFound = 500,
	cudaErrorNotReady = 600,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorHostMemoryNotRegistered = 713,
	cudaErrorNotSupported = 801,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
	cudaErrorStreamCaptureUnmatched = 903,
	cudaErrorStreamCaptureWrongThread = 908,
	cudaErrorUnknown = 999,
};

/* enum cudaMemcpyKind */
enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };

/* ---- runtime state (rt_core.c) ---- */

/* Lazily initialises the runtime: connection, device count, the calling
 * thread's current device made current in the driver API too. */
cudaError_t rt_init(void);
/* The calling thread's device. */
int rt_device(void);
/* Records err as the thread's last error (and the process's sticky error
 * if it is one) and returns it. */
cudaError_t rt_err(cudaError_t err);
#define RT_RETURN(e) return rt_err(e)

/* ---- kernels and variables (rt_register.c) ---- */
struct rt_kernel;
/* Finds the kernel of a host stub (or a cudaKernel_t handle) and its
 * function on the current device (loading the module on first use). */
cudaError_t rt_kernel_func(const void *host_fun, struct vgpu_func **f);
/* Forgets what the host dropped in a device reset: modules, functions,
 * variable addresses of device dev. */
void rt_forget_device(int dev);
cudaError_t rt_launch(const void *host_fun, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s);

/* ---- stream capture (rt_graph.c) ---- */
/* If s is capturing, records the operation into its graph and returns 1. */
struct rt_node;
int rt_capturing(cudaStream_t s);
void rt_capture_end(void *graph); /* streams that joined it stop capturing */
cudaError_t rt_capture_kernel(cudaStream_t s, const void *host_fun, struct vgpu_func *f, dim3 grid, dim3 block,
			      size_t smem, void **args);
cudaError_t rt_capture_memcpy(cudaStream_t s, void *dst, const void *src, size_t n, int kind);
cudaError_t rt_capture_memset(cudaStream_t s, void *dst, int value, size_t n);
cudaError_t rt_capture_host(cudaStream_t s, void (*fn)(void *), void *user);

/* ---- memory (rt_memory.c) ---- */
cudaError_t rt_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async);
cudaError_t rt_memset(void *dst, int value, size_t n, cudaStream_t s, int async);
/* cudaMemcpy3DParms and its parts (driver_types.h). */
struct rt_pos { size_t x, y, z; };
struct rt_pitched { void *ptr; size_t pitch, xsize, ysize; };
struct rt_extent { size_t width, height, depth; };
struct rt_3d {
	void *srcArray;
	struct rt_pos srcPos;
	struct rt_pitched srcPtr;
	void *dstArray;
	struct rt_pos dstPos;
	struct rt_pitched dstPtr;
	struct rt_extent extent;
	int kind;
};
cudaError_t rt_copy3d(const struct rt_3d *p, cudaStream_t s, int async);
cudaError_t rt_host_func(cudaStream_t s, void (*fn)(void *), void *user);

/* ---- cudaDeviceProp: three layouts ---- */

typedef struct { char bytes[16]; } cudaUUID_t;

/* The fields every layout shares up to maxGridSize, then each differs. */
struct rt_prop11 { /* CUDA 11.x (11.8 driver_types.h) */
	char name[256];
	cudaUUID_t uuid;
	char luid[8];
	unsigned luidDeviceNodeMask;
	size_t totalGlobalMem, sharedMemPerBlock;
	int regsPerBlock, warpSize;
	size_t memPitch;
	int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
	size_t totalConstMem;
	int major, minor;
	size_t textureAlignment, texturePitchAlignment;
	int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
	int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2];
	int maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap;
	int maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2];
	int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3];
	int maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
	size_t surfaceAlignment;
	int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount;
	int unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize;
	int maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
	size_t sharedMemPerMultiprocessor;
	int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported;
	int singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess;
	int computePreemptionSupported, canUseHostPointerForRegisteredMem, cooperativeLaunch;
	int cooperativeMultiDeviceLaunch;
	size_t sharedMemPerBlockOptin;
	int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor;
	int accessPolicyMaxWindowSize;
	size_t reservedSharedMemPerBlock;
};

/* CUDA 12.x: the 11.x layout, then new fields, then reserved words. */
struct rt_prop12 {
	struct rt_prop11 b;
	int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported;
	int timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
	unsigned gpuDirectRDMAFlushWritesOptions;
	int gpuDirectRDMAWritesOrdering;
	unsigned memoryPoolSupportedHandleTypes;
	int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
	int reserved[63];
};

/* CUDA 13.x (checked against the 13.0, 13.1 and 13.3 driver_types.h field
 * lists): deprecated fields removed (clockRate, deviceOverlap,
 * kernelExecTimeoutEnabled, computeMode, maxTexture1DLinear,
 * memoryClockRate, singleToDoublePrecisionPerfRatio,
 * cooperativeMultiDeviceLaunch), NUMA/PCI fields added. */
struct rt_prop13 {
	char name[256];
	cudaUUID_t uuid;
	char luid[8];
	unsigned luidDeviceNodeMask;
	size_t totalGlobalMem, sharedMemPerBlock;
	int regsPerBlock, warpSize;
	size_t memPitch;
	int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
	size_t totalConstMem;
	int major, minor;
	size_t textureAlignment, texturePitchAlignment;
	int multiProcessorCount, integrated, canMapHostMemory;
	int maxTexture1D, maxTexture1DMipmap, maxTexture2D[2], maxTexture2DMipmap[2];
	int maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap;
	int maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2];
	int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3];
	int maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
	size_t surfaceAlignment;
	int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount;
	int unifiedAddressing, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize;
	int maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
	size_t sharedMemPerMultiprocessor;
	int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported;
	int pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported;
	int canUseHostPointerForRegisteredMem, cooperativeLaunch;
	size_t sharedMemPerBlockOptin;
	int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor;
	int accessPolicyMaxWindowSize;
	size_t reservedSharedMemPerBlock;
	int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported;
	int timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
	unsigned gpuDirectRDMAFlushWritesOptions;
	int gpuDirectRDMAWritesOrdering;
	unsigned memoryPoolSupportedHandleTypes;
	int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
	int deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId;
	unsigned gpuPciDeviceID, gpuPciSubsystemID;
	int hostNumaMultinodeIpcSupported;
	int reserved[56]; /* never written here */
};

/* Bytes of the caller's struct we fill: only fields we know exist. */
#define RT_PROP11_BYTES sizeof(struct rt_prop11)
#define RT_PROP12_BYTES offsetof(struct rt_prop12, reserved)
#define RT_PROP13_BYTES offsetof(struct rt_prop13, reserved)
_Static_assert(sizeof(struct rt_prop11) == 728, "cudaDeviceProp 11.x is 728 bytes");

/* Fills the first `bytes` bytes at dst with device dev's properties in the
 * given ABI's layout (11, 12 or 13). */
cudaError_t rt_fill_prop(void *dst, int abi, int dev);

/* cudaFuncAttributes (driver_types.h): the 11.x struct; 12.x and 13.x
 * append the cluster fields and 16 reserved ints (struct rt_func_attrs12). */
struct rt_func_attrs {
	size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
	int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA;
	int maxDynamicSharedSizeBytes, preferredShmemCarveout;
};
struct rt_func_attrs12 {
	struct rt_func_attrs b;
	int clusterDimMustBeSet, requiredClusterWidth, requiredClusterHeight, requiredClusterDepth;
	int clusterSchedulingPolicyPreference, nonPortableClusterSizeAllowed;
	int reserved[16];
};
_Static_assert(sizeof(struct rt_func_attrs12) == 144, "cudaFuncAttributes 12.x/13.x is 144 bytes");

/* More runtime structs (driver_types.h); tests/layout_test.c checks them against 11.8. */
/* struct cudaPointerAttributes (11+): type, device, devicePointer, hostPointer */
struct rt_ptr_attrs {
	int type;
	int device;
	void *devicePointer;
	void *hostPointer;
};

/* struct cudaKernelNodeParams (driver_types.h) */
struct rt_kernel_params {
	void *func;
	dim3 gridDim, blockDim;
	unsigned sharedMemBytes;
	void **kernelParams;
	void **extra;
};

/* struct cudaMemsetParams (driver_types.h) */
struct rt_memset_params {
	void *dst;
	size_t pitch;
	unsigned value, elementSize;
	size_t width, height;
};

/* struct cudaHostNodeParams */
struct rt_host_params {
	void (*fn)(void *);
	void *userData;
};

/* cudaLaunchConfig_t (12.0+; also in 11.8's header). */
struct rt_launch_config {
	dim3 gridDim, blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	void *attrs;
	unsigned numAttrs;
};

#endif
