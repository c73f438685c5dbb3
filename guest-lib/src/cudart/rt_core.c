/*
 * rt_core.c - runtime state and the device, error and version calls.
 * Everything here is answered locally from the device info the core
 * fetched once, except synchronize/reset/limits/memory info.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* ---------------- state ---------------- */

static __thread int cur_dev;
static __thread int cur_dev_set;
static __thread cudaError_t last_err;
static int sticky_err;
static unsigned dev_flags[64];

/* Errors after which the context is unusable (CUDA: "sticky"). A
 * cooperative launch too large (720) is not one: it is refused before it
 * runs (backend/device.Sticky says the same of the driver's codes). */
static int is_sticky(cudaError_t e)
{
	switch (e) {
	case 700: case 702: case 714: case 715: case 716: case 717: case 718: case 719:
		return 1;
	default:
		return 0;
	}
}

cudaError_t rt_err(cudaError_t e)
{
	if (e) {
		last_err = e;
		if (is_sticky(e))
			__atomic_store_n(&sticky_err, e, __ATOMIC_RELAXED);
	}
	return e;
}

cudaError_t rt_init(void)
{
	int s = __atomic_load_n(&sticky_err, __ATOMIC_RELAXED);
	if (s)
		return s;
	int rc = vgpu_init();
	if (rc)
		return rc == VGPU_E_NO_DEVICE ? cudaErrorNoDevice : rc == 46 ? cudaErrorDevicesUnavailable : rc;
	int n;
	rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (n == 0)
		return cudaErrorNoDevice;
	if (!cur_dev_set) {
		/* like CUDA: a context made current with the driver API is adopted */
		int d;
		cur_dev_set = 1;
		if (vgpu_ctx_device(&d) == 0) {
			cur_dev = d;
		} else {
			cur_dev = 0;
			vgpu_ctx_use_primary(0);
		}
	}
	return cudaSuccess;
}

int rt_device(void) { return cur_dev; }

/* ---------------- errors ---------------- */

static const struct {
	int code;
	const char *name;
} rt_errs[] = {
#define X(n, v) {v, #n},
#include "cudart_errors.inc"
#undef X
};

VGPU_EXPORT const char *cudaGetErrorName(cudaError_t e)
{
	VGPU_API();
	for (size_t i = 0; i < sizeof rt_errs / sizeof rt_errs[0]; i++)
		if (rt_errs[i].code == e)
			return rt_errs[i].name;
	return "cudaErrorUnknown";
}

/* "cudaErrorInvalidValue" -> "invalid value" (built once per code). */
VGPU_EXPORT const char *cudaGetErrorString(cudaError_t e)
{
	VGPU_API();
	static char strs[sizeof rt_errs / sizeof rt_errs[0]][80];
	for (size_t i = 0; i < sizeof rt_errs / sizeof rt_errs[0]; i++) {
		if (rt_errs[i].code != e)
			continue;
		if (!__atomic_load_n(&strs[i][0], __ATOMIC_ACQUIRE)) {
			const char *n = rt_errs[i].name;
			char tmp[80];
			size_t j = 0;
			if (e == 0) {
				snprintf(tmp, sizeof tmp, "no error");
			} else {
				n += strncmp(n, "cudaError", 9) ? 0 : 9;
				for (size_t k = 0; n[k] && j < sizeof tmp - 2; k++) {
					char c = n[k];
					if (c >= 'A' && c <= 'Z') {
						if (k > 0 && !(n[k - 1] >= 'A' && n[k - 1] <= 'Z'))
							tmp[j++] = ' ';
						c = (char)(c + 32);
					}
					tmp[j++] = c;
				}
				tmp[j] = 0;
			}
			memcpy(strs[i] + 1, tmp + 1, sizeof tmp - 1);
			__atomic_store_n(&strs[i][0], tmp[0], __ATOMIC_RELEASE);
		}
		return strs[i];
	}
	return "unrecognized error code";
}

RT_API cudaGetLastError(void)
{
	VGPU_API();
	/* Like the real runtime (seen on the H100, CUDA 13.0): reading the
	 * last error clears it even when the context stays broken; the next
	 * call that needs the context fails again and sets it again. */
	cudaError_t e = last_err;
	last_err = cudaSuccess;
	return e;
}

RT_API cudaPeekAtLastError(void)
{
	VGPU_API();
	return last_err;
}

/* ---------------- versions ---------------- */

