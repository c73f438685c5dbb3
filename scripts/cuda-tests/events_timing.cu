// events_timing: cudaEventRecord / Synchronize / Query / ElapsedTime semantics, and
// cudaEventDisableTiming events (usable for sync, refused by cudaEventElapsedTime).
#include "common.h"
#include <unistd.h>

__global__ void spin(unsigned long long cycles) {
  unsigned long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

int main() {
  t_begin("events_timing");
  cudaEvent_t a, b, never, nt;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventCreate(&never));
  CHECK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));

  // An event that was never recorded is complete.
  EXPECT(cudaEventQuery(never) == cudaSuccess, "query of a never-recorded event is not cudaSuccess");

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int *d;
  CHECK(cudaMalloc(&d, 1 << 20));
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaMemsetAsync(d, 0, 1 << 20, s));
  spin<<<1, 1, 0, s>>>(200ull * 1000 * 1000);  // ~0.1 s on a GPU: the query below sees it pending
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventRecord(nt, s));

  cudaError_t q = cudaEventQuery(b);
  EXPECT(q == cudaSuccess || q == cudaErrorNotReady, "query while pending returned %s", cudaGetErrorName(q));
  if (!t_is_sim_device())
    EXPECT(q == cudaErrorNotReady, "query right after a long kernel returned %s, want cudaErrorNotReady",
           cudaGetErrorName(q));
  // NotReady is not sticky; clear it in case the runtime recorded it as the last error.
  cudaGetLastError();

  CHECK(cudaEventSynchronize(b));
  EXPECT(cudaEventQuery(a) == cudaSuccess, "event a not complete after b synchronised");
  EXPECT(cudaEventQuery(b) == cudaSuccess, "event b not complete after cudaEventSynchronize");
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0.0f, "elapsed time %f ms < 0", ms);
  printf("elapsed a->b: %.3f ms\n", ms);
  if (!t_is_sim_device()) EXPECT(ms > 1.0f, "elapsed %f ms across a ~100 ms spin kernel", ms);

  // Same event twice: 0 elapsed.
  float zero = -1;
  CHECK(cudaEventElapsedTime(&zero, b, b));
  EXPECT(zero == 0.0f, "elapsed(b, b) = %f, want 0", zero);

  // The DisableTiming event synchronises but cannot time.
  CHECK(cudaEventSynchronize(nt));
  EXPECT(cudaEventQuery(nt) == cudaSuccess, "DisableTiming event not complete after sync");
  float bad = 0;
  cudaError_t e = cudaEventElapsedTime(&bad, a, nt);
  EXPECT(e == cudaErrorInvalidResourceHandle, "elapsed time with a DisableTiming event returned %s, want cudaErrorInvalidResourceHandle",
         cudaGetErrorName(e));
  cudaGetLastError();  // that error is not sticky; clear it

  // Stream waits on an event recorded in another stream.
  cudaStream_t s2;
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaStreamWaitEvent(s2, a, 0));
  CHECK(cudaEventRecord(b, s2));
  CHECK(cudaEventSynchronize(b));
  EXPECT(cudaEventQuery(a) == cudaSuccess, "a not complete after s2 waited on it");

  // Elapsed time across the default stream and a host sleep is at least the sleep (minus slack).
  CHECK(cudaEventRecord(a, 0));
  CHECK(cudaEventSynchronize(a));
  usleep(20000);
  CHECK(cudaEventRecord(b, 0));
  CHECK(cudaEventSynchronize(b));
  CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0.0f, "elapsed time %f ms < 0 (default stream)", ms);
  if (!t_is_sim_device()) EXPECT(ms > 10.0f, "elapsed %f ms across a 20 ms host sleep", ms);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(d));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaEventDestroy(never));
  CHECK(cudaEventDestroy(nt));
  return t_end();
}
