package cuda

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/vgpu-project/vgpu/backend/device"
)

// lib holds the driver's entry points. Every field of entryPoints is
// callable after load: a symbol the driver lacks is bound to a stub that
// answers CUDA_ERROR_NOT_SUPPORTED (801), never left nil, and is listed in
// absent (has reports it).
type lib struct {
	handle  uintptr
	version int32
	absent  map[string]bool
	// syms is where bind found each entry point (base name); hot holds
	// the hottest ones for purego.SyscallN (hot.go).
	syms map[string]uintptr
	hot  hotSyms

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuGetErrorName            func(r int32, s **byte) int32
	cuGetErrorString          func(r int32, s **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(d *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceGetUuid           func(uuid *[16]byte, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuDevicePrimaryCtxReset   func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuCtxSetLimit             func(limit int32, v uint64) int32
	cuCtxGetLimit             func(v *uint64, limit int32) int32

	cuMemAlloc                func(p *uint64, n uint64) int32
	cuMemAllocAsync           func(p *uint64, n uint64, s uintptr) int32
	cuMemFreeAsync            func(p uint64, s uintptr) int32
	cuMemPoolCreate           func(pool *uintptr, props *poolProps) int32
	cuMemPoolDestroy          func(pool uintptr) int32
	cuMemPoolSetAttribute     func(pool uintptr, attr int32, v unsafe.Pointer) int32
	cuMemPoolGetAttribute     func(pool uintptr, attr int32, v unsafe.Pointer) int32
	cuMemPoolTrimTo           func(pool uintptr, keep uint64) int32
	cuMemPoolSetAccess        func(pool uintptr, desc *accessDesc, count uint64) int32
	cuMemPoolGetAccess        func(flags *uint32, pool uintptr, loc *memLocation) int32
	cuMemAllocFromPoolAsync   func(p *uint64, n uint64, pool, s uintptr) int32
	cuDeviceGetDefaultMemPool func(pool *uintptr, dev int32) int32
	cuStreamSetAttribute      func(s uintptr, attr int32, v unsafe.Pointer) int32
	cuStreamGetAttribute      func(s uintptr, attr int32, v unsafe.Pointer) int32
	cuStreamCopyAttributes    func(dst, src uintptr) int32
	cuMemAddressReserve       func(p *uint64, size, align, addr, flags uint64) int32
	cuMemAddressFree          func(p, size uint64) int32
	cuMemCreate               func(h *uint64, size uint64, prop *allocProp, flags uint64) int32
	cuMemRelease              func(h uint64) int32
	cuMemMap                  func(p, size, offset, h, flags uint64) int32
	cuMemUnmap                func(p, size uint64) int32
	cuMemSetAccess            func(p, size uint64, desc *accessDesc, count uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuMemcpyDtoD              func(dst, src, n uint64) int32
	cuArray3DCreate           func(h *uint64, d *array3DDesc) int32
	cuArrayDestroy            func(h uint64) int32
	cuMemcpy3D                func(p *memcpy3D) int32
	cuMemcpy3DAsync           func(p *memcpy3D, s uintptr) int32
	cuTexObjectCreate         func(o *uint64, r *resourceDesc, t *textureDesc, v *viewDesc) int32
	cuTexObjectDestroy        func(o uint64) int32
	cuSurfObjectCreate        func(o *uint64, r *resourceDesc) int32
	cuSurfObjectDestroy       func(o uint64) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) int32
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uint64, s uintptr) int32
	cuMemcpyDtoDAsync         func(dst, src, n uint64, s uintptr) int32
	cuMemsetD8                func(dst uint64, v uint8, n uint64) int32
	cuMemsetD16               func(dst uint64, v uint16, n uint64) int32
	cuMemsetD32               func(dst uint64, v uint32, n uint64) int32
	cuMemsetD8Async           func(dst uint64, v uint8, n uint64, s uintptr) int32
	cuMemsetD16Async          func(dst uint64, v uint16, n uint64, s uintptr) int32
	cuMemsetD32Async          func(dst uint64, v uint32, n uint64, s uintptr) int32
	cuMemsetD2D8              func(dst, pitch uint64, v uint8, w, h uint64) int32
	cuMemsetD2D16             func(dst, pitch uint64, v uint16, w, h uint64) int32
	cuMemsetD2D32             func(dst, pitch uint64, v uint32, w, h uint64) int32
	cuMemsetD2D8Async         func(dst, pitch uint64, v uint8, w, h uint64, s uintptr) int32
	cuMemsetD2D16Async        func(dst, pitch uint64, v uint16, w, h uint64, s uintptr) int32
	cuMemsetD2D32Async        func(dst, pitch uint64, v uint32, w, h uint64, s uintptr) int32
	cuMemHostRegister         func(p unsafe.Pointer, n uint64, flags uint32) int32
	cuMemHostUnregister       func(p unsafe.Pointer) int32
	cuMemHostGetDevicePointer func(dp *uint64, p unsafe.Pointer, flags uint32) int32

	cuModuleLoadData    func(m *uintptr, image unsafe.Pointer) int32
	cuModuleUnload      func(m uintptr) int32
	cuModuleGetFunction func(f *uintptr, m uintptr, name *byte) int32
	cuModuleGetGlobal   func(dp *uint64, bytes *uint64, m uintptr, name *byte) int32
	cuFuncGetParamInfo  func(f uintptr, index uint64, offset, size *uint64) int32
	cuFuncGetAttribute  func(v *int32, attr int32, f uintptr) int32
	cuFuncSetAttribute  func(f uintptr, attr int32, v int32) int32
	cuOccupancy         func(n *int32, f uintptr, blockSize int32, dynSmem uint64, flags uint32) int32
	cuLaunchKernel      func(f uintptr, gx, gy, gz, bx, by, bz, smem uint32, s uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuLaunchKernelEx    func(cfg *launchConfig, f uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuOccupancyClusters func(n *int32, f uintptr, cfg *launchConfig) int32
	cuMemGranularity    func(g *uint64, prop *allocProp, option uint32) int32
	cuModuleFuncCount   func(n *uint32, m uintptr) int32
	cuModuleEnumFuncs   func(fns *uintptr, n uint32, m uintptr) int32
	cuFuncGetName       func(name **byte, f uintptr) int32

	cuStreamCreateWithPriority func(s *uintptr, flags uint32, prio int32) int32
	cuStreamDestroy            func(s uintptr) int32
	cuStreamSynchronize        func(s uintptr) int32
	cuStreamQuery              func(s uintptr) int32
	cuStreamWaitEvent          func(s, e uintptr, flags uint32) int32
	cuEventCreate              func(e *uintptr, flags uint32) int32
	cuEventDestroy             func(e uintptr) int32
	cuEventRecord              func(e, s uintptr) int32
	cuEventSynchronize         func(e uintptr) int32
	cuEventQuery               func(e uintptr) int32
	cuEventElapsedTime         func(ms *float32, start, end uintptr) int32
	cuLaunchHostFunc           func(s uintptr, fn uintptr, userData uintptr) int32

	cuStreamBeginCapture func(s uintptr, mode int32) int32 // the _v2 ABI (with a mode)
	cuStreamEndCapture   func(s uintptr, g *uintptr) int32
	cuStreamIsCapturing  func(s uintptr, status *int32) int32
	cuGraphInstantiate   func(e *uintptr, g uintptr, flags uint64) int32 // cuGraphInstantiateWithFlags
	cuGraphLaunch        func(e, s uintptr) int32
	cuGraphExecDestroy   func(e uintptr) int32
	cuGraphDestroy       func(g uintptr) int32

	// Graphs node by node (graph_unsafe.go). cuGraphAddKernelNode binds
	// the driver's newest ABI (_v2 on CUDA 12+, whose parameter struct
	// extends the first one's).
	cuGraphCreate        func(g *uintptr, flags uint32) int32
	cuGraphGetNodes      func(g uintptr, nodes *uintptr, n *uintptr) int32
	cuGraphGetRootNodes  func(g uintptr, nodes *uintptr, n *uintptr) int32
	cuGraphNodeGetType   func(n uintptr, t *int32) int32
	cuGraphAddKernelNode func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, p unsafe.Pointer) int32
	cuGraphAddMemcpyNode func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, p unsafe.Pointer, ctx uintptr) int32
	cuGraphAddMemsetNode func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, p unsafe.Pointer, ctx uintptr) int32
	cuGraphAddEmptyNode  func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr) int32
	cuGraphClone         func(clone *uintptr, g uintptr) int32
	cuGraphDestroyNode   func(n uintptr) int32
	cuGraphUpload        func(e, s uintptr) int32
	// cuGraphExecUpdate: the _v2 ABI (CUDA 12+: a result info struct) or
	// the first (two out pointers), as the driver's version says.
	cuGraphExecUpdate func(e, g uintptr, a, b unsafe.Pointer) int32
	// Node parameters. The kernel node's bind _v2 on CUDA 12+ (bind takes
	// the driver's newest ABI), whose struct extends the first's 56 bytes:
	// kernelNodeParams is the larger, kern and ctx 0.
	cuGraphKernelNodeGetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphKernelNodeSetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphExecKernelNodeSetParams func(e, n uintptr, p unsafe.Pointer) int32
	cuGraphMemsetNodeGetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphMemsetNodeSetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphExecMemsetNodeSetParams func(e, n uintptr, p unsafe.Pointer, ctx uintptr) int32
	cuGraphMemcpyNodeGetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphMemcpyNodeSetParams     func(n uintptr, p unsafe.Pointer) int32
	cuGraphExecMemcpyNodeSetParams func(e, n uintptr, p unsafe.Pointer, ctx uintptr) int32
	// Edges: bind takes _v2 from CUDA 12.3 on, with edge data before the
	// count (graph_unsafe.go, edgeArgs); bound here with one argument more
	// than the first ABI has, which the first ignores.
	cuGraphAddDependencies       func(g uintptr, from, to *uintptr, a, b uintptr) int32
	cuGraphRemoveDependencies    func(g uintptr, from, to *uintptr, a, b uintptr) int32
	cuGraphGetEdges              func(g uintptr, from, to *uintptr, a, b unsafe.Pointer) int32
	cuGraphNodeGetDependencies   func(n uintptr, deps *uintptr, a, b unsafe.Pointer) int32
	cuGraphNodeGetDependentNodes func(n uintptr, deps *uintptr, a, b unsafe.Pointer) int32
	// Event and child graph nodes.
	cuGraphAddEventRecordNode          func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, ev uintptr) int32
	cuGraphAddEventWaitNode            func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, ev uintptr) int32
	cuGraphEventRecordNodeGetEvent     func(n uintptr, ev *uintptr) int32
	cuGraphEventWaitNodeGetEvent       func(n uintptr, ev *uintptr) int32
	cuGraphEventRecordNodeSetEvent     func(n, ev uintptr) int32
	cuGraphEventWaitNodeSetEvent       func(n, ev uintptr) int32
	cuGraphExecEventRecordNodeSetEvent func(e, n, ev uintptr) int32
	cuGraphExecEventWaitNodeSetEvent   func(e, n, ev uintptr) int32
	cuGraphAddChildGraphNode           func(n *uintptr, g uintptr, deps *uintptr, ndeps uintptr, child uintptr) int32
	cuGraphChildGraphNodeGetGraph      func(n uintptr, g *uintptr) int32
	cuGraphExecChildGraphNodeSetParams func(e, n, child uintptr) int32
	// Kernel node attributes (CUkernelNodeAttrValue: 64 bytes).
	cuGraphKernelNodeSetAttribute   func(n uintptr, attr int32, v unsafe.Pointer) int32
	cuGraphKernelNodeGetAttribute   func(n uintptr, attr int32, v unsafe.Pointer) int32
	cuGraphKernelNodeCopyAttributes func(dst, src uintptr) int32
	cuGraphNodeFindInClone          func(n *uintptr, orig, clone uintptr) int32
	cuGraphNodeSetEnabled           func(e, n uintptr, on uint32) int32
	cuGraphNodeGetEnabled           func(e, n uintptr, on *uint32) int32

	getProcV2 func(symbol *byte, pfn *uintptr, version int32, flags uint64, status *int32) int32
	getProcV1 func(symbol *byte, pfn *uintptr, version int32, flags uint64) int32
}

