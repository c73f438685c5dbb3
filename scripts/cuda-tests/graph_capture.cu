// graph_capture: stream capture of memset + kernel + memcpy into a graph, instantiate, launch
// twice; then an explicit graph built with cudaGraphAddKernelNode / cudaGraphAddMemcpyNode.
#include "common.h"

// cudaGraphInstantiate has 5 arguments in CUDA 11 and 3 in CUDA 12+.
#if CUDART_VERSION >= 12000
#define GRAPH_INSTANTIATE(exec, graph) cudaGraphInstantiate((exec), (graph), 0)
#else
#define GRAPH_INSTANTIATE(exec, graph) cudaGraphInstantiate((exec), (graph), NULL, NULL, 0)
#endif

__global__ void add_k(int *x, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += k;
}

int main() {
  t_begin("graph_capture");
  const int n = 10007;
  const size_t bytes = n * sizeof(int);
  int *d, *d2, *h;
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMalloc(&d2, bytes));
  CHECK(cudaMallocHost(&h, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // --- captured graph: memset(d, 1 per byte) ; add_k(d, +5) ; memcpy d -> h
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus cs;
  CHECK(cudaStreamIsCapturing(s, &cs));
  EXPECT(cs == cudaStreamCaptureStatusActive, "capture status %d while capturing", (int)cs);
  CHECK(cudaMemsetAsync(d, 0x01, bytes, s));
  add_k<<<(n + 255) / 256, 256, 0, s>>>(d, n, 5);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaStreamIsCapturing(s, &cs));
  EXPECT(cs == cudaStreamCaptureStatusNone, "capture status %d after end", (int)cs);
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, NULL, &nodes));
  EXPECT(nodes == 3, "captured graph has %zu nodes, want 3", nodes);

  cudaGraphExec_t ge;
  CHECK(GRAPH_INSTANTIATE(&ge, g));
  const int base = 0x01010101;
  for (int round = 0; round < 2; round++) {
    memset(h, 0xEE, bytes);
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    // The memset runs again each launch, so each launch gives the same result.
    if (t_kernels_run(round == 0 ? "captured graph, launch 1" : "captured graph, launch 2")) {
      for (int i = 0; i < n; i++)
        if (h[i] != base + 5) { t_fail("launch %d: h[%d] = %#x, want %#x", round + 1, i, h[i], base + 5); break; }
    } else {
      for (int i = 0; i < n; i++)
        if (h[i] != base) { t_fail("launch %d (memset+memcpy only): h[%d] = %#x, want %#x", round + 1, i, h[i], base); break; }
    }
  }

  // --- explicit graph: memcpy h -> d2 ; kernel add_k(d2, +100) ; memcpy d2 -> h
  for (int i = 0; i < n; i++) h[i] = i;
  cudaGraph_t eg;
  CHECK(cudaGraphCreate(&eg, 0));
  cudaGraphNode_t up, kn, down;
  CHECK(cudaGraphAddMemcpyNode1D(&up, eg, NULL, 0, d2, h, bytes, cudaMemcpyHostToDevice));
  int nn = n, k = 100;
  void *args[] = {&d2, &nn, &k};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)add_k;
  kp.gridDim = dim3((n + 127) / 128);
  kp.blockDim = dim3(128);
  kp.sharedMemBytes = 0;
  kp.kernelParams = args;
  kp.extra = NULL;
  CHECK(cudaGraphAddKernelNode(&kn, eg, &up, 1, &kp));
  CHECK(cudaGraphAddMemcpyNode1D(&down, eg, &kn, 1, h, d2, bytes, cudaMemcpyDeviceToHost));
  cudaGraphExec_t ege;
  CHECK(GRAPH_INSTANTIATE(&ege, eg));
  CHECK(cudaGraphLaunch(ege, s));
  CHECK(cudaStreamSynchronize(s));
  if (t_kernels_run("explicit graph kernel node")) {
    for (int i = 0; i < n; i++)
      if (h[i] != i + 100) { t_fail("explicit graph: h[%d] = %d, want %d", i, h[i], i + 100); break; }
  } else {
    for (int i = 0; i < n; i++)
      if (h[i] != i) { t_fail("explicit graph (copies only): h[%d] = %d, want %d", i, h[i], i); break; }
  }

  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphExecDestroy(ege));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaGraphDestroy(eg));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(h));
  return t_end();
}
