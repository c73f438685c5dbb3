// nvcc_rdc_main.cu + nvcc_rdc_helper.cu - separate compilation (-rdc=true):
// nvlink's linked fatbin arrives in a version-2 wrapper. The kernel calls a
// device function of the other file; the sim device records the launch.
#include <cstdio>
extern __device__ int helper(int);
__global__ void k(int *p) { p[0] = helper(3); }
int main()
{
	int *p = nullptr;
	if (cudaMalloc(&p, 4) != cudaSuccess)
		return 1;
	k<<<1, 1>>>(p);
	cudaError_t launch = cudaGetLastError();
	cudaError_t sync = cudaDeviceSynchronize();
	printf("rdc launch: %s, sync: %s\n", cudaGetErrorName(launch), cudaGetErrorName(sync));
	cudaFree(p);
	return launch != cudaSuccess || sync != cudaSuccess;
}