RT_API cudaDriverGetVersion(int *v)
{
	VGPU_API();
	if (!v)
		RT_RETURN(cudaErrorInvalidValue);
	return cuDriverGetVersion(v);
}

RT_API cudaRuntimeGetVersion(int *v)
{
	VGPU_API();
	if (!v)
		RT_RETURN(cudaErrorInvalidValue);
#if VGPU_CUDART_ABI == 11
	*v = 11080;
#elif VGPU_CUDART_ABI == 12
	*v = 12080;
#else
	*v = 13000;
#endif
	return cudaSuccess;
}

/* ---------------- devices ---------------- */

RT_API cudaGetDeviceCount(int *n)
{
	VGPU_API();
	if (!n)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e) {
		*n = 0;
		RT_RETURN(e);
	}
	RT_RETURN(vgpu_device_count(n));
}

RT_API cudaSetDevice(int d)
{
	VGPU_API();
	int n;
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_device_count(&n);
	if (e)
		RT_RETURN(e);
	if (d < 0 || d >= n)
		RT_RETURN(cudaErrorInvalidDevice);
	cur_dev = d;
	cur_dev_set = 1;
	vgpu_ctx_use_primary(d);
	return cudaSuccess;
}

RT_API cudaInitDevice(int d, unsigned dflags, unsigned flags)
{
	VGPU_API();
	(void)dflags;
	(void)flags;
	return cudaSetDevice(d);
}

RT_API cudaGetDevice(int *d)
{
	VGPU_API();
	if (!d)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	*d = cur_dev;
	return cudaSuccess;
}

RT_API cudaSetValidDevices(int *list, int n)
{
	VGPU_API();
	if (n > 0 && list)
		return cudaSetDevice(list[0]);
	return cudaSuccess;
}

RT_API cudaChooseDevice(int *d, const void *prop)
{
	VGPU_API();
	(void)prop;
	if (!d)
		RT_RETURN(cudaErrorInvalidValue);
	*d = 0;
	RT_RETURN(rt_init());
}

RT_API cudaSetDeviceFlags(unsigned flags)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	dev_flags[cur_dev & 63] = flags;
	return cudaSuccess;
}

RT_API cudaGetDeviceFlags(unsigned *flags)
{
	VGPU_API();
	if (!flags)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	*flags = dev_flags[cur_dev & 63];
	return cudaSuccess;
}

RT_API cudaDeviceGetAttribute(int *v, int attr, int d)
{
	VGPU_API();
	if (!v)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_device_attr(d, attr, v);
	RT_RETURN(e);
}

RT_API cudaDeviceSynchronize(void)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_device_sync(cur_dev);
	RT_RETURN(e);
}
RT_API cudaThreadSynchronize(void) { return cudaDeviceSynchronize(); }

RT_API cudaDeviceReset(void)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	vgpu_flush();
	struct vgpu_device_req req = {.device = (uint32_t)cur_dev};
	e = vgpu_call(VGPU_OP_DEVICE_RESET, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (!e) {
		/* the host released everything of this device in the session */
		vgpu_devmap_forget(cur_dev);
		rt_forget_device(cur_dev);
		vgpu_library_forget(cur_dev); /* driver-API libraries of the same process */
	}
	__atomic_store_n(&sticky_err, 0, __ATOMIC_RELAXED);
	last_err = 0;
	RT_RETURN(e);
}
RT_API cudaThreadExit(void) { return cudaDeviceReset(); }

RT_API cudaDeviceSetLimit(int limit, size_t value)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	struct vgpu_limit_req req = {.device = (uint32_t)cur_dev, .limit = (uint32_t)limit, .value = value};
	RT_RETURN(vgpu_call(VGPU_OP_DEVICE_SET_LIMIT, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL));
}
RT_API cudaThreadSetLimit(int limit, size_t value) { return cudaDeviceSetLimit(limit, value); }

RT_API cudaDeviceGetLimit(size_t *value, int limit)
{
	VGPU_API();
	if (!value)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	struct vgpu_limit_req req = {.device = (uint32_t)cur_dev, .limit = (uint32_t)limit};
	struct vgpu_limit_reply r;
	e = vgpu_call(VGPU_OP_DEVICE_GET_LIMIT, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!e)
		*value = r.value;
	RT_RETURN(e);
}
RT_API cudaThreadGetLimit(size_t *value, int limit) { return cudaDeviceGetLimit(value, limit); }

