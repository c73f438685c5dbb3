// driver_kernels.cu - kernels a driver-API program loads from a file
// (nvcc -fatbin / -cubin / -ptx); see driver_prog.c.
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
extern "C" __device__ float table[256];
__device__ float table[256];
