// nvcc_prog.cu - a real nvcc program (built -cudart shared and static) run on
// NVIDIA's runtime over vgpu's libcuda.so.1 and the sim backend: it exercises what nvcc generates
// (fatbin/function/variable registration, <<<>>> launch stubs) and checks
// results the sim device can produce (it keeps memory but runs no kernels).
// Compiled against the real CUDA headers, so cudaDeviceProp is read with
// the toolkit's own layout. Exit status: number of failed checks.
#include <cstdio>
#include <cstring>

__device__ int dev_counter[4];
__constant__ float scale_c;

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = (a[i] + b[i]) * scale_c;
}

struct Pair {
	float *p;
	int n;
	double w;
};
__global__ void takes_struct(Pair pr, char flag, short s)
{
	if (pr.n && flag && s)
		pr.p[0] = (float)pr.w;
}

static int fails;
#define CHECK(c)                                                                           \
	do {                                                                               \
		if (!(c)) {                                                                \
			printf("FAIL line %d: %s (last error %s)\n", __LINE__, #c,        \
			       cudaGetErrorName(cudaPeekAtLastError()));                  \
			fails++;                                                           \
		}                                                                          \
	} while (0)

static volatile int host_ran;
static void CUDART_CB on_host(void *p) { host_ran = *(int *)p; }

