// vector_add: c = a + b over several MiB of floats with odd sizes (partial last block),
// plus a device-to-device copy checked exactly.
#include "common.h"
#include <vector>

__global__ void vadd(const float *a, const float *b, float *c, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static void run(size_t n) {
  std::vector<float> a(n), b(n), c(n, -7.0f), a2(n);
  for (size_t i = 0; i < n; i++) { a[i] = t_randf((unsigned)i); b[i] = t_randf((unsigned)(i + n)); }
  float *da, *db, *dc, *dd;
  size_t bytes = n * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMalloc(&dd, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  int threads = 256;
  unsigned blocks = (unsigned)((n + threads - 1) / threads);
  vadd<<<blocks, threads>>>(da, db, dc, n);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));

  // D2D copy and back: exact, whether or not kernels run.
  CHECK(cudaMemcpy(dd, da, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(a2.data(), dd, bytes, cudaMemcpyDeviceToHost));
  EXPECT(memcmp(a.data(), a2.data(), bytes) == 0, "n=%zu: H2D -> D2D -> D2H changed the data", n);

  char what[64];
  snprintf(what, sizeof what, "c = a + b (n=%zu)", n);
  if (t_kernels_run(what)) {
    for (size_t i = 0; i < n; i++)
      if (c[i] != a[i] + b[i]) {
        t_fail("n=%zu: c[%zu] = %g, want %g", n, i, c[i], a[i] + b[i]);
        break;
      }
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  CHECK(cudaFree(dd));
}

int main() {
  t_begin("vector_add");
  run(1);
  run(1000003);            // ~3.8 MiB per vector, not a multiple of the block size
  run((5u << 20) / 4 + 7); // ~5 MiB per vector
  return t_end();
}
