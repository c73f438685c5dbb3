// gemm.cu: cuBLAS SGEMM and a cuBLASLt matmul (fp32), checked against the CPU.
#include <cublasLt.h>
#include <cublas_v2.h>

#include "libcheck.h"

static void cpu_gemm(int n, const float *a, const float *b, float *c) {
  // column-major, C = A * B
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      double s = 0;
      for (int k = 0; k < n; k++) s += (double)a[i + k * n] * b[k + j * n];
      c[i + j * n] = (float)s;
    }
}

int main() {
  lc_begin("cublas_gemm");
  const int n = 256;
  size_t bytes = sizeof(float) * n * n;
  float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes),
        *ref = (float *)malloc(bytes);
  lc_rand(a, n * n, 1);
  lc_rand(b, n * n, 2);
  cpu_gemm(n, a, b, ref);
  float *da, *db, *dc;
  CKRT(cudaMalloc(&da, bytes));
  CKRT(cudaMalloc(&db, bytes));
  CKRT(cudaMalloc(&dc, bytes));
  CKRT(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));

  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));  // no TF32: compare with the CPU
  float one = 1, zero = 0;
  CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n));
  CKRT(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n * n; i += 97) lc_close("sgemm", i, c[i], ref[i], 1e-4);
  CK(cublasDestroy(h));

  // cuBLASLt: the same product through a matmul descriptor and a workspace.
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lcl;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, n, n, n));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, n, n, n));
  CK(cublasLtMatrixLayoutCreate(&lcl, CUDA_R_32F, n, n, n));
  size_t ws = 4 << 20;
  void *dws;
  CKRT(cudaMalloc(&dws, ws));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lcl, lcl, pref, 1, &heur, &found));
  if (!found) lc_die("cublasLt found no algorithm");
  CKRT(cudaMemset(dc, 0, bytes));
  CK(cublasLtMatmul(lt, op, &one, da, la, db, lb, &zero, dc, lcl, dc, lcl, &heur.algo, dws, ws, 0));
  CKRT(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n * n; i += 89) lc_close("cublasLt", i, c[i], ref[i], 1e-4);
  CK(cublasLtMatmulPreferenceDestroy(pref));
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(lcl));
  CK(cublasLtMatmulDescDestroy(op));
  CK(cublasLtDestroy(lt));
  return lc_end();
}
