// driver_api_module: the CUDA driver API alone: cuInit, cuDeviceGet, the primary context,
// cuModuleLoad of a .fatbin file and of a .ptx file (both built from driver_kernels.cu and
// installed next to this binary), cuModuleLoadData of the fatbin image, cuModuleGetFunction,
// cuModuleGetGlobal, cuMemAlloc, cuMemcpyHtoD, cuLaunchKernel, cuMemcpyDtoH.
#include <cuda.h>
#include "common.h"
#include <limits.h>
#include <unistd.h>
#include <string>
#include <vector>

static void cu_check(CUresult r, const char *call, const char *file, int line) {
  if (r == CUDA_SUCCESS) return;
  const char *name = "?", *str = "?";
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &str);
  printf("CUDA driver error: %s at %s:%d: %s (%d): %s\n", call, file, line, name, (int)r, str);
  t_die("%s returned %s (%d) at %s:%d", call, name, (int)r, file, line);
}
#define CU_CHECK(call) cu_check((call), #call, __FILE__, __LINE__)

static std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (len <= 0) t_die("readlink /proc/self/exe failed");
  buf[len] = 0;
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

static std::vector<char> read_file(const std::string &path) {
  std::vector<char> data;
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) t_die("cannot open %s", path.c_str());
  char chunk[65536];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) data.insert(data.end(), chunk, chunk + k);
  fclose(f);
  return data;
}

// run_module checks one loaded module: its global, its kernel, copies around them.
static void run_module(CUmodule mod, const char *what, int n) {
  CUfunction fn;
  CU_CHECK(cuModuleGetFunction(&fn, mod, "scale_add"));
  CUfunction missing;
  CUresult r = cuModuleGetFunction(&missing, mod, "no_such_kernel");
  EXPECT(r == CUDA_ERROR_NOT_FOUND, "%s: cuModuleGetFunction(no_such_kernel) = %d, want CUDA_ERROR_NOT_FOUND", what, (int)r);
  int maxthreads = 0;
  CU_CHECK(cuFuncGetAttribute(&maxthreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
  EXPECT(maxthreads >= 256, "%s: CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = %d", what, maxthreads);

  CUdeviceptr g;
  size_t gsize = 0;
  CU_CHECK(cuModuleGetGlobal(&g, &gsize, mod, "module_global"));
  EXPECT(gsize == sizeof(int), "%s: module_global size %zu", what, gsize);
  int gval = 3, gback = 0;
  CU_CHECK(cuMemcpyHtoD(g, &gval, sizeof gval));
  CU_CHECK(cuMemcpyDtoH(&gback, g, sizeof gback));
  EXPECT(gback == gval, "%s: module_global read back %d", what, gback);

  std::vector<float> h(n), out(n);
  for (int i = 0; i < n; i++) h[i] = t_randf(i);
  CUdeviceptr d;
  CU_CHECK(cuMemAlloc(&d, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(d, h.data(), n * sizeof(float)));
  float a = 2.0f, b = 0.5f;
  void *params[] = {&d, &a, &b, &n};
  CU_CHECK(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(out.data(), d, n * sizeof(float)));
  char label[96];
  snprintf(label, sizeof label, "scale_add from %s", what);
  if (t_kernels_run(label)) {
    for (int i = 0; i < n; i++) {
      float want = a * h[i] + b + (float)gval;
      if (out[i] != want) { t_fail("%s: x[%d] = %g, want %g", what, i, out[i], want); break; }
    }
  } else {
    EXPECT(memcmp(out.data(), h.data(), n * sizeof(float)) == 0, "%s: HtoD/DtoH round trip changed the data", what);
  }
  CU_CHECK(cuMemFree(d));
}

int main() {
  t_begin("driver_api_module");
  CU_CHECK(cuInit(0));
  int version = 0, count = 0;
  CU_CHECK(cuDriverGetVersion(&version));
  CU_CHECK(cuDeviceGetCount(&count));
  EXPECT(count >= 1, "cuDeviceGetCount = %d", count);
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  char name[256] = {0};
  CU_CHECK(cuDeviceGetName(name, sizeof name, dev));
  t_sim = strstr(name, "vgpu-sim") != NULL;  // the driver-API way to ask common.h's question
  printf("driver %d, device 0: %s%s\n", version, name, t_sim ? " [sim: kernel results not checked]" : "");

  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));

  std::string dir = exe_dir();
  std::string fatbin = dir + "/driver_kernels.fatbin", ptx = dir + "/driver_kernels.ptx";
  CUmodule m1, m2, m3;
  CU_CHECK(cuModuleLoad(&m1, fatbin.c_str()));
  run_module(m1, "cuModuleLoad(.fatbin)", 100003);
  CU_CHECK(cuModuleLoad(&m2, ptx.c_str()));
  run_module(m2, "cuModuleLoad(.ptx)", 4097);
  std::vector<char> image = read_file(fatbin);
  CU_CHECK(cuModuleLoadData(&m3, image.data()));
  run_module(m3, "cuModuleLoadData(fatbin image)", 33);

  CU_CHECK(cuModuleUnload(m1));
  CU_CHECK(cuModuleUnload(m2));
  CU_CHECK(cuModuleUnload(m3));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  return t_end();
}
