// Package device defines what a vgpu session needs from a GPU, independent of
// whether the GPU is real (package device/cuda: libcuda.so.1 through purego)
// or simulated in host memory (package device/sim).
//
// A Driver enumerates devices; a Context is one device's (primary) context.
// Contexts are safe for concurrent use by many sessions: implementations do
// their own locking and, for CUDA, make the context current on a locked OS
// thread for every call.
//
// Trust: this package trusts its caller. Sessions validate every handle and
// device-pointer range against their own allocations before calling here;
// a Context only sees pointers, handles and sizes the session has checked.
// Errors carry the CUDA driver's CUresult number unchanged (see Error).
package device

import (
	"errors"
	"fmt"
	"time"
)

// Ptr is a device address (CUdeviceptr). Device pointers are the GPU's real
// addresses: a guest may do arithmetic on them and store them in structs.
type Ptr uint64

// Handles of driver objects. They are the driver's own values (CUstream,
// CUevent, CUmodule, CUfunction); sessions never hand them to guests.
type (
	// Stream is a stream; DefaultStream (0) is the context's NULL stream.
	Stream uintptr
	// Event is an event.
	Event uintptr
	// Module is a loaded module.
	Module uintptr
	// Function is a kernel of a loaded module.
	Function uintptr
	// MemHandle is physical memory of the virtual-memory API
	// (CUmemGenericAllocationHandle).
	MemHandle uint64
	// Graph is a graph (CUgraph), made by stream capture.
	Graph uintptr
	// GraphExec is an instantiated graph (CUgraphExec).
	GraphExec uintptr
	// GraphNode is a node of a graph (CUgraphNode).
	GraphNode uintptr
	// MemPool is a memory pool (CUmemoryPool); DefaultPool (0) is the
	// device's default pool.
	MemPool uintptr
)

// DefaultPool names the device's default memory pool.
const DefaultPool MemPool = 0

// Memory pool attributes (CUmemPool_attribute, cuda.h). The three REUSE
// ones are ints (0 or 1), the rest 64-bit byte counts; the two CURRENT
// ones are read-only and the two HIGH ones may only be set to 0 (a reset).
const (
	PoolReuseFollowEventDeps    = 1
	PoolReuseAllowOpportunistic = 2
	PoolReuseAllowInternalDeps  = 3
	PoolReleaseThreshold        = 4
	PoolReservedMemCurrent      = 5
	PoolReservedMemHigh         = 6
	PoolUsedMemCurrent          = 7
	PoolUsedMemHigh             = 8
	PoolAttrMax                 = 8
)

// PoolProps are a CUmemPoolProps for a pool of pinned memory on the
// context's device with no export handle types.
type PoolProps struct {
	MaxSize uint64 // 0: the driver's default
	Usage   uint16
}

// Stream capture modes (CUstreamCaptureMode) and statuses
// (CUstreamCaptureStatus), cuda.h.
const (
	CaptureModeGlobal      = 0
	CaptureModeThreadLocal = 1
	CaptureModeRelaxed     = 2

	CaptureStatusNone        = 0
	CaptureStatusActive      = 1
	CaptureStatusInvalidated = 2
)

// DefaultStream is the context's legacy NULL stream.
const DefaultStream Stream = 0

// MaxAttrs is the number of CUdevice_attribute values Properties holds.
const MaxAttrs = 256

// Properties describe a device: what cudaGetDeviceProperties and
// cuDeviceGetAttribute report.
type Properties struct {
	Name         string
	UUID         [16]byte
	LUID         [8]byte
	LUIDNodeMask uint32
	TotalMem     uint64
	// Attrs[a] is cuDeviceGetAttribute(a); 0 where the driver has none.
	Attrs [MaxAttrs]int32
}

// Param is one kernel parameter's place in the packed parameter block
// (cuFuncGetParamInfo).
type Param struct {
	Offset uint32
	Size   uint32
}

// ParamBytes returns the size of the parameter block a layout describes.
func ParamBytes(ps []Param) uint32 {
	var n uint32
	for _, p := range ps {
		if e := p.Offset + p.Size; e > n {
			n = e
		}
	}
	return n
}

