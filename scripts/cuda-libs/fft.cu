// fft.cu: cuFFT 1D complex transform forward and inverse, checked against a CPU DFT.
#include <cufft.h>

#include "libcheck.h"

int main() {
  lc_begin("cufft");
  const int n = 1024;
  cufftComplex *x = (cufftComplex *)malloc(sizeof(cufftComplex) * n);
  cufftComplex *y = (cufftComplex *)malloc(sizeof(cufftComplex) * n);
  float *r = (float *)malloc(sizeof(float) * 2 * n);
  lc_rand(r, 2 * n, 3);
  for (int i = 0; i < n; i++) x[i].x = r[2 * i], x[i].y = r[2 * i + 1];
  cufftComplex *d;
  CKRT(cudaMalloc(&d, sizeof(cufftComplex) * n));
  CKRT(cudaMemcpy(d, x, sizeof(cufftComplex) * n, cudaMemcpyHostToDevice));
  cufftHandle plan;
  CK(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  CK(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
  CKRT(cudaMemcpy(y, d, sizeof(cufftComplex) * n, cudaMemcpyDeviceToHost));
  for (int k = 0; k < n; k += 101) {  // a few bins of the DFT
    double re = 0, im = 0;
    for (int t = 0; t < n; t++) {
      double a = -2 * M_PI * (double)k * t / n;
      re += x[t].x * cos(a) - x[t].y * sin(a);
      im += x[t].x * sin(a) + x[t].y * cos(a);
    }
    lc_close("fft.re", k, y[k].x, re, 1e-3);
    lc_close("fft.im", k, y[k].y, im, 1e-3);
  }
  CK(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
  CKRT(cudaMemcpy(y, d, sizeof(cufftComplex) * n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i += 37) lc_close("roundtrip", i, y[i].x / n, x[i].x, 1e-4);
  CK(cufftDestroy(plan));
  return lc_end();
}
