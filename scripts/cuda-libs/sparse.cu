// sparse.cu: cuSPARSE generic SpMV on a CSR matrix, checked against the CPU.
#include <cusparse.h>

#include "libcheck.h"

int main() {
  lc_begin("cusparse");
  const int n = 1000;  // tridiagonal n x n
  int nnz = 3 * n - 2;
  int *rows = (int *)malloc(sizeof(int) * (n + 1)), *cols = (int *)malloc(sizeof(int) * nnz);
  float *vals = (float *)malloc(sizeof(float) * nnz), *x = (float *)malloc(sizeof(float) * n),
        *y = (float *)malloc(sizeof(float) * n);
  int k = 0;
  for (int i = 0; i < n; i++) {
    rows[i] = k;
    for (int j = i - 1; j <= i + 1; j++)
      if (j >= 0 && j < n) cols[k] = j, vals[k++] = (float)(i + 2 * j % 7) / 8;
  }
  rows[n] = k;
  lc_rand(x, n, 7);
  int *drows, *dcols;
  float *dvals, *dx, *dy;
  CKRT(cudaMalloc(&drows, sizeof(int) * (n + 1)));
  CKRT(cudaMalloc(&dcols, sizeof(int) * nnz));
  CKRT(cudaMalloc(&dvals, sizeof(float) * nnz));
  CKRT(cudaMalloc(&dx, sizeof(float) * n));
  CKRT(cudaMalloc(&dy, sizeof(float) * n));
  CKRT(cudaMemcpy(drows, rows, sizeof(int) * (n + 1), cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(dcols, cols, sizeof(int) * nnz, cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(dvals, vals, sizeof(float) * nnz, cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(dx, x, sizeof(float) * n, cudaMemcpyHostToDevice));
  cusparseHandle_t h;
  CK(cusparseCreate(&h));
  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t X, Y;
  CK(cusparseCreateCsr(&A, n, n, nnz, drows, dcols, dvals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CK(cusparseCreateDnVec(&X, n, dx, CUDA_R_32F));
  CK(cusparseCreateDnVec(&Y, n, dy, CUDA_R_32F));
  float one = 1, zero = 0;
  size_t ws = 0;
  CK(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y, CUDA_R_32F,
                             CUSPARSE_SPMV_ALG_DEFAULT, &ws));
  void *dws = NULL;
  CKRT(cudaMalloc(&dws, ws > 0 ? ws : 1));
  CK(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y, CUDA_R_32F,
                  CUSPARSE_SPMV_ALG_DEFAULT, dws));
  CKRT(cudaMemcpy(y, dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int p = rows[i]; p < rows[i + 1]; p++) s += (double)vals[p] * x[cols[p]];
    lc_close("spmv", i, y[i], s, 1e-4);
  }
  CK(cusparseDestroySpMat(A));
  CK(cusparseDestroyDnVec(X));
  CK(cusparseDestroyDnVec(Y));
  CK(cusparseDestroy(h));
  return lc_end();
}