RT_API cudaDeviceGetCacheConfig(int *c)
{
	VGPU_API();
	if (c)
		*c = 0;
	return cudaSuccess;
}
RT_API cudaThreadGetCacheConfig(int *c) { return cudaDeviceGetCacheConfig(c); }

RT_API cudaDeviceSetCacheConfig(int c)
{
	VGPU_API();
	(void)c;
	return cudaSuccess;
}
RT_API cudaThreadSetCacheConfig(int c) { return cudaDeviceSetCacheConfig(c); }

RT_API cudaDeviceGetSharedMemConfig(int *c)
{
	VGPU_API();
	if (c)
		*c = 1; /* cudaSharedMemBankSizeFourByte */
	return cudaSuccess;
}

RT_API cudaDeviceSetSharedMemConfig(int c)
{
	VGPU_API();
	(void)c;
	return cudaSuccess;
}

RT_API cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
	VGPU_API();
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return cudaSuccess;
}

RT_API cudaDeviceGetPCIBusId(char *id, int len, int d)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (!e)
		e = cuDeviceGetPCIBusId(id, len, d);
	RT_RETURN(e);
}

RT_API cudaDeviceGetByPCIBusId(int *d, const char *id)
{
	VGPU_API();
	if (!d || !id)
		RT_RETURN(cudaErrorInvalidValue);
	int n;
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_device_count(&n);
	if (e)
		RT_RETURN(e);
	for (int i = 0; i < n; i++) {
		char b[32];
		if (!cuDeviceGetPCIBusId(b, sizeof b, i) && !strcasecmp(b + (strlen(b) > strlen(id) ? strlen(b) - strlen(id) : 0), id)) {
			*d = i;
			return cudaSuccess;
		}
	}
	RT_RETURN(cudaErrorInvalidDevice);
}

RT_API cudaDeviceCanAccessPeer(int *can, int a, int b)
{
	VGPU_API();
	(void)a;
	(void)b;
	if (!can)
		RT_RETURN(cudaErrorInvalidValue);
	*can = 0;
	RT_RETURN(rt_init());
}

RT_API cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
	VGPU_API();
	(void)peer;
	(void)flags;
	RT_RETURN(cudaErrorNotSupported);
}

RT_API cudaDeviceDisablePeerAccess(int peer)
{
	VGPU_API();
	(void)peer;
	RT_RETURN(cudaErrorNotSupported);
}

RT_API cudaDeviceFlushGPUDirectRDMAWrites(int target, int scope)
{
	VGPU_API();
	(void)target;
	(void)scope;
	return cudaSuccess;
}

RT_API cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	VGPU_API();
	uint64_t f, t;
	cudaError_t e = rt_init();
	if (!e)
		e = vgpu_mem_get_info(cur_dev, &f, &t);
	if (!e) {
		if (free_b)
			*free_b = f;
		if (total_b)
			*total_b = t;
	}
	RT_RETURN(e);
}

/* ---------------- properties ---------------- */

#define A(i) (di->attrs[(i)])

