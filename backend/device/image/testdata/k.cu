struct S { double a; int b; char c[7]; };
__device__ int counter;
__constant__ float coef[16];
__device__ float table[100] = {1, 2, 3};
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) y[i] = a*x[i] + y[i] + coef[0] + table[i%100]; }
extern "C" __global__ void withstruct(char a, S s, short b, double *out) { out[0] = s.a + a + b + s.b + s.c[3]; counter++; }
__global__ void noargs() {}
template<typename T> __global__ void tmpl(T *p, T v) { *p = v; }
template __global__ void tmpl<double>(double*, double);
