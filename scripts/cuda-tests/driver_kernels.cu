// driver_kernels: the module driver_api_module loads, built separately as
// driver_kernels.fatbin (nvcc -fatbin) and driver_kernels.ptx (nvcc -ptx).
extern "C" {

__device__ int module_global = 0;

__global__ void scale_add(float *x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + b + (float)module_global;
}

}
