// mapped_zero_copy: cudaHostAlloc(cudaHostAllocMapped) + cudaHostGetDevicePointer; a kernel
// writes through the device pointer and the host reads the result with no memcpy. Also a
// cudaHostRegister(cudaHostRegisterMapped) buffer, and copies that use the mapped pointers.
#include "common.h"
#include <stdint.h>

__global__ void write_squares(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i * i;
}

int main() {
  t_begin("mapped_zero_copy");
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  int canmap = 0;
  CHECK(cudaDeviceGetAttribute(&canmap, cudaDevAttrCanMapHostMemory, 0));
  EXPECT(canmap == 1, "cudaDevAttrCanMapHostMemory = %d", canmap);

  const int n = 40009;  // n * n fits in an int
  int *h = NULL, *dp = NULL;
  CHECK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer((void **)&dp, h, 0));
  EXPECT(dp != NULL, "cudaHostGetDevicePointer gave NULL");
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, h));
  EXPECT(flags & cudaHostAllocMapped, "cudaHostGetFlags = %#x lacks cudaHostAllocMapped", flags);
  for (int i = 0; i < n; i++) h[i] = -1;

  // Copies through the mapped device pointer see host writes (no kernel needed).
  int *dbuf, *check = (int *)malloc(n * sizeof(int));
  CHECK(cudaMalloc(&dbuf, n * sizeof(int)));
  for (int i = 0; i < n; i++) h[i] = 3 * i + 1;
  CHECK(cudaMemcpy(dbuf, dp, n * sizeof(int), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(check, dbuf, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(memcmp(check, h, n * sizeof(int)) == 0, "copy from the mapped device pointer did not see host writes");

  // The kernel writes through the mapped pointer; the host reads after a sync, no memcpy.
  for (int i = 0; i < n; i++) h[i] = -1;
  write_squares<<<(n + 255) / 256, 256>>>(dp, n);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  if (t_kernels_run("kernel writes through cudaHostAllocMapped memory")) {
    for (int i = 0; i < n; i++)
      if (h[i] != i * i) { t_fail("h[%d] = %d, want %d", i, h[i], i * i); break; }
  }

  // cudaHostRegister(Mapped) of ordinary page-aligned memory.
  const size_t rbytes = 1 << 20;
  int *r = NULL;
  if (posix_memalign((void **)&r, 4096, rbytes) != 0) t_die("posix_memalign failed");
  CHECK(cudaHostRegister(r, rbytes, cudaHostRegisterMapped));
  int *rdp = NULL;
  CHECK(cudaHostGetDevicePointer((void **)&rdp, r, 0));
  EXPECT(rdp != NULL, "cudaHostGetDevicePointer on registered memory gave NULL");
  const int rn = (int)(rbytes / sizeof(int));
  for (int i = 0; i < rn; i++) r[i] = -1;
  write_squares<<<(rn + 255) / 256, 256>>>(rdp, 1000);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  if (t_kernels_run("kernel writes through cudaHostRegisterMapped memory")) {
    for (int i = 0; i < 1000; i++)
      if (r[i] != i * i) { t_fail("registered r[%d] = %d, want %d", i, r[i], i * i); break; }
    EXPECT(r[1000] == -1, "kernel wrote past n: r[1000] = %d", r[1000]);
  }
  CHECK(cudaHostUnregister(r));
  free(r);

  CHECK(cudaFree(dbuf));
  CHECK(cudaFreeHost(h));
  free(check);
  return t_end();
}
