// sticky_error: a kernel writes to an illegal address; the next sync returns
// cudaErrorIllegalAddress (700) and the error is sticky: cudaGetLastError, cudaPeekAtLastError,
// cudaDeviceSynchronize and later calls keep returning it. PASS when all that is observed.
// The sim device executes no kernels and cannot fault: there the program reports SKIP.
#include "common.h"
#include <stdint.h>

__global__ void poke(int *p) { p[threadIdx.x] = 42; }

static void expect_700(const char *what, cudaError_t e) {
  EXPECT(e == cudaErrorIllegalAddress, "%s returned %s (%d), want cudaErrorIllegalAddress (700)", what,
         cudaGetErrorName(e), (int)e);
}

int main() {
  t_begin("sticky_error");
  if (t_is_sim_device()) t_skip("sim cannot fault");

  int *good;
  CHECK(cudaMalloc(&good, 4096));
  // Far from any allocation: the null page plus a little (the kernel cannot know it is bad).
  int *bad = (int *)(uintptr_t)0x100;
  poke<<<1, 32>>>(bad);
  cudaError_t launch = cudaGetLastError();
  EXPECT(launch == cudaSuccess || launch == cudaErrorIllegalAddress, "launch returned %s", cudaGetErrorName(launch));

  cudaError_t e = cudaDeviceSynchronize();
  printf("cudaDeviceSynchronize after the bad kernel: %s (%d)\n", cudaGetErrorName(e), (int)e);
  expect_700("cudaDeviceSynchronize (first)", e);
  expect_700("cudaPeekAtLastError", cudaPeekAtLastError());
  expect_700("cudaGetLastError", cudaGetLastError());
  // As the real runtime does (seen on the H100, CUDA 13.0): reading the last
  // error clears it, even though the context stays broken.
  cudaError_t after = cudaPeekAtLastError();
  EXPECT(after == cudaSuccess, "cudaPeekAtLastError after cudaGetLastError returned %s, want cudaSuccess",
         cudaGetErrorName(after));
  expect_700("cudaDeviceSynchronize (again)", cudaDeviceSynchronize());
  int h = 0;
  expect_700("cudaMemcpy after the fault", cudaMemcpy(&h, good, sizeof h, cudaMemcpyDeviceToHost));
  void *p = NULL;
  expect_700("cudaMalloc after the fault", cudaMalloc(&p, 1024));
  expect_700("cudaGetLastError (again)", cudaGetLastError());
  return t_end();
}
