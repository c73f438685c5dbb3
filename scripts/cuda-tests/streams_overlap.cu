// streams_overlap: 4 streams, each with its own chunk: async H2D from cudaMallocHost pinned
// memory, a kernel, async D2H, all queued before any synchronisation so they may overlap.
// A second buffer is only copied H2D -> D2D -> D2H on the same streams (exact without kernels).
#include "common.h"

__global__ void scale_add(const int *in, int *out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3 + k;
}

int main() {
  t_begin("streams_overlap");
  const int S = 4, chunk = (1 << 18) + 5;  // ints per stream
  const size_t n = (size_t)S * chunk, bytes = n * sizeof(int);
  int *h_in, *h_out, *h_copy;
  CHECK(cudaMallocHost(&h_in, bytes));
  CHECK(cudaMallocHost(&h_out, bytes));
  CHECK(cudaMallocHost(&h_copy, bytes));
  for (size_t i = 0; i < n; i++) { h_in[i] = (int)(t_hash((unsigned)i) & 0xFFFFF); h_out[i] = -1; h_copy[i] = -1; }

  int *d_in, *d_out, *d_copy;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  CHECK(cudaMalloc(&d_copy, bytes));
  cudaStream_t st[S];
  for (int s = 0; s < S; s++) CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));

  for (int s = 0; s < S; s++) {
    size_t off = (size_t)s * chunk, cb = chunk * sizeof(int);
    CHECK(cudaMemcpyAsync(d_in + off, h_in + off, cb, cudaMemcpyHostToDevice, st[s]));
    scale_add<<<(chunk + 255) / 256, 256, 0, st[s]>>>(d_in + off, d_out + off, chunk, s);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(d_copy + off, d_in + off, cb, cudaMemcpyDeviceToDevice, st[s]));
    CHECK(cudaMemcpyAsync(h_out + off, d_out + off, cb, cudaMemcpyDeviceToHost, st[s]));
    CHECK(cudaMemcpyAsync(h_copy + off, d_copy + off, cb, cudaMemcpyDeviceToHost, st[s]));
  }
  // Stream 0 is synchronised by itself, the rest through the device.
  CHECK(cudaStreamSynchronize(st[0]));
  CHECK(cudaDeviceSynchronize());
  for (int s = 0; s < S; s++) EXPECT(cudaStreamQuery(st[s]) == cudaSuccess, "stream %d not idle after sync", s);

  EXPECT(memcmp(h_copy, h_in, bytes) == 0, "H2D -> D2D -> D2H on the streams changed the data");
  if (t_kernels_run("out = in * 3 + stream")) {
    for (size_t i = 0; i < n; i++) {
      int want = h_in[i] * 3 + (int)(i / chunk);
      if (h_out[i] != want) { t_fail("out[%zu] = %d, want %d", i, h_out[i], want); break; }
    }
  }
  for (int s = 0; s < S; s++) CHECK(cudaStreamDestroy(st[s]));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_copy));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  CHECK(cudaFreeHost(h_copy));
  return t_end();
}