// LaunchConfig is the geometry of a kernel launch.
type LaunchConfig struct {
	Grid, Block [3]uint32
	SharedMem   uint32
	Stream      Stream
	// Cluster is the thread-block cluster shape of a cluster launch
	// (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION); all 0 when none was given,
	// so that the kernel's compile-time shape, if any, applies.
	Cluster [3]uint32
	// ClusterPolicy is CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
	// (CUclusterSchedulingPolicy: 0 default, 1 spread, 2 load balancing).
	ClusterPolicy uint32
	// Attrs are the launch's other attributes (cuLaunchKernelEx,
	// cuLaunchCooperativeKernel); the zero value is none.
	Attrs LaunchAttrs
}

// Launch attributes (CUlaunchAttributeID, cuda.h) beside the cluster's;
// the stream attributes (StreamAttr*) are launch attributes too.
const (
	LaunchAttrCooperative               = 2
	LaunchAttrProgrammaticSerialization = 6
	LaunchAttrCarveout                  = 14 // PREFERRED_SHARED_MEMORY_CARVEOUT
)

// LaunchAttrs are a launch's attributes beside the cluster's: Has has bit
// 1<<id for each one given (LaunchAttr*, StreamAttr* ids); Value holds
// each integer one by id, Window the access policy window.
type LaunchAttrs struct {
	Has    uint32
	Value  [LaunchAttrCarveout + 1]uint32
	Window AccessPolicyWindow
}

// Given says whether attribute id is set.
func (a *LaunchAttrs) Given(id int) bool { return id < 32 && a.Has&(1<<id) != 0 }

// Cooperative says whether the launch is cooperative (its blocks must be
// resident at once, cuLaunchCooperativeKernel).
func (a *LaunchAttrs) Cooperative() bool {
	return a.Given(LaunchAttrCooperative) && a.Value[LaunchAttrCooperative] != 0
}

// HasCluster says whether the launch names a cluster shape or policy.
func (c *LaunchConfig) HasCluster() bool {
	return c.Cluster != [3]uint32{} || c.ClusterPolicy != 0
}

// Stream attributes (CUstreamAttrID, the stream subset of
// CUlaunchAttributeID, cuda.h).
const (
	StreamAttrAccessPolicyWindow = 1
	StreamAttrSyncPolicy         = 3
	StreamAttrPriority           = 8
	StreamAttrMemSyncDomainMap   = 9
	StreamAttrMemSyncDomain      = 10
	// KernelNodeAttrCooperative is a kernel node's (and a launch's)
	// COOPERATIVE attribute, 0 or 1; not a stream's.
	KernelNodeAttrCooperative = 2
)

// AccessPolicyWindow is a CUaccessPolicyWindow: an L2 persistence hint
// over [Base, Base+Bytes); HitProp and MissProp are CUaccessProperty
// (0 normal, 1 streaming, 2 persisting).
type AccessPolicyWindow struct {
	Base     Ptr
	Bytes    uint64
	HitRatio float32
	HitProp  uint32
	MissProp uint32
}

// StreamAttr is a stream attribute's value (CUstreamAttrValue): Value for
// the integer ones (priority as an int32's bits, the memory sync domain
// map as default | remote<<8), Window for the access policy window.
type StreamAttr struct {
	Value  uint32
	Window AccessPolicyWindow
}

// GraphCopy is a 1D copy of a graph memcpy node: from SrcHost (host
// memory) or Src (device memory) to DstHost or Dst, N bytes (the length of
// the host slice when there is one).
type GraphCopy struct {
	Dst, Src         Ptr
	DstHost, SrcHost []byte
	N                uint64
}

// KernelNode is a kernel node's launch: its function, its shape
// (Config.Stream unused) and its parameter block, laid out as for Launch.
type KernelNode struct {
	Func   Function
	Config LaunchConfig
	Params []byte
}

