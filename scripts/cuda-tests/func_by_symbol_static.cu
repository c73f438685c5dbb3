// func_by_symbol_static: kernels defined in another translation unit, compiled into a static
// library (.a from nvcc -lib) and linked in; looked up with cudaGetFuncBySymbol, inspected with
// cudaFuncGetAttributes, launched with cudaLaunchKernel (no <<<>>> in this file).
#include "common.h"
#include "static_kernels.h"
#include <vector>

int main() {
  t_begin("func_by_symbol_static");
  const void *saxpy = (const void *)lib_saxpy, *iota = (const void *)lib_iota;

  cudaFunction_t f1 = NULL, f1b = NULL, f2 = NULL;
  CHECK(cudaGetFuncBySymbol(&f1, saxpy));
  CHECK(cudaGetFuncBySymbol(&f1b, saxpy));
  CHECK(cudaGetFuncBySymbol(&f2, iota));
  EXPECT(f1 != NULL && f2 != NULL, "cudaGetFuncBySymbol gave NULL (%p, %p)", (void *)f1, (void *)f2);
  EXPECT(f1 == f1b, "cudaGetFuncBySymbol is not stable: %p then %p", (void *)f1, (void *)f1b);
  EXPECT(f1 != f2, "two kernels map to one function %p", (void *)f1);

  cudaFuncAttributes at;
  memset(&at, 0, sizeof at);
  CHECK(cudaFuncGetAttributes(&at, saxpy));
  printf("lib_saxpy: regs %d, static shared %zu, const %zu, local %zu, maxThreads %d, ptx %d, binary %d\n",
         at.numRegs, at.sharedSizeBytes, at.constSizeBytes, at.localSizeBytes, at.maxThreadsPerBlock,
         at.ptxVersion, at.binaryVersion);
  // The static shared size comes from the compiled kernel; the sim device reports defaults.
  bool exact_attrs = t_kernels_run("static shared sizes from cudaFuncGetAttributes (sim reports defaults)");
  if (exact_attrs)
    EXPECT(at.sharedSizeBytes == 256 * sizeof(float), "lib_saxpy sharedSizeBytes = %zu, want %zu",
           at.sharedSizeBytes, 256 * sizeof(float));
  EXPECT(at.maxThreadsPerBlock >= 256, "lib_saxpy maxThreadsPerBlock = %d", at.maxThreadsPerBlock);
  EXPECT(at.binaryVersion >= 30, "lib_saxpy binaryVersion = %d", at.binaryVersion);
  cudaFuncAttributes at2;
  memset(&at2, 0, sizeof at2);
  CHECK(cudaFuncGetAttributes(&at2, iota));
  if (exact_attrs) EXPECT(at2.sharedSizeBytes == 0, "lib_iota sharedSizeBytes = %zu, want 0", at2.sharedSizeBytes);

  const int n = 100003;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; i++) { x[i] = t_randf(i); y[i] = t_randf(i + 7 * n); }
  float *dx, *dy;
  int *di;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMalloc(&di, n * sizeof(int)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));

  float a = 2.5f;
  int nn = n, base = 1000;
  void *args1[] = {&a, &dx, &dy, &nn};
  CHECK(cudaLaunchKernel(saxpy, dim3((n + 255) / 256), dim3(256), args1, 0, 0));
  void *args2[] = {&di, &base, &nn};
  CHECK(cudaLaunchKernel(iota, dim3((n + 127) / 128), dim3(128), args2, 0, 0));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<int> io(n);
  CHECK(cudaMemcpy(io.data(), di, n * sizeof(int), cudaMemcpyDeviceToHost));

  if (t_kernels_run("lib_saxpy and lib_iota results")) {
    for (int i = 0; i < n; i++) {
      float want = a * x[i] + y[i];
      if (fabsf(out[i] - want) > 1e-6f * (fabsf(want) + 1.0f)) { t_fail("y[%d] = %g, want %g", i, out[i], want); break; }
    }
    for (int i = 0; i < n; i++)
      if (io[i] != base + i) { t_fail("iota[%d] = %d, want %d", i, io[i], base + i); break; }
  } else {
    EXPECT(memcmp(out.data(), y.data(), n * sizeof(float)) == 0, "y changed though no kernel ran");
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(di));
  return t_end();
}
