// add1_doubles: the classic seed example: a kernel adds 1 to each of 32 doubles.
#include "common.h"

__global__ void add1(double *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0;
}

int main() {
  t_begin("add1_doubles");
  const int n = 32;
  double h[n], out[n];
  for (int i = 0; i < n; i++) h[i] = i * 0.5;

  double *d = NULL;
  CHECK(cudaMalloc(&d, n * sizeof(double)));
  CHECK(cudaMemcpy(d, h, n * sizeof(double), cudaMemcpyHostToDevice));
  add1<<<1, n>>>(d, n);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));

  if (t_kernels_run("x[i] == h[i] + 1")) {
    for (int i = 0; i < n; i++)
      EXPECT(out[i] == h[i] + 1.0, "x[%d] = %g, want %g", i, out[i], h[i] + 1.0);
  } else {
    // No kernel ran: the copy must have come back unchanged.
    EXPECT(memcmp(out, h, sizeof h) == 0, "H2D/D2H round trip changed the data");
  }
  return t_end();
}