static void fill_common11(struct rt_prop11 *p, const struct vgpu_device_info *di)
{
	memcpy(p->name, di->name, sizeof p->name);
	p->name[sizeof p->name - 1] = 0;
	memcpy(p->uuid.bytes, di->uuid, 16);
	memcpy(p->luid, di->luid, 8);
	p->luidDeviceNodeMask = di->luid_node_mask;
	p->totalGlobalMem = di->total_mem;
	p->sharedMemPerBlock = (size_t)A(8);
	p->regsPerBlock = A(12);
	p->warpSize = A(10);
	p->memPitch = (size_t)A(11);
	p->maxThreadsPerBlock = A(1);
	for (int i = 0; i < 3; i++) {
		p->maxThreadsDim[i] = A(2 + i);
		p->maxGridSize[i] = A(5 + i);
	}
	p->clockRate = A(13);
	p->totalConstMem = (size_t)A(9);
	p->major = A(75);
	p->minor = A(76);
	p->textureAlignment = (size_t)A(14);
	p->texturePitchAlignment = (size_t)A(51);
	p->deviceOverlap = A(15);
	p->multiProcessorCount = A(16);
	p->kernelExecTimeoutEnabled = A(17);
	p->integrated = A(18);
	p->canMapHostMemory = A(19);
	p->computeMode = A(20);
	p->maxTexture1D = A(21);
	p->maxTexture1DMipmap = A(77);
	p->maxTexture1DLinear = A(69);
	p->maxTexture2D[0] = A(22);
	p->maxTexture2D[1] = A(23);
	p->maxTexture2DMipmap[0] = A(73);
	p->maxTexture2DMipmap[1] = A(74);
	p->maxTexture2DLinear[0] = A(70);
	p->maxTexture2DLinear[1] = A(71);
	p->maxTexture2DLinear[2] = A(72);
	p->maxTexture2DGather[0] = A(45);
	p->maxTexture2DGather[1] = A(46);
	p->maxTexture3D[0] = A(24);
	p->maxTexture3D[1] = A(25);
	p->maxTexture3D[2] = A(26);
	p->maxTexture3DAlt[0] = A(47);
	p->maxTexture3DAlt[1] = A(48);
	p->maxTexture3DAlt[2] = A(49);
	p->maxTextureCubemap = A(52);
	p->maxTexture1DLayered[0] = A(42);
	p->maxTexture1DLayered[1] = A(43);
	p->maxTexture2DLayered[0] = A(27);
	p->maxTexture2DLayered[1] = A(28);
	p->maxTexture2DLayered[2] = A(29);
	p->maxTextureCubemapLayered[0] = A(53);
	p->maxTextureCubemapLayered[1] = A(54);
	p->maxSurface1D = A(55);
	p->maxSurface2D[0] = A(56);
	p->maxSurface2D[1] = A(57);
	p->maxSurface3D[0] = A(58);
	p->maxSurface3D[1] = A(59);
	p->maxSurface3D[2] = A(60);
	p->maxSurface1DLayered[0] = A(61);
	p->maxSurface1DLayered[1] = A(62);
	p->maxSurface2DLayered[0] = A(63);
	p->maxSurface2DLayered[1] = A(64);
	p->maxSurface2DLayered[2] = A(65);
	p->maxSurfaceCubemap = A(66);
	p->maxSurfaceCubemapLayered[0] = A(67);
	p->maxSurfaceCubemapLayered[1] = A(68);
	p->surfaceAlignment = (size_t)A(30);
	p->concurrentKernels = A(31);
	p->ECCEnabled = A(32);
	p->pciBusID = A(33);
	p->pciDeviceID = A(34);
	p->pciDomainID = A(50);
	p->tccDriver = A(35);
	p->asyncEngineCount = A(40);
	p->unifiedAddressing = A(41);
	p->memoryClockRate = A(36);
	p->memoryBusWidth = A(37);
	p->l2CacheSize = A(38);
	p->persistingL2CacheMaxSize = A(108);
	p->maxThreadsPerMultiProcessor = A(39);
	p->streamPrioritiesSupported = A(78);
	p->globalL1CacheSupported = A(79);
	p->localL1CacheSupported = A(80);
	p->sharedMemPerMultiprocessor = (size_t)A(81);
	p->regsPerMultiprocessor = A(82);
	p->managedMemory = A(83);
	p->isMultiGpuBoard = A(84);
	p->multiGpuBoardGroupID = A(85);
	p->hostNativeAtomicSupported = A(86);
	p->singleToDoublePrecisionPerfRatio = A(87);
	p->pageableMemoryAccess = A(88);
	p->concurrentManagedAccess = A(89);
	p->computePreemptionSupported = A(90);
	p->canUseHostPointerForRegisteredMem = A(91);
	p->cooperativeLaunch = A(95);
	p->cooperativeMultiDeviceLaunch = A(96);
	p->sharedMemPerBlockOptin = (size_t)A(97);
	p->pageableMemoryAccessUsesHostPageTables = A(100);
	p->directManagedMemAccessFromHost = A(101);
	p->maxBlocksPerMultiProcessor = A(106);
	p->accessPolicyMaxWindowSize = A(109);
	p->reservedSharedMemPerBlock = (size_t)A(111);
}