// --no-graphs skips the CUDA graph checks: NVIDIA's runtime builds them with driver
// calls vgpu's libcuda does not serve yet (cuGraphAddHostNode, memcpy nodes to
// pageable memory; cuGraphExecKernelNodeSetParams answers INVALID_VALUE here).
int main(int argc, char **argv)
{
	const bool graphs = !(argc > 1 && !strcmp(argv[1], "--no-graphs"));
	const int n = 1 << 16;
	float *a, *b, *c;
	CHECK(cudaMalloc(&a, n * 4) == cudaSuccess);
	CHECK(cudaMalloc(&b, n * 4) == cudaSuccess);
	CHECK(cudaMalloc(&c, n * 4) == cudaSuccess);
	float s = 2.0f, s_back = 0;
	CHECK(cudaMemcpyToSymbol(scale_c, &s, sizeof s) == cudaSuccess);
	CHECK(cudaMemcpyFromSymbol(&s_back, scale_c, sizeof s) == cudaSuccess);
	CHECK(s_back == 2.0f);
	int vals[4] = {1, 2, 3, 4}, back[4] = {0};
	CHECK(cudaMemcpyToSymbol(dev_counter, vals, sizeof vals) == cudaSuccess);
	CHECK(cudaMemcpyFromSymbol(back, dev_counter, sizeof back) == cudaSuccess);
	CHECK(!memcmp(vals, back, sizeof vals));
	void *addr = nullptr;
	size_t sz = 0;
	CHECK(cudaGetSymbolAddress(&addr, dev_counter) == cudaSuccess && addr);
	CHECK(cudaGetSymbolSize(&sz, dev_counter) == cudaSuccess && sz == sizeof vals);

	vadd<<<(n + 255) / 256, 256>>>(a, b, c, n);
	CHECK(cudaGetLastError() == cudaSuccess);
	Pair pr = {c, n, 3.0};
	takes_struct<<<1, 1>>>(pr, 1, 7);
	CHECK(cudaGetLastError() == cudaSuccess);
	cudaStream_t st;
	CHECK(cudaStreamCreate(&st) == cudaSuccess);
	vadd<<<4, 128, 0, st>>>(a, b, c, 512);
	int v = 9;
	CHECK(cudaLaunchHostFunc(st, on_host, &v) == cudaSuccess);
	CHECK(cudaStreamSynchronize(st) == cudaSuccess);
	CHECK(host_ran == 9);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);

	if (graphs) {
		// capture a launch into a graph and replay it
		cudaGraph_t g;
		cudaGraphExec_t x;
		CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal) == cudaSuccess);
		vadd<<<1, 32, 0, st>>>(a, b, c, 32);
		cudaMemsetAsync(c, 0, 64, st);
		CHECK(cudaStreamEndCapture(st, &g) == cudaSuccess);
		size_t nn = 0;
		CHECK(cudaGraphGetNodes(g, nullptr, &nn) == cudaSuccess && nn == 2);
		CHECK(cudaGraphInstantiate(&x, g, nullptr, nullptr, 0) == cudaSuccess);
		CHECK(cudaGraphLaunch(x, st) == cudaSuccess);
		CHECK(cudaStreamSynchronize(st) == cudaSuccess);
		cudaGraphExecDestroy(x);
		cudaGraphDestroy(g);

		// an explicit graph: memset, kernel, host function, copy back
		{
			cudaGraph_t eg;
			cudaGraphExec_t ex;
			cudaGraphNode_t nset, nker, nhost, ncpy;
			CHECK(cudaGraphCreate(&eg, 0) == cudaSuccess);
			cudaMemsetParams mp = {};
			mp.dst = c;
			mp.value = 0x3c;
			mp.elementSize = 1;
			mp.width = 256;
			mp.height = 1;
			CHECK(cudaGraphAddMemsetNode(&nset, eg, nullptr, 0, &mp) == cudaSuccess);
			int nn2 = 64;
			void *kargs[] = {&a, &b, &c, &nn2};
			cudaKernelNodeParams kp = {};
			kp.func = (void *)vadd;
			kp.gridDim = dim3(1);
			kp.blockDim = dim3(64);
			kp.kernelParams = kargs;
			CHECK(cudaGraphAddKernelNode(&nker, eg, &nset, 1, &kp) == cudaSuccess);
			int hv = 5;
			cudaHostNodeParams hp = {on_host, &hv};
			CHECK(cudaGraphAddHostNode(&nhost, eg, &nker, 1, &hp) == cudaSuccess);
			unsigned char out[256] = {0};
			CHECK(cudaGraphAddMemcpyNode1D(&ncpy, eg, &nhost, 1, out, c, sizeof out, cudaMemcpyDeviceToHost) ==
			      cudaSuccess);
			size_t cnt = 0;
			CHECK(cudaGraphGetNodes(eg, nullptr, &cnt) == cudaSuccess && cnt == 4);
			CHECK(cudaGraphInstantiate(&ex, eg, nullptr, nullptr, 0) == cudaSuccess);
			host_ran = 0;
			CHECK(cudaGraphLaunch(ex, st) == cudaSuccess);
			CHECK(cudaStreamSynchronize(st) == cudaSuccess);
			CHECK(host_ran == 5);
			CHECK(out[0] == 0x3c && out[255] == 0x3c);
			cudaGraphExecDestroy(ex);
			cudaGraphDestroy(eg);
		}

		// llama.cpp-style reuse: update an instantiated graph from a new capture,
		// then patch one kernel argument through the node's parameters
		{
			cudaGraph_t g1, g2;
			cudaGraphExec_t x1;
			CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
			vadd<<<1, 32, 0, st>>>(a, b, c, 32);
			CHECK(cudaStreamEndCapture(st, &g1) == cudaSuccess);
			CHECK(cudaGraphInstantiate(&x1, g1, nullptr, nullptr, 0) == cudaSuccess);
			CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
			vadd<<<2, 32, 0, st>>>(a, b, c, 64);
			CHECK(cudaStreamEndCapture(st, &g2) == cudaSuccess);
			cudaGraphNode_t err_node;
			cudaGraphExecUpdateResult res;
			CHECK(cudaGraphExecUpdate(x1, g2, &err_node, &res) == cudaSuccess && res == cudaGraphExecUpdateSuccess);
			cudaGraphNode_t node;
			size_t one = 1;
			CHECK(cudaGraphGetNodes(g2, &node, &one) == cudaSuccess && one == 1);
			cudaKernelNodeParams kp;
			CHECK(cudaGraphKernelNodeGetParams(node, &kp) == cudaSuccess);
			CHECK(kp.func == (void *)vadd && kp.gridDim.x == 2 && *(int *)kp.kernelParams[3] == 64);
			*(int *)kp.kernelParams[3] = 16;
			CHECK(cudaGraphExecKernelNodeSetParams(x1, node, &kp) == cudaSuccess);
			CHECK(cudaGraphLaunch(x1, st) == cudaSuccess);
			CHECK(cudaStreamSynchronize(st) == cudaSuccess);
			cudaGraphExecDestroy(x1);
			cudaGraphDestroy(g1);
			cudaGraphDestroy(g2);
		}
	}

	cudaFuncAttributes fa;
	CHECK(cudaFuncGetAttributes(&fa, vadd) == cudaSuccess);
	int blocks = 0;
	CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vadd, 256, 0) == cudaSuccess);

	cudaDeviceProp p;
	memset(&p, 0, sizeof p);
	CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
	int major = -1, sms = -1, l2 = -1;
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
	cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
	CHECK(p.major == major && major > 0);
	CHECK(p.multiProcessorCount == sms);
	CHECK(p.l2CacheSize == l2);
	CHECK(p.warpSize == 32);
	CHECK(p.name[0] != 0);
	printf("device: %s, cc %d.%d, %d SMs, %zu MiB\n", p.name, p.major, p.minor, p.multiProcessorCount,
	       p.totalGlobalMem >> 20);
	cudaStreamDestroy(st);
	CHECK(cudaFree(a) == cudaSuccess);
	cudaFree(b);
	cudaFree(c);

	// after a reset the host has dropped the module: it is loaded again
	CHECK(cudaDeviceReset() == cudaSuccess);
	CHECK(cudaMemcpyToSymbol(dev_counter, vals, sizeof vals) == cudaSuccess);
	CHECK(cudaMemcpyFromSymbol(back, dev_counter, sizeof back) == cudaSuccess);
	CHECK(!memcmp(vals, back, sizeof vals));
	vadd<<<1, 32>>>(a, b, c, 0);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	printf("%d failure(s)\n", fails);
	return fails;
}
