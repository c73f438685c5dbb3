// arrays_textures: CUDA arrays, 2D/3D copies into and out of them, a texture object read
// in a kernel, a surface written by a kernel, and managed memory where the device has it.
//   - cudaMallocArray + cudaMemcpy2DToArray from pitched host memory, back with
//     cudaMemcpy2DFromArray (exact, kernels or not), a sub-box too;
//   - cudaMalloc3DArray + cudaMemcpy3D host -> array -> host (exact);
//   - a texture object over the 2D array (point sampling, unnormalized) read by a kernel;
//   - a texture object over pitched device memory (cudaMallocPitch) read by a kernel;
//   - a surface object over an array made with cudaArraySurfaceLoadStore, written by a
//     kernel and read back with cudaMemcpy2DFromArray;
//   - cudaMallocManaged where cudaDevAttrManagedMemory says the device has managed memory
//     (a kernel increments what the host wrote); where it says not (vgpu), cudaMallocManaged
//     must answer cudaErrorNotSupported.
#include "common.h"
#include <vector>

__global__ void read_tex(cudaTextureObject_t t, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

__global__ void write_surf(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) surf2Dwrite((float)(y * 1000 + x), s, x * (int)sizeof(float), y);
}

__global__ void incr(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static const int W = 37, H = 19;  // odd sizes: partial blocks, rows not a power of two
static const size_t HP = 40 * sizeof(float);  // host pitch, wider than a row

static float val(int x, int y) { return t_randf((unsigned)(y * 4096 + x)); }

static void arrays_2d(cudaArray_t arr) {
  std::vector<float> host(HP / sizeof(float) * H, -1.0f), back(HP / sizeof(float) * H, -2.0f);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) host[y * HP / sizeof(float) + x] = val(x, y);
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, host.data(), HP, W * sizeof(float), H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DFromArray(back.data(), HP, arr, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  for (int y = 0; y < H; y++)
    if (memcmp(&back[y * HP / sizeof(float)], &host[y * HP / sizeof(float)], W * sizeof(float))) {
      t_fail("2D array row %d read back differs", y);
      break;
    }
  // A sub-box: columns 5..12 of rows 3..8, to device memory and back.
  float *d;
  std::vector<float> sub(8 * 6);
  CHECK(cudaMalloc(&d, sub.size() * sizeof(float)));
  CHECK(cudaMemcpy2DFromArray(d, 8 * sizeof(float), arr, 5 * sizeof(float), 3, 8 * sizeof(float), 6,
                              cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(sub.data(), d, sub.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int y = 0; y < 6; y++)
    for (int x = 0; x < 8; x++)
      if (sub[y * 8 + x] != val(5 + x, 3 + y)) {
        t_fail("sub-box (%d, %d) = %g, want %g", x, y, sub[y * 8 + x], val(5 + x, 3 + y));
        y = 6;
        break;
      }
  CHECK(cudaFree(d));
}

static void arrays_3d() {
  const int w = 9, h = 5, dp = 4;
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<int>();
  cudaArray_t a3;
  CHECK(cudaMalloc3DArray(&a3, &cd, make_cudaExtent(w, h, dp)));
  std::vector<int> in(w * h * dp), out(w * h * dp, -1);
  for (size_t i = 0; i < in.size(); i++) in[i] = (int)t_hash((unsigned)i);
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(in.data(), w * sizeof(int), w, h);
  p.dstArray = a3;
  p.extent = make_cudaExtent(w, h, dp);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  cudaMemcpy3DParms q = {};
  q.srcArray = a3;
  q.dstPtr = make_cudaPitchedPtr(out.data(), w * sizeof(int), w, h);
  q.extent = make_cudaExtent(w, h, dp);
  q.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&q));
  EXPECT(in == out, "3D array read back differs");
  cudaExtent ext;
  cudaChannelFormatDesc got;
  unsigned flags;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, a3));
  EXPECT(ext.width == (size_t)w && ext.height == (size_t)h && ext.depth == (size_t)dp && got.x == 32,
         "cudaArrayGetInfo: %zux%zux%zu, %d bits", ext.width, ext.height, ext.depth, got.x);
  CHECK(cudaFreeArray(a3));
}

