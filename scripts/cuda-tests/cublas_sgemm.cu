// cublas_sgemm: NVIDIA's cuBLAS (which carries its own static CUDA runtime) on whatever
// libcuda.so.1 is found: cublasCreate, cublasSgemm on a stream, cublasDestroy, every status
// checked; the product is compared with a CPU one where kernels run. On vgpu's sim device the
// kernels are validated, not executed: there the output buffer must come back as it was set.
#include "common.h"
#include <cublas_v2.h>
#include <vector>

#define CHECK_BLAS(call)                                                                   \
  do {                                                                                     \
    cublasStatus_t s_ = (call);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) t_die("%s returned cuBLAS status %d at %s:%d", #call, \
                                           (int)s_, __FILE__, __LINE__);                   \
  } while (0)

int main() {
  t_begin("cublas_sgemm");
  const int m = 96, n = 80, k = 112;  // column-major C(m,n) = A(m,k) * B(k,n)
  std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n, -3.0f), ref((size_t)m * n);
  for (size_t i = 0; i < a.size(); i++) a[i] = t_randf((unsigned)i);
  for (size_t i = 0; i < b.size(); i++) b[i] = t_randf((unsigned)(i + 7919));
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += (double)a[i + (size_t)p * m] * b[p + (size_t)j * k];
      ref[i + (size_t)j * m] = (float)s;
    }

  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
  CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
  CHECK(cudaMalloc(&dc, c.size() * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  cublasHandle_t h;
  CHECK_BLAS(cublasCreate(&h));
  int version = 0;
  CHECK_BLAS(cublasGetVersion(h, &version));
  printf("cuBLAS %d\n", version);
  CHECK_BLAS(cublasSetStream(h, s));
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // no TF32: compare with the CPU
  const float one = 1.0f, zero = 0.0f;
  CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero, dc, m));
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  if (t_kernels_run("C = A * B (cublasSgemm)")) {
    for (size_t i = 0; i < c.size(); i++) {
      float tol = 1e-4f * (fabsf(ref[i]) > 1 ? fabsf(ref[i]) : 1);
      if (!(fabsf(c[i] - ref[i]) <= tol)) {
        t_fail("C[%zu] = %g, want %g", i, c[i], ref[i]);
        break;
      }
    }
  } else {
    for (size_t i = 0; i < c.size(); i++)
      if (c[i] != -3.0f) {
        t_fail("sim: C[%zu] = %g changed, though kernels do not run", i, c[i]);
        break;
      }
  }
  CHECK_BLAS(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return t_end();
}
