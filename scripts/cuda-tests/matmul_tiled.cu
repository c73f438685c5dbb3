// matmul_tiled: C = A * B with a shared-memory tiled kernel, sizes that are not tile multiples
// (257x129 * 129x193), float, checked against a double-precision CPU product.
#include "common.h"
#include <math.h>
#include <vector>

#define TILE 16

__global__ void matmul(const float *A, const float *B, float *C, int M, int K, int N) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
    int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

int main() {
  t_begin("matmul_tiled");
  const int M = 257, K = 129, N = 193;
  std::vector<float> A(M * K), B(K * N), C(M * N, 0.0f);
  for (int i = 0; i < M * K; i++) A[i] = t_randf(i);
  for (int i = 0; i < K * N; i++) B[i] = t_randf(i + 1000000);

  float *dA, *dB, *dC;
  CHECK(cudaMalloc(&dA, A.size() * sizeof(float)));
  CHECK(cudaMalloc(&dB, B.size() * sizeof(float)));
  CHECK(cudaMalloc(&dC, C.size() * sizeof(float)));
  CHECK(cudaMemcpy(dA, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice));
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  matmul<<<grid, block>>>(dA, dB, dC, M, K, N);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));

  if (t_kernels_run("C = A * B")) {
    double worst = 0;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          ref += (double)A[i * K + k] * B[k * N + j];
          mag += fabs((double)A[i * K + k] * B[k * N + j]);
        }
        double err = fabs(C[i * N + j] - ref) / (mag + 1e-30);
        if (err > worst) worst = err;
        if (err > 1e-4) {
          t_fail("C[%d][%d] = %.7g, want %.7g (relative error %.2g)", i, j, C[i * N + j], ref, err);
          i = M;
          break;
        }
      }
    printf("worst relative error %.3g\n", worst);
  }
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  return t_end();
}
