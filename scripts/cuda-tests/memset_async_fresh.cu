// memset_async_fresh: cudaMemsetAsync on a freshly cudaMalloc'd allocation (its first use),
// both on the legacy default stream and on a created stream, then copy back and check.
#include "common.h"
#include <vector>

int main() {
  t_begin("memset_async_fresh");
  const size_t n = (1 << 20) + 13;  // bytes, odd on purpose
  unsigned char *d = NULL, *d2 = NULL;
  std::vector<unsigned char> h(n, 0);

  // 1: the fresh allocation's very first operation is an async memset on stream 0.
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemsetAsync(d, 0xA5, n, 0));
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    if (h[i] != 0xA5) { t_fail("default stream: byte %zu = 0x%02x, want 0xa5", i, h[i]); break; }

  // 2: a part of the buffer, on a created stream, synchronised with cudaStreamSynchronize.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMemsetAsync(d2, 0x00, n, s));
  CHECK(cudaMemsetAsync(d2 + 100, 0x3C, 1000, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(h.data(), d2, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    unsigned char want = (i >= 100 && i < 1100) ? 0x3C : 0x00;
    if (h[i] != want) { t_fail("stream: byte %zu = 0x%02x, want 0x%02x", i, h[i], want); break; }
  }

  // 3: the synchronous memset on a fresh allocation too.
  int *d3 = NULL;
  int h3[64];
  CHECK(cudaMalloc(&d3, sizeof h3));
  CHECK(cudaMemset(d3, 0xFF, sizeof h3));
  CHECK(cudaMemcpy(h3, d3, sizeof h3, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 64; i++) EXPECT(h3[i] == -1, "cudaMemset: int %d = %d, want -1", i, h3[i]);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFree(d3));
  return t_end();
}
