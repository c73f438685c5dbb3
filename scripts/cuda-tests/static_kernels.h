// Kernels defined in static_kernels.cu and linked from libstatic_kernels.a.
#pragma once
#include <cuda_runtime.h>

__global__ void lib_saxpy(float a, const float *x, float *y, int n);
__global__ void lib_iota(int *out, int base, int n);