static void texture_on_array(cudaArray_t arr) {
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tex;
  CHECK(cudaCreateTextureObject(&tex, &rd, &td, NULL));
  cudaResourceDesc back;
  CHECK(cudaGetTextureObjectResourceDesc(&back, tex));
  EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == arr, "texture resource read back");
  float *out;
  CHECK(cudaMalloc(&out, W * H * sizeof(float)));
  CHECK(cudaMemset(out, 0, W * H * sizeof(float)));
  read_tex<<<dim3((W + 15) / 16, (H + 15) / 16), dim3(16, 16)>>>(tex, out, W, H);
  CHECK_LAUNCH();
  std::vector<float> got(W * H);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  if (t_kernels_run("tex2D over a CUDA array"))
    for (int i = 0; i < W * H; i++)
      if (got[i] != val(i % W, i / W)) {
        t_fail("texture (%d, %d) = %g, want %g", i % W, i / W, got[i], val(i % W, i / W));
        break;
      }
  CHECK(cudaDestroyTextureObject(tex));
  CHECK(cudaFree(out));
}

static void texture_on_pitched() {
  float *p;
  size_t pitch;
  CHECK(cudaMallocPitch(&p, &pitch, W * sizeof(float), H));
  std::vector<float> host(W * H);
  for (int i = 0; i < W * H; i++) host[i] = val(i % W, i / W) * 2;
  CHECK(cudaMemcpy2D(p, pitch, host.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypePitch2D;
  rd.res.pitch2D.devPtr = p;
  rd.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  rd.res.pitch2D.width = W;
  rd.res.pitch2D.height = H;
  rd.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  cudaTextureObject_t tex;
  CHECK(cudaCreateTextureObject(&tex, &rd, &td, NULL));
  float *out;
  CHECK(cudaMalloc(&out, W * H * sizeof(float)));
  read_tex<<<dim3((W + 15) / 16, (H + 15) / 16), dim3(16, 16)>>>(tex, out, W, H);
  CHECK_LAUNCH();
  std::vector<float> got(W * H);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  if (t_kernels_run("tex2D over pitched memory"))
    for (int i = 0; i < W * H; i++)
      if (got[i] != host[i]) {
        t_fail("pitched texture (%d, %d) = %g, want %g", i % W, i / W, got[i], host[i]);
        break;
      }
  CHECK(cudaDestroyTextureObject(tex));
  CHECK(cudaFree(out));
  CHECK(cudaFree(p));
}

static void surface_object() {
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &cd, W, H, cudaArraySurfaceLoadStore));
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaSurfaceObject_t s;
  CHECK(cudaCreateSurfaceObject(&s, &rd));
  write_surf<<<dim3((W + 15) / 16, (H + 15) / 16), dim3(16, 16)>>>(s, W, H);
  CHECK_LAUNCH();
  std::vector<float> got(W * H, -1.0f);
  CHECK(cudaMemcpy2DFromArray(got.data(), W * sizeof(float), arr, 0, 0, W * sizeof(float), H,
                              cudaMemcpyDeviceToHost));
  if (t_kernels_run("surf2Dwrite into a CUDA array"))
    for (int i = 0; i < W * H; i++)
      if (got[i] != (float)((i / W) * 1000 + i % W)) {
        t_fail("surface (%d, %d) = %g", i % W, i / W, got[i]);
        break;
      }
  CHECK(cudaDestroySurfaceObject(s));
  CHECK(cudaFreeArray(arr));
}

static void managed() {
  int has = -1;
  CHECK(cudaDeviceGetAttribute(&has, cudaDevAttrManagedMemory, 0));
  int *m = NULL;
  const int n = 1000;
  cudaError_t e = cudaMallocManaged(&m, n * sizeof(int));
  if (!has) {
    printf("device without managed memory: cudaMallocManaged answered %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorNotSupported, "cudaMallocManaged on a device without managed memory: %s, want cudaErrorNotSupported",
           cudaGetErrorName(e));
    cudaGetLastError();
    return;
  }
  CHECK(e);
  for (int i = 0; i < n; i++) m[i] = i * 3;
  incr<<<(n + 255) / 256, 256>>>(m, n);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  if (t_kernels_run("a kernel on managed memory"))
    for (int i = 0; i < n; i++)
      if (m[i] != i * 3 + 1) {
        t_fail("managed[%d] = %d, want %d", i, m[i], i * 3 + 1);
        break;
      }
  CHECK(cudaFree(m));
}

int main() {
  t_begin("arrays_textures");
  t_is_sim_device();
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &cd, W, H));
  arrays_2d(arr);
  arrays_3d();
  texture_on_array(arr);
  texture_on_pitched();
  surface_object();
  managed();
  CHECK(cudaFreeArray(arr));
  CHECK(cudaDeviceSynchronize());
  return t_end();
}