// MemsetNode is a memset node's parameters: Height rows of Width elements
// of ElemSize bytes (1, 2 or 4), Pitch bytes apart, set to Value.
type MemsetNode struct {
	Dst           Ptr
	Value         uint32
	ElemSize      int
	Width, Height uint64
	Pitch         uint64
}

// CUgraphExecUpdateResult (cuda.h) values the devices report.
const (
	GraphUpdateSuccess         = 0
	GraphUpdateError           = 1
	GraphUpdateTopologyChanged = 2
	GraphUpdateNodeTypeChanged = 3
	GraphUpdateFunctionChanged = 4
	GraphUpdateParamsChanged   = 5
	GraphUpdateNotSupported    = 6
)

// CUgraphNodeType (cuda.h) values the devices report.
const (
	GraphNodeKernel      = 0
	GraphNodeMemcpy      = 1
	GraphNodeMemset      = 2
	GraphNodeHost        = 3
	GraphNodeGraph       = 4
	GraphNodeEmpty       = 5
	GraphNodeWaitEvent   = 6
	GraphNodeEventRecord = 7
	GraphNodeMemAlloc    = 10
	GraphNodeMemFree     = 11
)

// AllocProp is a CUmemAllocationProp for memory on the context's device,
// as cuMemGetAllocationGranularity takes it (cuda.h numbering).
type AllocProp struct {
	Type        uint32 // CUmemAllocationType
	HandleTypes uint32 // CUmemAllocationHandleType bits
	Compression uint8
	RDMA        uint8
	Usage       uint16
}

// Driver is one GPU driver (real or simulated) with its devices.
type Driver interface {
	// Kind is "cuda" or "sim".
	Kind() string
	// Version is the driver's CUDA version (cuDriverGetVersion), e.g. 13000.
	Version() int32
	// Release is the driver's own version as NVML reports it
	// (nvmlSystemGetDriverVersion, e.g. "580.159.04"); "" if unknown.
	Release() string
	// Count is the number of devices.
	Count() int
	// Context returns device ordinal's context, creating it on first use.
	Context(ordinal int) (Context, error)
	// Close releases every context.
	Close() error
}

