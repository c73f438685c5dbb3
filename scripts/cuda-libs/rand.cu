// rand.cu: cuRAND host API on the device: uniform and normal numbers, their moments,
// and the same sequence twice from the same seed.
#include <curand.h>

#include "libcheck.h"

int main() {
  lc_begin("curand");
  const size_t n = 1 << 20;
  float *d, *h = (float *)malloc(n * sizeof(float)), *h2 = (float *)malloc(n * sizeof(float));
  CKRT(cudaMalloc(&d, n * sizeof(float)));
  curandGenerator_t g;
  CK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CK(curandSetPseudoRandomGeneratorSeed(g, 1234));
  CK(curandGenerateUniform(g, d, n));
  CKRT(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; i++) {
    if (lc_kernels_run() && !(h[i] > 0 && h[i] <= 1)) lc_die("uniform[%zu] = %g outside (0, 1]", i, h[i]);
    s += h[i];
  }
  lc_close("uniform mean", 0, s / n, 0.5, 0.01);
  CK(curandGenerateNormal(g, d, n, 0.0f, 1.0f));
  CKRT(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double m = 0, v = 0;
  for (size_t i = 0; i < n; i++) m += h[i];
  m /= n;
  for (size_t i = 0; i < n; i++) v += (h[i] - m) * (h[i] - m);
  lc_close("normal mean", 0, m, 0, 0.01);
  lc_close("normal var", 0, v / n, 1, 0.02);
  CK(curandSetPseudoRandomGeneratorSeed(g, 1234));
  CK(curandSetGeneratorOffset(g, 0));
  CK(curandGenerateUniform(g, d, n));
  CKRT(cudaMemcpy(h2, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(curandSetPseudoRandomGeneratorSeed(g, 1234));
  CK(curandSetGeneratorOffset(g, 0));
  CK(curandGenerateUniform(g, d, n));
  CKRT(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i += 4099)
    if (lc_kernels_run() && h[i] != h2[i]) lc_die("same seed, different value at %zu", i);
  CK(curandDestroyGenerator(g));
  return lc_end();
}
