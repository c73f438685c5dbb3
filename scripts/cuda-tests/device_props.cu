// device_props: cudaGetDeviceCount, cudaGetDeviceProperties sanity, cudaDeviceGetAttribute
// agreement with the properties, cudaMemGetInfo, driver/runtime versions, invalid-device errors.
#include "common.h"

int main() {
  t_begin("device_props");
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= 1, "cudaGetDeviceCount = %d", count);
  CHECK(cudaSetDevice(0));
  int cur = -1;
  CHECK(cudaGetDevice(&cur));
  EXPECT(cur == 0, "cudaGetDevice = %d after cudaSetDevice(0)", cur);

  cudaDeviceProp p;
  memset(&p, 0, sizeof p);
  CHECK(cudaGetDeviceProperties(&p, 0));
  printf("name \"%s\", sm_%d%d, %d SMs, %.1f GiB, warp %d, maxThreadsPerBlock %d, smem/block %zu, L2 %d, pci %04x:%02x:%02x\n",
         p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.warpSize,
         p.maxThreadsPerBlock, p.sharedMemPerBlock, p.l2CacheSize, p.pciDomainID, p.pciBusID, p.pciDeviceID);
  EXPECT(p.name[0] != 0, "empty device name");
  EXPECT(strnlen(p.name, sizeof p.name) < sizeof p.name, "device name not NUL-terminated");
  EXPECT(p.totalGlobalMem > 0, "totalGlobalMem = 0");
  EXPECT(p.major >= 3, "major = %d", p.major);
  EXPECT(p.warpSize == 32, "warpSize = %d", p.warpSize);
  EXPECT(p.maxThreadsPerBlock >= 512, "maxThreadsPerBlock = %d", p.maxThreadsPerBlock);
  EXPECT(p.multiProcessorCount > 0, "multiProcessorCount = %d", p.multiProcessorCount);
  EXPECT(p.maxThreadsDim[0] >= 512 && p.maxGridSize[0] >= 65535, "maxThreadsDim[0] %d, maxGridSize[0] %d",
         p.maxThreadsDim[0], p.maxGridSize[0]);
  EXPECT(p.sharedMemPerBlock >= 16384, "sharedMemPerBlock = %zu", p.sharedMemPerBlock);
  EXPECT(p.totalConstMem >= 65536, "totalConstMem = %zu", p.totalConstMem);

  struct { cudaDeviceAttr attr; const char *name; long long want; } rows[] = {
      {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor", p.major},
      {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor", p.minor},
      {cudaDevAttrWarpSize, "WarpSize", p.warpSize},
      {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock", p.maxThreadsPerBlock},
      {cudaDevAttrMultiProcessorCount, "MultiProcessorCount", p.multiProcessorCount},
      {cudaDevAttrMaxBlockDimX, "MaxBlockDimX", p.maxThreadsDim[0]},
      {cudaDevAttrMaxGridDimX, "MaxGridDimX", p.maxGridSize[0]},
      {cudaDevAttrMaxGridDimY, "MaxGridDimY", p.maxGridSize[1]},
      {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock", (long long)p.sharedMemPerBlock},
      {cudaDevAttrTotalConstantMemory, "TotalConstantMemory", (long long)p.totalConstMem},
      {cudaDevAttrL2CacheSize, "L2CacheSize", p.l2CacheSize},
      {cudaDevAttrMaxRegistersPerBlock, "MaxRegistersPerBlock", p.regsPerBlock},
      {cudaDevAttrPciBusId, "PciBusId", p.pciBusID},
      {cudaDevAttrPciDeviceId, "PciDeviceId", p.pciDeviceID},
      {cudaDevAttrUnifiedAddressing, "UnifiedAddressing", p.unifiedAddressing},
      {cudaDevAttrMaxThreadsPerMultiProcessor, "MaxThreadsPerMultiProcessor", p.maxThreadsPerMultiProcessor},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int v = -12345;
    CHECK(cudaDeviceGetAttribute(&v, rows[i].attr, 0));
    EXPECT(v == rows[i].want, "cudaDeviceGetAttribute(%s) = %d, properties say %lld", rows[i].name, v, rows[i].want);
  }

  size_t freeb = 0, total = 0;
  CHECK(cudaMemGetInfo(&freeb, &total));
  printf("cudaMemGetInfo: free %zu, total %zu\n", freeb, total);
  EXPECT(total > 0 && freeb > 0 && freeb <= total, "cudaMemGetInfo free %zu total %zu", freeb, total);
  EXPECT(total <= p.totalGlobalMem && total >= p.totalGlobalMem / 10 * 9,
         "cudaMemGetInfo total %zu disagrees with totalGlobalMem %zu", total, p.totalGlobalMem);
  // An allocation is visible in the free figure (allow other users of the device to move it).
  void *big;
  const size_t chunk = 256u << 20;
  if (freeb > 2 * chunk) {
    CHECK(cudaMalloc(&big, chunk));
    size_t free2 = 0, total2 = 0;
    CHECK(cudaMemGetInfo(&free2, &total2));
    EXPECT(total2 == total, "total changed: %zu -> %zu", total, total2);
    EXPECT(free2 < freeb, "free did not drop after a 256 MiB cudaMalloc: %zu -> %zu", freeb, free2);
    CHECK(cudaFree(big));
  }

  int drv = 0, rt = 0;
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  printf("driver version %d, runtime version %d, built with CUDART_VERSION %d\n", drv, rt, CUDART_VERSION);
  EXPECT(drv > 0 && rt > 0, "versions: driver %d, runtime %d", drv, rt);
  EXPECT(rt / 1000 == CUDART_VERSION / 1000, "runtime major %d differs from the build's %d", rt / 1000,
         CUDART_VERSION / 1000);
  EXPECT(drv / 1000 >= rt / 1000, "driver %d older than runtime %d", drv, rt);

  // Invalid device numbers are refused, and the error is not sticky.
  cudaDeviceProp q;
  cudaError_t e = cudaGetDeviceProperties(&q, count);
  EXPECT(e == cudaErrorInvalidDevice, "cudaGetDeviceProperties(count) returned %s", cudaGetErrorName(e));
  int v;
  e = cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, -1);
  EXPECT(e == cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device -1) returned %s", cudaGetErrorName(e));
  EXPECT(cudaGetLastError() == cudaErrorInvalidDevice, "last error is not cudaErrorInvalidDevice");
  EXPECT(cudaGetLastError() == cudaSuccess, "cudaErrorInvalidDevice stuck after cudaGetLastError");
  CHECK(cudaDeviceSynchronize());
  return t_end();
}
