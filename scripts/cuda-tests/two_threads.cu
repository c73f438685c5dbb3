// two_threads: two host threads share the device; each owns a stream and repeatedly does
// async H2D from pinned memory, a kernel, async D2H, and a stream sync; both results are checked.
#include "common.h"
#include <thread>

__global__ void affine(const int *in, int *out, int n, int mul, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul + add;
}

struct Work {
  int id;
  int n;
  int rounds;
  bool kernels;      // whether kernel results can be checked (false on the sim device)
  char error[256];   // first problem seen by this thread, empty when none
};

static void record(Work *w, const char *what, cudaError_t e) {
  if (w->error[0] == 0)
    snprintf(w->error, sizeof w->error, "thread %d: %s: %s", w->id, what, cudaGetErrorName(e));
}
#define TCHECK(w, call)                               \
  do {                                                \
    cudaError_t e_ = (call);                          \
    if (e_ != cudaSuccess) { record(w, #call, e_); return; } \
  } while (0)

static void worker(Work *w) {
  const int n = w->n;
  const size_t bytes = n * sizeof(int);
  cudaStream_t s;
  int *h_in, *h_out, *h_copy, *d_in, *d_out;
  TCHECK(w, cudaSetDevice(0));
  TCHECK(w, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TCHECK(w, cudaMallocHost(&h_in, bytes));
  TCHECK(w, cudaMallocHost(&h_out, bytes));
  TCHECK(w, cudaMallocHost(&h_copy, bytes));
  TCHECK(w, cudaMalloc(&d_in, bytes));
  TCHECK(w, cudaMalloc(&d_out, bytes));
  for (int r = 0; r < w->rounds && w->error[0] == 0; r++) {
    for (int i = 0; i < n; i++) h_in[i] = (int)(t_hash(i + 7919u * r + 104729u * w->id) & 0xFFFF);
    int mul = w->id + 2, add = r;
    TCHECK(w, cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s));
    affine<<<(n + 255) / 256, 256, 0, s>>>(d_in, d_out, n, mul, add);
    TCHECK(w, cudaGetLastError());
    TCHECK(w, cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s));
    TCHECK(w, cudaMemcpyAsync(h_copy, d_in, bytes, cudaMemcpyDeviceToHost, s));
    TCHECK(w, cudaStreamSynchronize(s));
    if (memcmp(h_copy, h_in, bytes) != 0)
      snprintf(w->error, sizeof w->error, "thread %d round %d: H2D/D2H round trip changed the data", w->id, r);
    if (w->kernels)
      for (int i = 0; i < n; i++)
        if (h_out[i] != h_in[i] * mul + add) {
          snprintf(w->error, sizeof w->error, "thread %d round %d: out[%d] = %d, want %d", w->id, r, i, h_out[i],
                   h_in[i] * mul + add);
          break;
        }
  }
  TCHECK(w, cudaStreamDestroy(s));
  TCHECK(w, cudaFree(d_in));
  TCHECK(w, cudaFree(d_out));
  TCHECK(w, cudaFreeHost(h_in));
  TCHECK(w, cudaFreeHost(h_out));
  TCHECK(w, cudaFreeHost(h_copy));
}

int main() {
  t_begin("two_threads");
  bool kernels = t_kernels_run("affine kernel results in both threads");
  Work w[2];
  memset(w, 0, sizeof w);
  for (int i = 0; i < 2; i++) {
    w[i].id = i;
    w[i].n = 300007 + i * 1000;
    w[i].rounds = 20;
    w[i].kernels = kernels;
  }
  std::thread t0(worker, &w[0]), t1(worker, &w[1]);
  t0.join();
  t1.join();
  for (int i = 0; i < 2; i++) EXPECT(w[i].error[0] == 0, "%s", w[i].error);
  CHECK(cudaDeviceSynchronize());
  return t_end();
}