// Context is one device's context. Every method is safe for concurrent use.
//
// Host buffers: a synchronous copy may use b only during the call. An
// asynchronous HtoD copy may reuse src when the call returns; an asynchronous
// DtoH copy writes dst until the stream reaches the copy's end, so dst must
// stay valid (and should be registered memory) until then. A copy's host
// buffer lies either inside one HostRegister'ed range or outside all of them:
// CUDA answers a buffer that spans a registration's end (into unregistered
// memory or another registration) with ErrInvalidValue.
type Context interface {
	Ordinal() int
	Properties() (*Properties, error)

	MemAlloc(size uint64) (Ptr, error)
	MemFree(p Ptr) error
	MemGetInfo() (free, total uint64, err error)
	// MemAllocAsync allocates from the device's default memory pool in
	// s's order (usable by work queued on s after it); MemFreeAsync frees
	// such memory (or MemAlloc's) once s reaches the free.
	MemAllocAsync(size uint64, s Stream) (Ptr, error)
	MemFreeAsync(p Ptr, s Stream) error

	// Memory pools. MemPoolCreate makes a pool of this device's memory;
	// MemPoolDestroy destroys it (its live allocations stay valid until
	// freed). The attribute, trim and access calls take DefaultPool for
	// the device's default pool; access is only this device's own
	// (CUmemAccess_flags). MemAllocFromPoolAsync allocates from a created
	// pool in s's order (freed with MemFreeAsync or MemFree).
	MemPoolCreate(p PoolProps) (MemPool, error)
	MemPoolDestroy(p MemPool) error
	MemPoolSetAttribute(p MemPool, attr int, v uint64) error
	MemPoolGetAttribute(p MemPool, attr int) (uint64, error)
	MemPoolTrimTo(p MemPool, keep uint64) error
	MemPoolSetAccess(p MemPool, flags uint32) error
	MemPoolGetAccess(p MemPool) (uint32, error)
	MemAllocFromPoolAsync(size uint64, p MemPool, s Stream) (Ptr, error)

	// The virtual-memory API. MemAddressReserve reserves an address range
	// (align 0: the granularity); MemCreate makes physical memory on this
	// device (pinned, no export handles); MemMap maps part of it into a
	// reserved range and MemSetAccess makes a mapped range readable and
	// writable by this device. Physical memory released while mapped goes
	// when its last mapping does.
	MemAddressReserve(size, align uint64) (Ptr, error)
	MemAddressFree(p Ptr, size uint64) error
	MemCreate(size uint64, prop AllocProp) (MemHandle, error)
	MemRelease(h MemHandle) error
	MemMap(p Ptr, size, offset uint64, h MemHandle) error
	MemUnmap(p Ptr, size uint64) error
	MemSetAccess(p Ptr, size uint64) error
	// MemGetGranularity is cuMemGetAllocationGranularity for an
	// allocation on this device (option 0 minimum, 1 recommended).
	MemGetGranularity(p AllocProp, option uint32) (uint64, error)

	// CUDA arrays: ArrayCreate makes one (cuArray3DCreate), ArrayDestroy
	// frees it; Memcpy3D copies a box between device memory and arrays
	// (cuMemcpy3D with no host side).
	ArrayCreate(d ArrayDesc) (Array, error)
	ArrayDestroy(a Array) error
	Memcpy3D(p Copy3D, s Stream, async bool) error
	// Texture and surface objects over arrays or device memory; the
	// values are the driver's (kernels take them by value).
	TexObjectCreate(r ResourceDesc, t TextureDesc, v *ViewDesc) (TexObject, error)
	TexObjectDestroy(o TexObject) error
	SurfObjectCreate(r ResourceDesc) (SurfObject, error)
	SurfObjectDestroy(o SurfObject) error

	MemcpyHtoD(dst Ptr, src []byte, s Stream, async bool) error
	MemcpyDtoH(dst []byte, src Ptr, s Stream, async bool) error
	MemcpyDtoD(dst, src Ptr, n uint64, s Stream, async bool) error
	// Memset sets width elements of elemSize (1, 2 or 4) bytes to value,
	// in height rows pitch bytes apart (height 1: a 1D memset; pitch unused).
	Memset(dst Ptr, value uint32, elemSize int, width, height, pitch uint64, s Stream, async bool) error

	// HostRegister page-locks host memory (cuMemHostRegister with
	// DEVICEMAP) and returns its device address. b must not be Go heap
	// memory (mmapped memory only) and must stay mapped until HostUnregister.
	HostRegister(b []byte, readOnly bool) (Ptr, error)
	HostUnregister(b []byte) error

	ModuleLoad(image []byte) (Module, error)
	ModuleUnload(m Module) error
	ModuleGetFunction(m Module, name string) (Function, error)
	ModuleGetGlobal(m Module, name string) (Ptr, uint64, error)
	// ModuleFunctionNames lists the kernels of m, in the driver's order
	// (cuModuleEnumerateFunctions and cuFuncGetName).
	ModuleFunctionNames(m Module) ([]string, error)
	// FuncParams returns the kernel's parameter layout.
	FuncParams(f Function) ([]Param, error)
	FuncGetAttribute(f Function, attr int) (int32, error)
	FuncSetAttribute(f Function, attr int, value int32) error
	OccupancyMaxBlocks(f Function, blockSize int, dynSmem uint64, flags uint32) (int32, error)
	// OccupancyMaxClusters is cuOccupancyMaxActiveClusters: how many
	// clusters of f launched as cfg says (its Cluster shape, or f's
	// compile-time one) can be resident on the device at once.
	OccupancyMaxClusters(f Function, cfg LaunchConfig) (int32, error)
	// Launch launches f; params is the packed parameter block laid out as
	// FuncParams says (the caller has checked its size). A cfg with a
	// cluster (HasCluster) launches as cuLaunchKernelEx with the cluster
	// attributes.
	Launch(f Function, cfg LaunchConfig, params []byte) error

	StreamCreate(flags uint32, priority int32) (Stream, error)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery returns nil when all work is done, ErrNotReady otherwise.
	StreamQuery(s Stream) error
	StreamWaitEvent(s Stream, e Event, flags uint32) error
	// StreamSetAttribute, StreamGetAttribute and StreamCopyAttributes are
	// cuStreamSetAttribute, cuStreamGetAttribute and
	// cuStreamCopyAttributes (StreamAttr* ids).
	StreamSetAttribute(s Stream, attr int, v StreamAttr) error
	StreamGetAttribute(s Stream, attr int) (StreamAttr, error)
	StreamCopyAttributes(dst, src Stream) error

	EventCreate(flags uint32) (Event, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	EventQuery(e Event) error
	EventElapsed(start, end Event) (float32, error)

	// StreamBeginCapture starts capturing s: the work queued on it from
	// now on is recorded into a graph instead of executed (mode is a
	// CaptureMode*). StreamEndCapture ends it and returns the graph;
	// StreamCaptureStatus says whether s is capturing (CaptureStatus*).
	StreamBeginCapture(s Stream, mode int) error
	StreamEndCapture(s Stream) (Graph, error)
	StreamCaptureStatus(s Stream) (int, error)
	// GraphInstantiate makes an executable graph of g (flags:
	// CUgraphInstantiate_flags); GraphLaunch queues it on s.
	GraphInstantiate(g Graph, flags uint64) (GraphExec, error)
	GraphLaunch(e GraphExec, s Stream) error
	GraphExecDestroy(e GraphExec) error
	GraphDestroy(g Graph) error
	// Graphs node by node. GraphCreate makes an empty graph; GraphNodes
	// lists its nodes (roots: only those without dependencies), in the
	// order they were added or captured; GraphNodeType is a node's
	// CUgraphNodeType (GraphNode*). Each GraphAdd*Node adds a node after
	// deps (nodes of g). A kernel node's params are packed as for Launch
	// (cfg.Stream unused); a memcpy node's host memory (GraphCopy) must
	// stay mapped until every graph and executable graph holding it is
	// destroyed, and should be HostRegister'ed memory.
	GraphCreate() (Graph, error)
	GraphNodes(g Graph, roots bool) ([]GraphNode, error)
	GraphNodeType(n GraphNode) (int, error)
	GraphAddKernelNode(g Graph, deps []GraphNode, f Function, cfg LaunchConfig, params []byte) (GraphNode, error)
	GraphAddMemcpyNode(g Graph, deps []GraphNode, cp GraphCopy) (GraphNode, error)
	GraphAddMemsetNode(g Graph, deps []GraphNode, dst Ptr, value uint32, elemSize int, width, height, pitch uint64) (GraphNode, error)
	GraphAddEmptyNode(g Graph, deps []GraphNode) (GraphNode, error)
	// GraphClone copies g (its nodes and edges); GraphDestroyNode removes
	// a node and its edges from its graph; GraphUpload prepares e for
	// launches on s (no visible effect).
	GraphClone(g Graph) (Graph, error)
	GraphDestroyNode(n GraphNode) error
	GraphUpload(e GraphExec, s Stream) error
	// GraphExecUpdate gives e the node parameters of g, a graph of the
	// same shape: result is a CUgraphExecUpdateResult (GraphUpdate*; not
	// GraphUpdateSuccess: e is unchanged) and errNode the node that
	// failed, if any.
	GraphExecUpdate(e GraphExec, g Graph) (result int, errNode GraphNode, err error)
	// Node parameters. GraphKernelNodeParams, GraphMemsetNodeParams and
	// GraphMemcpyNodeParams read a node's (memcpy: 1D copies only, host
	// memory as the device was given it); the Set methods change the node
	// itself when e is 0, else its copy in e (an executable graph
	// instantiated from the node's graph), which changes only e.
	GraphKernelNodeParams(n GraphNode) (KernelNode, error)
	GraphKernelNodeSetParams(e GraphExec, n GraphNode, p KernelNode) error
	GraphMemsetNodeParams(n GraphNode) (MemsetNode, error)
	GraphMemsetNodeSetParams(e GraphExec, n GraphNode, p MemsetNode) error
	GraphMemcpyNodeParams(n GraphNode) (GraphCopy, error)
	GraphMemcpyNodeSetParams(e GraphExec, n GraphNode, cp GraphCopy) error
	// Edges. GraphAddDependencies makes each to[i] depend on from[i];
	// GraphRemoveDependencies removes those edges; GraphEdges lists g's
	// edges (to[i] depends on from[i]); GraphNodeDeps lists the nodes n
	// depends on (dependents: the nodes that depend on n).
	GraphAddDependencies(g Graph, from, to []GraphNode) error
	GraphRemoveDependencies(g Graph, from, to []GraphNode) error
	GraphEdges(g Graph) (from, to []GraphNode, err error)
	GraphNodeDeps(n GraphNode, dependents bool) ([]GraphNode, error)
	// Event and child graph nodes. GraphAddEventNode adds a node that
	// records ev (wait: that waits for it) at each launch;
	// GraphEventNodeEvent reads the event of such a node (wait: a wait
	// node's) and GraphEventNodeSetEvent sets it (e 0: the node itself,
	// else its copy in e). GraphAddChildGraphNode adds a node running a
	// copy of child; GraphChildGraph is that copy (the node's, never to be
	// destroyed on its own); GraphExecChildGraphSetParams gives the node's
	// copy in e the parameters of child, a graph of the copy's shape.
	GraphAddEventNode(g Graph, deps []GraphNode, ev Event, wait bool) (GraphNode, error)
	GraphEventNodeEvent(n GraphNode, wait bool) (Event, error)
	GraphEventNodeSetEvent(e GraphExec, n GraphNode, wait bool, ev Event) error
	GraphAddChildGraphNode(g Graph, deps []GraphNode, child Graph) (GraphNode, error)
	GraphChildGraph(n GraphNode) (Graph, error)
	GraphExecChildGraphSetParams(e GraphExec, n GraphNode, child Graph) error
	// Kernel node attributes (CUkernelNodeAttrID: the StreamAttr* ids but
	// the synchronization policy, and KernelNodeAttrCooperative), their
	// values as a stream attribute's; GraphKernelNodeCopyAttributes gives
	// dst src's.
	GraphKernelNodeSetAttribute(n GraphNode, attr int, v StreamAttr) error
	GraphKernelNodeGetAttribute(n GraphNode, attr int) (StreamAttr, error)
	GraphKernelNodeCopyAttributes(dst, src GraphNode) error
	// GraphNodeFindInClone is the node of clone (a clone of n's graph)
	// copied from n. GraphNodeSetEnabled switches n's copy in e off (a
	// launch skips it) or on; GraphNodeGetEnabled says which (kernel,
	// memcpy and memset nodes).
	GraphNodeFindInClone(n GraphNode, clone Graph) (GraphNode, error)
	GraphNodeSetEnabled(e GraphExec, n GraphNode, enabled bool) error
	GraphNodeGetEnabled(e GraphExec, n GraphNode) (bool, error)

	// LaunchHostFunc enqueues fn on s: when the stream reaches it, fn runs
	// (on a driver thread; it must not call the driver) and the stream
	// waits until fn returns.
	LaunchHostFunc(s Stream, fn func()) error

	// Monitor reads the device's live state (utilization, temperature,
	// power, clocks) as far as the driver can tell; Monitor.Has says which
	// readings are present. It describes the whole physical device.
	Monitor() (Monitor, error)

	SetLimit(limit int, value uint64) error
	GetLimit(limit int) (uint64, error)
	Synchronize() error
	// Reset destroys every resource of the context (cuDevicePrimaryCtxReset).
	// Only an owner of the whole context (a worker process) may call it.
	Reset() error
}

// MonitorFields says which readings of a Monitor are present.
type MonitorFields uint32

// Monitor fields. The values are protocol.Monitor* (the session copies
// them unchanged; a test checks that they agree).
const (
	HasUtilization MonitorFields = 1 << 0 // GPUUtil, MemUtil
	HasTemperature MonitorFields = 1 << 1
	HasPower       MonitorFields = 1 << 2
	HasPowerLimit  MonitorFields = 1 << 3
	HasFan         MonitorFields = 1 << 4
	HasPstate      MonitorFields = 1 << 5
	// HasClock << t: Clocks[t] is present; HasMaxClock << t: MaxClocks[t].
	HasClock    MonitorFields = 1 << 8
	HasMaxClock MonitorFields = 1 << 12
)

// Clock domains of Monitor.Clocks and MaxClocks (nvmlClockType_t).
const (
	ClockGraphics = iota
	ClockSM
	ClockMemory
	ClockVideo
	NumClocks
)

// Monitor is a device's live state (what nvidia-smi shows beside memory).
type Monitor struct {
	Has                  MonitorFields
	GPUUtil, MemUtil     uint32 // percent of the last sample period
	TemperatureC         uint32
	PowerMilliwatts      uint32
	PowerLimitMilliwatts uint32 // enforced limit
	FanPercent           uint32
	Pstate               uint32            // 0 (P0, fastest) to 15
	Clocks, MaxClocks    [NumClocks]uint32 // MHz
}

// KernelExecutor is implemented by contexts that say whether they really
// execute kernels (the gather/scatter copy engine needs one that does; sim
// does not).
type KernelExecutor interface {
	ExecutesKernels() bool
}

// ExecutesKernels reports whether c runs kernels (true unless c says no).
func ExecutesKernels(c Context) bool {
	if k, ok := c.(KernelExecutor); ok {
		return k.ExecutesKernels()
	}
	return true
}

// Result is a CUDA driver error number (CUresult).
type Result int32

// CUresult values used by the backend (cuda.h).
const (
	Success                Result = 0
	ErrInvalidValue        Result = 1
	ErrOutOfMemory         Result = 2
	ErrNotInitialized      Result = 3
	ErrDeinitialized       Result = 4
	ErrDeviceUnavailable   Result = 46
	ErrNoDevice            Result = 100
	ErrInvalidDevice       Result = 101
	ErrInvalidImage        Result = 200
	ErrInvalidContext      Result = 201
	ErrNoBinaryForGPU      Result = 209
	ErrInvalidPTX          Result = 218
	ErrInvalidSource       Result = 300
	ErrFileNotFound        Result = 301
	ErrInvalidHandle       Result = 400
	ErrIllegalState        Result = 401
	ErrNotFound            Result = 500
	ErrNotReady            Result = 600
	ErrIllegalAddress      Result = 700
	ErrLaunchOutOfRes      Result = 701
	ErrContextDestroyed    Result = 709
	ErrAssert              Result = 710
	ErrLaunchFailed        Result = 719
	ErrCooperativeTooLarge Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrHostMemAlreadyReg   Result = 712
	ErrHostMemNotReg       Result = 713
	ErrNotPermitted        Result = 800
	ErrNotSupported        Result = 801
	ErrCaptureUnsupported  Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrCaptureInvalidated  Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrCaptureUnmatched    Result = 903 // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	ErrCaptureImplicit     Result = 906 // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
	ErrInvalidAddressSpace Result = 717
	ErrInvalidClusterSize  Result = 912
	ErrGraphUpdateFailed   Result = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	ErrUnknown             Result = 999
)

var resultNames = map[Result]string{
	Success: "CUDA_SUCCESS", ErrInvalidValue: "CUDA_ERROR_INVALID_VALUE",
	ErrOutOfMemory: "CUDA_ERROR_OUT_OF_MEMORY", ErrNotInitialized: "CUDA_ERROR_NOT_INITIALIZED",
	ErrDeinitialized: "CUDA_ERROR_DEINITIALIZED", ErrNoDevice: "CUDA_ERROR_NO_DEVICE",
	ErrInvalidDevice: "CUDA_ERROR_INVALID_DEVICE", ErrInvalidImage: "CUDA_ERROR_INVALID_IMAGE",
	ErrInvalidContext: "CUDA_ERROR_INVALID_CONTEXT", ErrNoBinaryForGPU: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrInvalidPTX: "CUDA_ERROR_INVALID_PTX", ErrInvalidSource: "CUDA_ERROR_INVALID_SOURCE",
	ErrFileNotFound: "CUDA_ERROR_FILE_NOT_FOUND", ErrInvalidHandle: "CUDA_ERROR_INVALID_HANDLE",
	ErrNotFound: "CUDA_ERROR_NOT_FOUND", ErrNotReady: "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress: "CUDA_ERROR_ILLEGAL_ADDRESS", ErrLaunchOutOfRes: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrContextDestroyed: "CUDA_ERROR_CONTEXT_IS_DESTROYED", ErrAssert: "CUDA_ERROR_ASSERT",
	ErrLaunchFailed: "CUDA_ERROR_LAUNCH_FAILED", ErrHostMemAlreadyReg: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrHostMemNotReg: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", ErrNotPermitted: "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported: "CUDA_ERROR_NOT_SUPPORTED", ErrInvalidAddressSpace: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	ErrDeviceUnavailable: "CUDA_ERROR_DEVICE_UNAVAILABLE", ErrInvalidClusterSize: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
	ErrUnknown:      "CUDA_ERROR_UNKNOWN",
	ErrIllegalState: "CUDA_ERROR_ILLEGAL_STATE", ErrCaptureUnsupported: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", ErrCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrCaptureUnmatched: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", ErrCaptureImplicit: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	ErrGraphUpdateFailed: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
}

func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error is a failed driver call: the call's name and its CUresult.
type Error struct {
	Op     string // the driver call or backend step, e.g. "cuMemAlloc"
	Result Result
	Detail string // optional: what was wrong, what to do
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s: %v: %s", e.Op, e.Result, e.Detail)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Result)
}

// Is lets errors.Is(err, device.ErrNotReady-style sentinels) match by result.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Result == e.Result
}

