// nccl.cu: single-GPU NCCL: one communicator of one rank, an all-reduce and a
// broadcast, checked.
#include <nccl.h>

#include "libcheck.h"

int main() {
  lc_begin("nccl");
  const size_t n = 1 << 20;
  float *h = (float *)malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)(i % 1000);
  float *d, *o;
  CKRT(cudaMalloc(&d, n * 4));
  CKRT(cudaMalloc(&o, n * 4));
  CKRT(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  ncclComm_t comm;
  int devs[1] = {0};
  CK(ncclCommInitAll(&comm, 1, devs));
  cudaStream_t s;
  CKRT(cudaStreamCreate(&s));
  CK(ncclAllReduce(d, o, n, ncclFloat, ncclSum, comm, s));
  CK(ncclBroadcast(o, d, n, ncclFloat, 0, comm, s));
  CKRT(cudaStreamSynchronize(s));
  CKRT(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i += 4097) lc_close("allreduce", (int)i, h[i], (double)(i % 1000), 0);
  CK(ncclCommDestroy(comm));
  return lc_end();
}
