/*
 * rt_abi.h - the CUDA runtime's ABI as far as the C tests use it (values,
 * sizes and offsets of driver_types.h, 11.0 and later), so that they build
 * without CUDA headers and call whichever NVIDIA libcudart they link.
 * layout_test.c checks the structs against the real 11.8 header.
 */
#ifndef VGPU_TEST_RT_ABI_H
#define VGPU_TEST_RT_ABI_H

#include <stddef.h>

#include "cuda_types.h"

typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUevent cudaEvent_t;
enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorInvalidDevice = 101,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorNotSupported = 801,
};
enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
/* cudaMemcpy3DParms and its parts */
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
/* The first fields of cudaDeviceProp: the same from 11.0 to 13.x up to
 * maxGridSize; 11.x and 12.x then have clockRate and deviceOverlap, which
 * 13.x removed. */
#define RT_PROP_HEAD                                   \
	char name[256];                                \
	char uuid[16];                                 \
	char luid[8];                                  \
	unsigned luidDeviceNodeMask;                   \
	size_t totalGlobalMem, sharedMemPerBlock;      \
	int regsPerBlock, warpSize;                    \
	size_t memPitch;                               \
	int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
struct rt_prop11_head {
	RT_PROP_HEAD
	int clockRate;
	size_t totalConstMem;
	int major, minor;
	size_t textureAlignment, texturePitchAlignment;
	int deviceOverlap, multiProcessorCount;
};
struct rt_prop13_head {
	RT_PROP_HEAD
	size_t totalConstMem;
	int major, minor;
	size_t textureAlignment, texturePitchAlignment;
	int multiProcessorCount;
};

/* struct cudaPointerAttributes (11.0 and later) */
struct rt_ptr_attrs {
	int type;
	int device;
	void *devicePointer;
	void *hostPointer;
};

#endif