cudaError_t rt_fill_prop(void *dst, int abi, int dev)
{
	const struct vgpu_device_info *di;
	cudaError_t e = vgpu_device_info(dev, &di);
	if (e)
		return e;
	struct rt_prop12 p12;
	memset(&p12, 0, sizeof p12);
	fill_common11(&p12.b, di);
	p12.hostRegisterSupported = A(99);
	p12.sparseCudaArraySupported = A(112);
	p12.hostRegisterReadOnlySupported = A(113);
	p12.timelineSemaphoreInteropSupported = A(114);
	p12.memoryPoolsSupported = A(115);
	p12.gpuDirectRDMASupported = A(116);
	p12.gpuDirectRDMAFlushWritesOptions = (unsigned)A(117);
	p12.gpuDirectRDMAWritesOrdering = A(118);
	p12.memoryPoolSupportedHandleTypes = (unsigned)A(119);
	p12.deferredMappingCudaArraySupported = A(121);
	p12.ipcEventSupported = A(125);
	p12.clusterLaunch = A(120);
	p12.unifiedFunctionPointers = A(129);
	if (abi == 11) {
		memcpy(dst, &p12.b, RT_PROP11_BYTES);
		return 0;
	}
	if (abi == 12) {
		memcpy(dst, &p12, RT_PROP12_BYTES);
		return 0;
	}
	struct rt_prop13 p;
	const struct rt_prop11 *b = &p12.b;
	memset(&p, 0, sizeof p);
	memcpy(p.name, b->name, sizeof p.name);
	p.uuid = b->uuid;
	memcpy(p.luid, b->luid, 8);
	p.luidDeviceNodeMask = b->luidDeviceNodeMask;
	p.totalGlobalMem = b->totalGlobalMem;
	p.sharedMemPerBlock = b->sharedMemPerBlock;
	p.regsPerBlock = b->regsPerBlock;
	p.warpSize = b->warpSize;
	p.memPitch = b->memPitch;
	p.maxThreadsPerBlock = b->maxThreadsPerBlock;
	memcpy(p.maxThreadsDim, b->maxThreadsDim, sizeof p.maxThreadsDim);
	memcpy(p.maxGridSize, b->maxGridSize, sizeof p.maxGridSize);
	p.totalConstMem = b->totalConstMem;
	p.major = b->major;
	p.minor = b->minor;
	p.textureAlignment = b->textureAlignment;
	p.texturePitchAlignment = b->texturePitchAlignment;
	p.multiProcessorCount = b->multiProcessorCount;
	p.integrated = b->integrated;
	p.canMapHostMemory = b->canMapHostMemory;
	p.maxTexture1D = b->maxTexture1D;
	p.maxTexture1DMipmap = b->maxTexture1DMipmap;
	/* maxTexture2D .. maxSurfaceCubemapLayered: same order and types */
	memcpy(p.maxTexture2D, b->maxTexture2D,
	       offsetof(struct rt_prop11, surfaceAlignment) - offsetof(struct rt_prop11, maxTexture2D));
	p.surfaceAlignment = b->surfaceAlignment;
	p.concurrentKernels = b->concurrentKernels;
	p.ECCEnabled = b->ECCEnabled;
	p.pciBusID = b->pciBusID;
	p.pciDeviceID = b->pciDeviceID;
	p.pciDomainID = b->pciDomainID;
	p.tccDriver = b->tccDriver;
	p.asyncEngineCount = b->asyncEngineCount;
	p.unifiedAddressing = b->unifiedAddressing;
	p.memoryBusWidth = b->memoryBusWidth;
	p.l2CacheSize = b->l2CacheSize;
	p.persistingL2CacheMaxSize = b->persistingL2CacheMaxSize;
	p.maxThreadsPerMultiProcessor = b->maxThreadsPerMultiProcessor;
	p.streamPrioritiesSupported = b->streamPrioritiesSupported;
	p.globalL1CacheSupported = b->globalL1CacheSupported;
	p.localL1CacheSupported = b->localL1CacheSupported;
	p.sharedMemPerMultiprocessor = b->sharedMemPerMultiprocessor;
	p.regsPerMultiprocessor = b->regsPerMultiprocessor;
	p.managedMemory = b->managedMemory;
	p.isMultiGpuBoard = b->isMultiGpuBoard;
	p.multiGpuBoardGroupID = b->multiGpuBoardGroupID;
	p.hostNativeAtomicSupported = b->hostNativeAtomicSupported;
	p.pageableMemoryAccess = b->pageableMemoryAccess;
	p.concurrentManagedAccess = b->concurrentManagedAccess;
	p.computePreemptionSupported = b->computePreemptionSupported;
	p.canUseHostPointerForRegisteredMem = b->canUseHostPointerForRegisteredMem;
	p.cooperativeLaunch = b->cooperativeLaunch;
	p.sharedMemPerBlockOptin = b->sharedMemPerBlockOptin;
	p.pageableMemoryAccessUsesHostPageTables = b->pageableMemoryAccessUsesHostPageTables;
	p.directManagedMemAccessFromHost = b->directManagedMemAccessFromHost;
	p.maxBlocksPerMultiProcessor = b->maxBlocksPerMultiProcessor;
	p.accessPolicyMaxWindowSize = b->accessPolicyMaxWindowSize;
	p.reservedSharedMemPerBlock = b->reservedSharedMemPerBlock;
	/* the 12.0 block: same order */
	memcpy(&p.hostRegisterSupported, &p12.hostRegisterSupported,
	       offsetof(struct rt_prop12, reserved) - offsetof(struct rt_prop12, hostRegisterSupported));
	p.deviceNumaConfig = A(130);
	p.deviceNumaId = A(131);
	p.mpsEnabled = A(133);
	p.hostNumaId = A(134);
	p.gpuPciDeviceID = (unsigned)A(139);
	p.gpuPciSubsystemID = (unsigned)A(140);
	p.hostNumaMultinodeIpcSupported = A(143);
	memcpy(dst, &p, RT_PROP13_BYTES);
	return 0;
}