// Errorf returns an *Error for op with result r and a formatted detail.
func Errorf(op string, r Result, format string, args ...any) error {
	return &Error{Op: op, Result: r, Detail: fmt.Sprintf(format, args...)}
}

// Sentinel errors to test with errors.Is.
var (
	NotReady     error = &Error{Result: ErrNotReady}
	OutOfMemory  error = &Error{Result: ErrOutOfMemory}
	NotSupported error = &Error{Result: ErrNotSupported}
)

// ResultOf returns the CUresult an error carries: the *Error's result, or
// ErrUnknown for any other non-nil error.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var de *Error
	if errors.As(err, &de) {
		return de.Result
	}
	return ErrUnknown
}

// Sticky reports CUresults after which the CUDA context is unusable: every
// later call of the process on that context fails (cuda.h: "the process
// must be terminated and relaunched"). On the H100 (driver 580) such an
// error poisons the whole process, every context of it
// (bench/results/2026-11-25-h100-probe). A cooperative launch too large
// (720) is not one: the driver refuses it before it runs.
func Sticky(r Result) bool {
	switch r {
	case ErrIllegalAddress, 702, ErrAssert, 714, 715, 716, ErrInvalidAddressSpace, 718, ErrLaunchFailed, 721:
		return true
	}
	return false
}

// ErrNoGPU is wrapped by drivers that cannot reach a GPU (no libcuda, cuInit
// failed, no device). "vgpu serve --device auto" falls back to sim on it.
var ErrNoGPU = errors.New("no GPU")

// Launch bookkeeping shared by implementations' stats.

// Stats is a snapshot of a context's counters.
type Stats struct {
	Kind            string
	Ordinal         int
	MemUsed         uint64
	Allocations     int
	Launches        uint64 // launches accepted
	LaunchesSkipped uint64 // sim: validated and recorded but not executed
	LastLaunch      time.Time
}

// StatsReporter is implemented by contexts that keep counters.
type StatsReporter interface {
	Stats() Stats
}
