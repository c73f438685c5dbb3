// library_kernels.cu - kernels library_test.c loads as a library
// (cuLibraryLoadData / cuLibraryLoadFromFile of an nvcc -fatbin image).
extern "C" __device__ float bias[4];
__device__ float bias[4];

extern "C" __global__ void scale(float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= a;
}

extern "C" __global__ void add_bias(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] += bias[i % 4];
}
