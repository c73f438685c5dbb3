// host_callback: cudaLaunchHostFunc and cudaStreamAddCallback run in stream order:
//   - a host function sees the result of the async D2H copy queued before it;
//   - callbacks run in the order queued (each records a sequence number);
//   - an async H2D copy queued after a callback reads the value the callback wrote to pinned
//     memory (the stream waited for the callback);
//   - cudaStreamSynchronize returns only after all of them ran.
#include "common.h"
#include <atomic>

static std::atomic<int> seq(0);

struct Ctx {
  int order[4];            // sequence number seen by each callback, -1 when not run
  const int *pinned_back;  // D2H destination, checked by the first host function
  const int *pinned_src;
  int n;
  int saw_copy;            // 1 when the first host function saw the D2H result
  int *flag;               // pinned; written by the second callback, copied H2D after it
  cudaError_t status;      // status passed to the stream callback
};

static void CUDART_CB host_fn_first(void *p) {
  Ctx *c = (Ctx *)p;
  c->order[0] = seq++;
  c->saw_copy = memcmp(c->pinned_back, c->pinned_src, c->n * sizeof(int)) == 0;
}

static void CUDART_CB stream_cb_second(cudaStream_t, cudaError_t status, void *p) {
  Ctx *c = (Ctx *)p;
  c->order[1] = seq++;
  c->status = status;
  *c->flag = 0x5EED;
}

static void CUDART_CB host_fn_third(void *p) { ((Ctx *)p)->order[2] = seq++; }
static void CUDART_CB host_fn_fourth(void *p) { ((Ctx *)p)->order[3] = seq++; }

__global__ void bump(int *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

int main() {
  t_begin("host_callback");
  const int n = 4096;
  int *src, *back, *flag, *flag_back, *d, *d_flag;
  CHECK(cudaMallocHost(&src, n * sizeof(int)));
  CHECK(cudaMallocHost(&back, n * sizeof(int)));
  CHECK(cudaMallocHost(&flag, sizeof(int)));
  CHECK(cudaMallocHost(&flag_back, sizeof(int)));
  for (int i = 0; i < n; i++) { src[i] = i * 7; back[i] = -1; }
  *flag = 0;
  *flag_back = 0;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMalloc(&d_flag, sizeof(int)));
  CHECK(cudaMemset(d_flag, 0, sizeof(int)));

  Ctx c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 4; i++) c.order[i] = -1;
  c.pinned_back = back;
  c.pinned_src = src;
  c.n = n;
  c.flag = flag;
  c.status = cudaErrorUnknown;

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyAsync(d, src, n * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(back, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, host_fn_first, &c));
  CHECK(cudaStreamAddCallback(s, stream_cb_second, &c, 0));
  CHECK(cudaMemcpyAsync(d_flag, flag, sizeof(int), cudaMemcpyHostToDevice, s));  // reads the callback's write
  CHECK(cudaMemcpyAsync(flag_back, d_flag, sizeof(int), cudaMemcpyDeviceToHost, s));
  bump<<<(n + 255) / 256, 256, 0, s>>>(d, n);
  CHECK_LAUNCH();
  CHECK(cudaLaunchHostFunc(s, host_fn_third, &c));
  CHECK(cudaMemcpyAsync(back, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, host_fn_fourth, &c));
  CHECK(cudaStreamSynchronize(s));

  for (int i = 0; i < 4; i++) EXPECT(c.order[i] == i, "callback %d ran as number %d, want %d", i + 1, c.order[i], i);
  EXPECT(c.saw_copy == 1, "the host function did not see the D2H copy queued before it");
  EXPECT(c.status == cudaSuccess, "stream callback got status %s", cudaGetErrorName(c.status));
  EXPECT(*flag == 0x5EED, "callback's write to pinned memory missing: %#x", *flag);
  EXPECT(*flag_back == 0x5EED, "H2D copy queued after the callback read %#x, want 0x5eed (stream did not wait)", *flag_back);
  if (t_kernels_run("bump kernel between callbacks")) {
    for (int i = 0; i < n; i++)
      if (back[i] != src[i] + 1) { t_fail("back[%d] = %d, want %d", i, back[i], src[i] + 1); break; }
  }

  // Default (legacy) stream too: a host function after a synchronous copy.
  int before = seq;
  CHECK(cudaLaunchHostFunc(0, host_fn_third, &c));
  CHECK(cudaDeviceSynchronize());
  EXPECT(c.order[2] == before, "host function on stream 0 ran as %d, want %d", c.order[2], before);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d_flag));
  CHECK(cudaFreeHost(src));
  CHECK(cudaFreeHost(back));
  CHECK(cudaFreeHost(flag));
  CHECK(cudaFreeHost(flag_back));
  return t_end();
}
