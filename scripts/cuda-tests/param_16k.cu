// param_16k: a kernel whose parameter block is a 16 KiB struct passed by value (CUDA 12.1+
// allows 32 KiB of parameters; CUDA 11.8 allows 4 KiB, so there the struct is 4000 bytes).
// The kernel copies every word of the struct to global memory, and adds a second, small
// parameter placed after the struct, so both the size and the layout are checked.
#include "common.h"

#if CUDART_VERSION >= 12010
#define PARAM_BYTES 16384
#else
#define PARAM_BYTES 4000
#endif

struct Big {
  unsigned w[PARAM_BYTES / sizeof(unsigned)];
};
static const int WORDS = PARAM_BYTES / sizeof(unsigned);

__global__ void echo(Big b, unsigned *out, unsigned tag) {
  for (int i = threadIdx.x; i < WORDS; i += blockDim.x) out[i] = b.w[i] ^ tag;
}

int main() {
  t_begin("param_16k");
  printf("parameter block: %d bytes struct + 12 bytes (CUDART_VERSION %d)%s\n", PARAM_BYTES, CUDART_VERSION,
         PARAM_BYTES == 16384 ? "" : " [CUDA < 12.1: 4 KiB parameter limit, 16 KiB variant not built]");
  static Big b;
  for (int i = 0; i < WORDS; i++) b.w[i] = t_hash(i + 1);
  unsigned *d, *h = (unsigned *)malloc(PARAM_BYTES);
  CHECK(cudaMalloc(&d, PARAM_BYTES));
  CHECK(cudaMemset(d, 0, PARAM_BYTES));
  const unsigned tag = 0xC0FFEE11u;
  echo<<<1, 256>>>(b, d, tag);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(h, d, PARAM_BYTES, cudaMemcpyDeviceToHost));

  // cudaLaunchKernel with the same block, through an argument array.
  unsigned *d2;
  CHECK(cudaMalloc(&d2, PARAM_BYTES));
  unsigned tag2 = 0;
  void *args[] = {&b, &d2, &tag2};
  CHECK(cudaLaunchKernel((const void *)echo, dim3(1), dim3(128), args, 0, 0));
  CHECK(cudaDeviceSynchronize());
  unsigned *h2 = (unsigned *)malloc(PARAM_BYTES);
  CHECK(cudaMemcpy(h2, d2, PARAM_BYTES, cudaMemcpyDeviceToHost));

  if (t_kernels_run("kernel echoes the parameter block")) {
    for (int i = 0; i < WORDS; i++)
      if (h[i] != (b.w[i] ^ tag)) { t_fail("<<<>>>: word %d = %#x, want %#x", i, h[i], b.w[i] ^ tag); break; }
    for (int i = 0; i < WORDS; i++)
      if (h2[i] != b.w[i]) { t_fail("cudaLaunchKernel: word %d = %#x, want %#x", i, h2[i], b.w[i]); break; }
  } else {
    for (int i = 0; i < WORDS; i++)
      if (h[i] != 0) { t_fail("memset buffer word %d = %#x though no kernel ran", i, h[i]); break; }
  }
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  free(h);
  free(h2);
  return t_end();
}
