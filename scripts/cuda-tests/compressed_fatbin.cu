// compressed_fatbin: an ordinary program built with -Xfatbin -compress-all, so the embedded
// cubins (not only the PTX) are compressed; the runtime must decompress them to load them.
#include "common.h"

__global__ void reverse(const unsigned *in, unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[n - 1 - i] = in[i] * 2654435761u;
}

__global__ void histogram(const unsigned *in, unsigned *bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[in[i] & 15], 1u);
}

int main() {
  t_begin("compressed_fatbin");
  const int n = 50021;
  unsigned *h = (unsigned *)malloc(n * sizeof(unsigned)), *o = (unsigned *)malloc(n * sizeof(unsigned));
  unsigned bins[16], want_bins[16] = {0};
  for (int i = 0; i < n; i++) { h[i] = t_hash(i); want_bins[h[i] & 15]++; }
  unsigned *din, *dout, *dbins;
  CHECK(cudaMalloc(&din, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&dout, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&dbins, sizeof bins));
  CHECK(cudaMemcpy(din, h, n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dbins, 0, sizeof bins));
  cudaFuncAttributes at;
  CHECK(cudaFuncGetAttributes(&at, (const void *)reverse));  // forces the module to load
  reverse<<<(n + 255) / 256, 256>>>(din, dout, n);
  CHECK_LAUNCH();
  histogram<<<(n + 255) / 256, 256>>>(din, dbins, n);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(o, dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(bins, dbins, sizeof bins, cudaMemcpyDeviceToHost));
  if (t_kernels_run("reverse and histogram results")) {
    for (int i = 0; i < n; i++)
      if (o[n - 1 - i] != h[i] * 2654435761u) { t_fail("out[%d] = %u, want %u", n - 1 - i, o[n - 1 - i], h[i] * 2654435761u); break; }
    for (int b = 0; b < 16; b++) EXPECT(bins[b] == want_bins[b], "bin %d = %u, want %u", b, bins[b], want_bins[b]);
  } else {
    for (int b = 0; b < 16; b++) EXPECT(bins[b] == 0, "bin %d = %u after memset though no kernel ran", b, bins[b]);
  }
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dbins));
  free(h);
  free(o);
  return t_end();
}