// Library names tried in order.
var libNames = []string{"libcuda.so.1", "libcuda.so"}

func cstr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

// load opens libcuda and binds every entry point it has.
func load() (*lib, error) {
	var h uintptr
	var errs []string
	for _, n := range libNames {
		var err error
		h, err = purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			break
		}
		errs = append(errs, err.Error())
	}
	if h == 0 {
		return nil, fmt.Errorf("%w: cannot load libcuda.so.1 (%v); install the NVIDIA driver or use --device sim", device.ErrNoGPU, errs)
	}
	l := &lib{handle: h}
	// Unversioned entry points, straight from the symbol table.
	if !l.dlsym(&l.cuInit, "cuInit") || !l.dlsym(&l.cuDriverGetVersion, "cuDriverGetVersion") {
		return nil, fmt.Errorf("%w: libcuda.so.1 has no cuInit/cuDriverGetVersion: not an NVIDIA driver library", device.ErrNoGPU)
	}
	if r := l.cuDriverGetVersion(&l.version); r != 0 {
		return nil, fmt.Errorf("%w: cuDriverGetVersion failed with CUresult %d", device.ErrNoGPU, r)
	}
	l.dlsym(&l.getProcV2, "cuGetProcAddress_v2")
	if l.getProcV2 == nil {
		l.dlsym(&l.getProcV1, "cuGetProcAddress")
	}
	for _, ep := range l.entryPoints() {
		l.bind(ep.fptr, ep.name)
	}
	l.stubAbsent()
	l.hot = l.hotSyms()
	for _, req := range []string{"cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc", "cuLaunchKernel"} {
		if !l.has(req) {
			return nil, fmt.Errorf("%w: libcuda.so.1 (CUDA %d) lacks %s", device.ErrNoGPU, l.version, req)
		}
	}
	return l, nil
}