RT_API cudaGetDeviceProperties(void *prop, int d)
{
	VGPU_API();
	if (!prop)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (!e)
		e = rt_fill_prop(prop, VGPU_CUDART_ABI, d);
	RT_RETURN(e);
}

#if VGPU_CUDART_ABI == 12
/* CUDA 12's headers call cudaGetDeviceProperties_v2 (same layout). */
RT_API cudaGetDeviceProperties_v2(void *prop, int d) { return cudaGetDeviceProperties(prop, d); }
#endif

/* ---------------- misc ---------------- */

RT_API cudaProfilerStart(void)
{
	VGPU_API();
	return cudaSuccess;
}

RT_API cudaProfilerStop(void)
{
	VGPU_API();
	return cudaSuccess;
}

#if VGPU_CUDART_ABI == 11
RT_API cudaProfilerInitialize(const char *a, const char *b, int c)
{
	VGPU_API();
	(void)a;
	(void)b;
	(void)c;
	return cudaSuccess;
}
#endif

/* cudaGetDriverEntryPoint: resolve through libcuda.so.1's table. In 11.x
 * it has 3 arguments; 12+ adds an optional status pointer. */
#if VGPU_CUDART_ABI == 11
RT_API cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags)
{
	VGPU_API();
	int rc = vgpu_proc_address(sym, fn, 11080, flags, NULL);
	RT_RETURN(rc == VGPU_E_NOT_FOUND ? cudaErrorSymbolNotFound : rc);
}
#else
RT_API cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags, int *status)
{
	VGPU_API();
	int rc = vgpu_proc_address(sym, fn, VGPU_CUDART_ABI * 1000, flags, status);
	if (status && rc == VGPU_E_NOT_FOUND)
		rc = 0; /* reported through *status */
	RT_RETURN(rc == VGPU_E_NOT_FOUND ? cudaErrorSymbolNotFound : rc);
}

RT_API cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned version, unsigned long long flags,
					int *status)
{
	VGPU_API();
	int rc = vgpu_proc_address(sym, fn, (int)version, flags, status);
	if (status && rc == VGPU_E_NOT_FOUND)
		rc = 0;
	RT_RETURN(rc == VGPU_E_NOT_FOUND ? cudaErrorSymbolNotFound : rc);
}
VGPU_ALIAS(cudaGetDriverEntryPointByVersion_ptsz, cudaGetDriverEntryPointByVersion);
#endif
VGPU_ALIAS(cudaGetDriverEntryPoint_ptsz, cudaGetDriverEntryPoint);

/* Returns a struct by value (hidden return pointer): it must never be a
 * generated int-returning stub. */
struct rt_channel_desc {
	int x, y, z, w;
	int f; /* enum cudaChannelFormatKind */
};

VGPU_EXPORT struct rt_channel_desc cudaCreateChannelDesc(int x, int y, int z, int w, int f)
{
	VGPU_API();
	struct rt_channel_desc d = {x, y, z, w, f};
	return d;
}

/* NVIDIA's private tables do not exist here: an error and a NULL table. */
RT_API cudaGetExportTable(const void **table, const void *id)
{
	VGPU_API();
	(void)id;
	if (table)
		*table = NULL;
	return cudaErrorNotSupported;
}
