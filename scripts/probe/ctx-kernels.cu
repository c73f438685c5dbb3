// ctx-kernels.cu - kernels for ctx-probe.c (compiled to PTX on the GPU machine).
#include <cassert>
extern "C" __global__ void good(unsigned *p, unsigned v) { p[threadIdx.x] = v + threadIdx.x; }
extern "C" __global__ void illegal(unsigned *p) { *(volatile unsigned *)(p + (1ull << 40)) = 1; }
extern "C" __global__ void asserting(int x) { assert(x == 0); }
extern "C" __global__ void spin(unsigned long long cycles, unsigned *out)
{
	unsigned long long t0 = clock64();
	while (clock64() - t0 < cycles)
		;
	out[threadIdx.x] = 42;
}
extern "C" __global__ void hello(int x) { printf("hello from the GPU %d\n", x); }