// entryPoint is one driver function the backend calls: where it is bound
// and the driver's base name for it.
type entryPoint struct {
	fptr any
	name string
}

// entryPoints lists every driver function of lib except the bootstrap ones
// (cuInit, cuDriverGetVersion, cuGetProcAddress), which load binds itself.
func (l *lib) entryPoints() []entryPoint {
	return []entryPoint{
		{&l.cuGetErrorName, "cuGetErrorName"}, {&l.cuGetErrorString, "cuGetErrorString"},
		{&l.cuDeviceGetCount, "cuDeviceGetCount"}, {&l.cuDeviceGet, "cuDeviceGet"},
		{&l.cuDeviceGetName, "cuDeviceGetName"}, {&l.cuDeviceGetUuid, "cuDeviceGetUuid"},
		{&l.cuDeviceTotalMem, "cuDeviceTotalMem"}, {&l.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&l.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"}, {&l.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease"},
		{&l.cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset"}, {&l.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&l.cuCtxSynchronize, "cuCtxSynchronize"}, {&l.cuCtxSetLimit, "cuCtxSetLimit"}, {&l.cuCtxGetLimit, "cuCtxGetLimit"},
		{&l.cuMemAlloc, "cuMemAlloc"}, {&l.cuMemFree, "cuMemFree"}, {&l.cuMemGetInfo, "cuMemGetInfo"},
		{&l.cuMemAllocAsync, "cuMemAllocAsync"}, {&l.cuMemFreeAsync, "cuMemFreeAsync"},
		{&l.cuMemPoolCreate, "cuMemPoolCreate"}, {&l.cuMemPoolDestroy, "cuMemPoolDestroy"},
		{&l.cuMemPoolSetAttribute, "cuMemPoolSetAttribute"}, {&l.cuMemPoolGetAttribute, "cuMemPoolGetAttribute"},
		{&l.cuMemPoolTrimTo, "cuMemPoolTrimTo"}, {&l.cuMemPoolSetAccess, "cuMemPoolSetAccess"},
		{&l.cuMemPoolGetAccess, "cuMemPoolGetAccess"}, {&l.cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync"},
		{&l.cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool"},
		{&l.cuStreamSetAttribute, "cuStreamSetAttribute"}, {&l.cuStreamGetAttribute, "cuStreamGetAttribute"},
		{&l.cuStreamCopyAttributes, "cuStreamCopyAttributes"},
		{&l.cuMemAddressReserve, "cuMemAddressReserve"}, {&l.cuMemAddressFree, "cuMemAddressFree"},
		{&l.cuMemCreate, "cuMemCreate"}, {&l.cuMemRelease, "cuMemRelease"}, {&l.cuMemMap, "cuMemMap"},
		{&l.cuMemUnmap, "cuMemUnmap"}, {&l.cuMemSetAccess, "cuMemSetAccess"},
		{&l.cuMemcpyHtoD, "cuMemcpyHtoD"}, {&l.cuMemcpyDtoH, "cuMemcpyDtoH"}, {&l.cuMemcpyDtoD, "cuMemcpyDtoD"},
		{&l.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync"}, {&l.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync"}, {&l.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync"},
		{&l.cuArray3DCreate, "cuArray3DCreate"}, {&l.cuArrayDestroy, "cuArrayDestroy"},
		{&l.cuMemcpy3D, "cuMemcpy3D"}, {&l.cuMemcpy3DAsync, "cuMemcpy3DAsync"},
		{&l.cuTexObjectCreate, "cuTexObjectCreate"}, {&l.cuTexObjectDestroy, "cuTexObjectDestroy"},
		{&l.cuSurfObjectCreate, "cuSurfObjectCreate"}, {&l.cuSurfObjectDestroy, "cuSurfObjectDestroy"},
		{&l.cuMemsetD8, "cuMemsetD8"}, {&l.cuMemsetD16, "cuMemsetD16"}, {&l.cuMemsetD32, "cuMemsetD32"},
		{&l.cuMemsetD8Async, "cuMemsetD8Async"}, {&l.cuMemsetD16Async, "cuMemsetD16Async"}, {&l.cuMemsetD32Async, "cuMemsetD32Async"},
		{&l.cuMemsetD2D8, "cuMemsetD2D8"}, {&l.cuMemsetD2D16, "cuMemsetD2D16"}, {&l.cuMemsetD2D32, "cuMemsetD2D32"},
		{&l.cuMemsetD2D8Async, "cuMemsetD2D8Async"}, {&l.cuMemsetD2D16Async, "cuMemsetD2D16Async"}, {&l.cuMemsetD2D32Async, "cuMemsetD2D32Async"},
		{&l.cuMemHostRegister, "cuMemHostRegister"}, {&l.cuMemHostUnregister, "cuMemHostUnregister"},
		{&l.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer"},
		{&l.cuModuleLoadData, "cuModuleLoadData"}, {&l.cuModuleUnload, "cuModuleUnload"},
		{&l.cuModuleGetFunction, "cuModuleGetFunction"}, {&l.cuModuleGetGlobal, "cuModuleGetGlobal"},
		{&l.cuFuncGetParamInfo, "cuFuncGetParamInfo"}, {&l.cuFuncGetAttribute, "cuFuncGetAttribute"},
		{&l.cuFuncSetAttribute, "cuFuncSetAttribute"}, {&l.cuOccupancy, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"},
		{&l.cuLaunchKernel, "cuLaunchKernel"}, {&l.cuLaunchKernelEx, "cuLaunchKernelEx"},
		{&l.cuOccupancyClusters, "cuOccupancyMaxActiveClusters"}, {&l.cuMemGranularity, "cuMemGetAllocationGranularity"},
		{&l.cuModuleFuncCount, "cuModuleGetFunctionCount"}, {&l.cuModuleEnumFuncs, "cuModuleEnumerateFunctions"},
		{&l.cuFuncGetName, "cuFuncGetName"},
		{&l.cuStreamCreateWithPriority, "cuStreamCreateWithPriority"}, {&l.cuStreamDestroy, "cuStreamDestroy"},
		{&l.cuStreamSynchronize, "cuStreamSynchronize"}, {&l.cuStreamQuery, "cuStreamQuery"},
		{&l.cuStreamWaitEvent, "cuStreamWaitEvent"},
		{&l.cuEventCreate, "cuEventCreate"}, {&l.cuEventDestroy, "cuEventDestroy"}, {&l.cuEventRecord, "cuEventRecord"},
		{&l.cuEventSynchronize, "cuEventSynchronize"}, {&l.cuEventQuery, "cuEventQuery"},
		{&l.cuEventElapsedTime, "cuEventElapsedTime"}, {&l.cuLaunchHostFunc, "cuLaunchHostFunc"},
		{&l.cuStreamBeginCapture, "cuStreamBeginCapture"}, {&l.cuStreamEndCapture, "cuStreamEndCapture"},
		{&l.cuStreamIsCapturing, "cuStreamIsCapturing"}, {&l.cuGraphInstantiate, "cuGraphInstantiateWithFlags"},
		{&l.cuGraphLaunch, "cuGraphLaunch"}, {&l.cuGraphExecDestroy, "cuGraphExecDestroy"}, {&l.cuGraphDestroy, "cuGraphDestroy"},
		{&l.cuGraphCreate, "cuGraphCreate"}, {&l.cuGraphGetNodes, "cuGraphGetNodes"}, {&l.cuGraphGetRootNodes, "cuGraphGetRootNodes"},
		{&l.cuGraphNodeGetType, "cuGraphNodeGetType"}, {&l.cuGraphAddKernelNode, "cuGraphAddKernelNode"},
		{&l.cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode"}, {&l.cuGraphAddMemsetNode, "cuGraphAddMemsetNode"},
		{&l.cuGraphAddEmptyNode, "cuGraphAddEmptyNode"}, {&l.cuGraphClone, "cuGraphClone"},
		{&l.cuGraphDestroyNode, "cuGraphDestroyNode"}, {&l.cuGraphUpload, "cuGraphUpload"},
		{&l.cuGraphExecUpdate, "cuGraphExecUpdate"},
		{&l.cuGraphKernelNodeGetParams, "cuGraphKernelNodeGetParams"}, {&l.cuGraphKernelNodeSetParams, "cuGraphKernelNodeSetParams"},
		{&l.cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams"},
		{&l.cuGraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams"}, {&l.cuGraphMemsetNodeSetParams, "cuGraphMemsetNodeSetParams"},
		{&l.cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams"},
		{&l.cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams"}, {&l.cuGraphMemcpyNodeSetParams, "cuGraphMemcpyNodeSetParams"},
		{&l.cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams"},
		{&l.cuGraphAddDependencies, "cuGraphAddDependencies"}, {&l.cuGraphRemoveDependencies, "cuGraphRemoveDependencies"},
		{&l.cuGraphGetEdges, "cuGraphGetEdges"}, {&l.cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies"},
		{&l.cuGraphNodeGetDependentNodes, "cuGraphNodeGetDependentNodes"},
		{&l.cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode"}, {&l.cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode"},
		{&l.cuGraphEventRecordNodeGetEvent, "cuGraphEventRecordNodeGetEvent"}, {&l.cuGraphEventWaitNodeGetEvent, "cuGraphEventWaitNodeGetEvent"},
		{&l.cuGraphEventRecordNodeSetEvent, "cuGraphEventRecordNodeSetEvent"}, {&l.cuGraphEventWaitNodeSetEvent, "cuGraphEventWaitNodeSetEvent"},
		{&l.cuGraphExecEventRecordNodeSetEvent, "cuGraphExecEventRecordNodeSetEvent"},
		{&l.cuGraphExecEventWaitNodeSetEvent, "cuGraphExecEventWaitNodeSetEvent"},
		{&l.cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode"}, {&l.cuGraphChildGraphNodeGetGraph, "cuGraphChildGraphNodeGetGraph"},
		{&l.cuGraphExecChildGraphNodeSetParams, "cuGraphExecChildGraphNodeSetParams"},
		{&l.cuGraphKernelNodeSetAttribute, "cuGraphKernelNodeSetAttribute"}, {&l.cuGraphKernelNodeGetAttribute, "cuGraphKernelNodeGetAttribute"},
		{&l.cuGraphKernelNodeCopyAttributes, "cuGraphKernelNodeCopyAttributes"},
		{&l.cuGraphNodeFindInClone, "cuGraphNodeFindInClone"}, {&l.cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled"},
		{&l.cuGraphNodeGetEnabled, "cuGraphNodeGetEnabled"},
	}
}

// notSupported is what a stub for an absent driver symbol returns.
const notSupported = int32(device.ErrNotSupported)

// stubAbsent binds every entry point the driver lacks to a function that
// answers CUDA_ERROR_NOT_SUPPORTED, and records it in absent: a guest call
// that reaches a missing symbol gets 801 instead of a nil call (a panic of
// the whole process).
func (l *lib) stubAbsent() {
	if l.absent == nil {
		l.absent = map[string]bool{}
	}
	for _, ep := range l.entryPoints() {
		v := reflect.ValueOf(ep.fptr).Elem()
		if !v.IsNil() {
			continue
		}
		t := v.Type()
		if t.NumOut() != 1 || t.Out(0).Kind() != reflect.Int32 {
			panic(fmt.Sprintf("cuda: entry point %s does not return a CUresult", ep.name)) // a programming error, caught by TestAbsentSymbolsAnswer801
		}
		ret := []reflect.Value{reflect.ValueOf(notSupported).Convert(t.Out(0))}
		v.Set(reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value { return ret }))
		l.absent[ep.name] = true
	}
}

// has reports whether the driver has the entry point name (a base name of
// entryPoints).
func (l *lib) has(name string) bool { return !l.absent[name] }

// dlsym binds an unversioned symbol if the library has it.
func (l *lib) dlsym(fptr any, name string) bool {
	p, err := purego.Dlsym(l.handle, name)
	if err != nil || p == 0 {
		return false
	}
	purego.RegisterFunc(fptr, p)
	return true
}

// bind resolves name through cuGetProcAddress (the driver's newest ABI of
// the call for its own version), else dlsym of name_v2 then name. A missing
// symbol stays nil here (purego.RegisterLibFunc would panic on it);
// stubAbsent then binds it to a stub.
func (l *lib) bind(fptr any, name string) {
	var p uintptr
	switch {
	case l.getProcV2 != nil:
		var status int32
		if l.getProcV2(cstr(name), &p, l.version, 0, &status) != 0 || status != 0 {
			p = 0
		}
	case l.getProcV1 != nil:
		if l.getProcV1(cstr(name), &p, l.version, 0) != 0 {
			p = 0
		}
	}
	if p == 0 {
		for _, n := range []string{name + "_v2", name} {
			if q, err := purego.Dlsym(l.handle, n); err == nil && q != 0 {
				p = q
				break
			}
		}
	}
	if p != 0 {
		purego.RegisterFunc(fptr, p)
		if l.syms == nil {
			l.syms = map[string]uintptr{}
		}
		l.syms[name] = p
	}
}

// errName returns the driver's name for a CUresult.
func (l *lib) errDetail(r int32) string {
	if l.cuGetErrorString == nil || !l.has("cuGetErrorString") {
		return ""
	}
	var s *byte
	if l.cuGetErrorString(r, &s) != 0 || s == nil {
		return ""
	}
	return goString(s)
}

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 4096 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
