// solver.cu: cuSOLVER dense LU (getrf/getrs) solves A x = b; the residual is checked.
#include <cusolverDn.h>

#include "libcheck.h"

int main() {
  lc_begin("cusolver");
  const int n = 64;
  double *a = (double *)malloc(sizeof(double) * n * n), *b = (double *)malloc(sizeof(double) * n),
         *x = (double *)malloc(sizeof(double) * n);
  float *r = (float *)malloc(sizeof(float) * (n * n + n));
  lc_rand(r, n * n + n, 5);
  for (int i = 0; i < n * n; i++) a[i] = r[i];
  for (int i = 0; i < n; i++) a[i + i * n] += n;  // diagonally dominant: well conditioned
  for (int i = 0; i < n; i++) b[i] = r[n * n + i];
  double *da, *db;
  int *ipiv, *info;
  CKRT(cudaMalloc(&da, sizeof(double) * n * n));
  CKRT(cudaMalloc(&db, sizeof(double) * n));
  CKRT(cudaMalloc(&ipiv, sizeof(int) * n));
  CKRT(cudaMalloc(&info, sizeof(int)));
  CKRT(cudaMemcpy(da, a, sizeof(double) * n * n, cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(db, b, sizeof(double) * n, cudaMemcpyHostToDevice));
  cusolverDnHandle_t h;
  CK(cusolverDnCreate(&h));
  int lwork = 0;
  CK(cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork));
  double *work;
  CKRT(cudaMalloc(&work, sizeof(double) * (lwork > 0 ? lwork : 1)));
  CK(cusolverDnDgetrf(h, n, n, da, n, work, ipiv, info));
  CK(cusolverDnDgetrs(h, CUBLAS_OP_N, n, 1, da, n, ipiv, db, n, info));
  int hinfo = -1;
  CKRT(cudaMemcpy(&hinfo, info, sizeof(int), cudaMemcpyDeviceToHost));
  if (lc_kernels_run() && hinfo != 0) lc_die("getrf/getrs info %d", hinfo);
  CKRT(cudaMemcpy(x, db, sizeof(double) * n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int k = 0; k < n; k++) s += a[i + k * n] * x[k];
    lc_close("residual", i, s, b[i], 1e-9);
  }
  CK(cusolverDnDestroy(h));
  return lc_end();
}
