/* layout_real.c - offsets of the real CUDA 11.8 structs (see layout_test.c). */
#include <stddef.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define PROP struct cudaDeviceProp
#define P3D struct cudaMemcpy3DParms
#define LCFG struct CUlaunchConfig_st
#define PTRATTR struct cudaPointerAttributes
#define M2D CUDA_MEMCPY2D
#define M3D CUDA_MEMCPY3D
#define A3D CUDA_ARRAY3D_DESCRIPTOR
#define ARRD CUDA_ARRAY_DESCRIPTOR
#define RESD CUDA_RESOURCE_DESC
#define TEXD CUDA_TEXTURE_DESC
#define VIEWD CUDA_RESOURCE_VIEW_DESC
#define ROW(t, f) offsetof(t, f),
#define SIZE(t) sizeof(t),
const size_t layout_real[] = {
#include "layout_fields.h"
};
