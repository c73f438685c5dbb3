// memcpy_to_symbol: cudaMemcpyToSymbol / cudaMemcpyFromSymbol on a __device__ variable and a
// __constant__ array (with offsets), cudaGetSymbolAddress / cudaGetSymbolSize, and a kernel
// that reads both.
#include "common.h"

__device__ int dev_scalar;
__device__ float dev_array[100];
__constant__ float const_coeffs[64];

__global__ void use_symbols(float *out) {
  int i = threadIdx.x;
  out[i] = const_coeffs[i] * 2.0f + dev_scalar + dev_array[i];
}

int main() {
  t_begin("memcpy_to_symbol");
  // __device__ scalar round trip.
  int v = 12345, back = 0;
  CHECK(cudaMemcpyToSymbol(dev_scalar, &v, sizeof v));
  CHECK(cudaMemcpyFromSymbol(&back, dev_scalar, sizeof back));
  EXPECT(back == v, "dev_scalar read back %d, want %d", back, v);

  // __constant__ array, whole and at an offset.
  float c[64], cb[64];
  for (int i = 0; i < 64; i++) c[i] = i * 0.25f;
  CHECK(cudaMemcpyToSymbol(const_coeffs, c, sizeof c));
  float patch[4] = {-1, -2, -3, -4};
  CHECK(cudaMemcpyToSymbol(const_coeffs, patch, sizeof patch, 10 * sizeof(float), cudaMemcpyHostToDevice));
  for (int i = 0; i < 4; i++) c[10 + i] = patch[i];
  CHECK(cudaMemcpyFromSymbol(cb, const_coeffs, sizeof cb));
  EXPECT(memcmp(c, cb, sizeof c) == 0, "const_coeffs did not round-trip");
  float part[3];
  CHECK(cudaMemcpyFromSymbol(part, const_coeffs, sizeof part, 11 * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(part[0] == -2 && part[1] == -3 && part[2] == -4, "FromSymbol at an offset read %g %g %g", part[0], part[1], part[2]);

  // Symbol address and size; the address is an ordinary device pointer.
  float *arr = NULL;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress((void **)&arr, dev_array));
  CHECK(cudaGetSymbolSize(&size, dev_array));
  EXPECT(arr != NULL, "cudaGetSymbolAddress(dev_array) gave NULL");
  EXPECT(size == sizeof(float) * 100, "cudaGetSymbolSize(dev_array) = %zu, want %zu", size, sizeof(float) * 100);
  float a[100], ab[100];
  for (int i = 0; i < 100; i++) a[i] = 1000.0f + i;
  CHECK(cudaMemcpy(arr, a, sizeof a, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyFromSymbol(ab, dev_array, sizeof ab));
  EXPECT(memcmp(a, ab, sizeof a) == 0, "cudaMemcpy to the symbol address not seen by cudaMemcpyFromSymbol");
  // The other direction: ToSymbol, then read through the address.
  for (int i = 0; i < 100; i++) a[i] = -(float)i;
  CHECK(cudaMemcpyToSymbol(dev_array, a, sizeof a));
  CHECK(cudaMemcpy(ab, arr, sizeof ab, cudaMemcpyDeviceToHost));
  EXPECT(memcmp(a, ab, sizeof a) == 0, "cudaMemcpyToSymbol not seen through cudaGetSymbolAddress");
  int *sc = NULL;
  CHECK(cudaGetSymbolAddress((void **)&sc, dev_scalar));
  int sb = 0;
  CHECK(cudaMemcpy(&sb, sc, sizeof sb, cudaMemcpyDeviceToHost));
  EXPECT(sb == v, "dev_scalar through its address = %d, want %d", sb, v);

  // Device-to-device into a symbol.
  int *tmp;
  int w = 777;
  CHECK(cudaMalloc(&tmp, sizeof(int)));
  CHECK(cudaMemcpy(tmp, &w, sizeof w, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol(dev_scalar, tmp, sizeof(int), 0, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpyFromSymbol(&back, dev_scalar, sizeof back));
  EXPECT(back == w, "D2D ToSymbol: dev_scalar = %d, want %d", back, w);

  // A kernel reads all three symbols.
  float *d_out, out[64];
  CHECK(cudaMalloc(&d_out, sizeof out));
  use_symbols<<<1, 64>>>(d_out);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
  if (t_kernels_run("kernel reading __constant__ and __device__ symbols")) {
    for (int i = 0; i < 64; i++) {
      float want = c[i] * 2.0f + w + a[i];
      EXPECT(out[i] == want, "out[%d] = %g, want %g", i, out[i], want);
      if (out[i] != want) break;
    }
  }
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(tmp));
  return t_end();
}
