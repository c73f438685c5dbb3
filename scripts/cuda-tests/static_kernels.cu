// static_kernels: kernels compiled into a static library (nvcc -lib) for func_by_symbol_static.
// No rdc: each kernel is complete in this translation unit; only its host stub is linked.
#include "static_kernels.h"

__global__ void lib_saxpy(float a, const float *x, float *y, int n) {
  __shared__ float stage[256];  // 1 KiB of static shared memory, checked by the program
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  stage[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = a * stage[threadIdx.x] + y[i];
}

__global__ void lib_iota(int *out, int base, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + i;
}
