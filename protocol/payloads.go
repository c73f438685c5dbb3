package protocol

// Payload structs. Each is the fixed part of a request or reply payload;
// a variable tail (inline data, names, parameter blocks, sub-frames) may
// follow it where the opcode table says so. Layout rules, checked by
// TestPayloadLayouts and by the generator: every field naturally aligned,
// padding explicit (fields named Pad*), size a multiple of 8. Handles are
// opaque session-scoped uint64s; device pointers are the host GPU's real
// addresses; Status/Error fields are CUDA driver error numbers (CUresult).

// Empty is the payload of calls with no arguments or results.
type Empty struct{}

// BufKind says where a BufRef's bytes are.
type BufKind uint32

// Buffer kinds (wire values).
const (
	BufNone     BufKind = 0 // no buffer
	BufInline   BufKind = 1 // in this payload's tail, at Offset
	BufSegments BufKind = 2 // the Index-th buffer of the frame's segment list
	BufRegion   BufKind = 3 // at Offset inside registered guest region Region
)

// BufRef names guest memory a call reads or writes.
type BufRef struct {
	Kind   BufKind
	Index  uint32 // BufSegments: buffer ordinal in the segment list
	Region uint64 // BufRegion: id from OpGuestRegister
	Offset uint64 // BufInline: offset in the tail; BufRegion: offset in the region
	Len    uint64 // bytes
}

// Feature bits negotiated by HELLO.
const (
	FeatureBatch      uint64 = 1 << 0 // OpBatch
	FeatureSegments   uint64 = 1 << 1 // guest-physical segments (guest driver present)
	FeatureHostFunc   uint64 = 1 << 2 // host functions (OpHostFuncLaunch + notifications)
	FeatureInline     uint64 = 1 << 3 // inline data (host mode)
	FeatureModuleHash uint64 = 1 << 4 // OpModuleLoad by content hash
	FeatureHostShare  uint64 = 1 << 5 // OpHostShare/OpHostUnshare: host-mode memfds shared over the unix socket
	// FeatureDeviceOutput: the process's device printf and assert output
	// comes as OpNotifyOutput before the reply of each synchronising call
	// (offered where the process's GPU work runs in its own host process).
	FeatureDeviceOutput uint64 = 1 << 6
	// FeatureShmRing: host mode's requests and replies on shared-memory
	// rings (OpRingSetup; see ring.go).
	FeatureShmRing uint64 = 1 << 7
	// FeatureBatchSync: OpBatchSync, queued calls and the synchronous
	// call after them in one frame and one reply.
	FeatureBatchSync uint64 = 1 << 8
)

// Roles of a HELLO sender.
const (
	RoleLibrary uint32 = 1 // the guest CUDA library (or a host-mode client)
	RoleDriver  uint32 = 2 // the guest kernel driver
)

// HelloReq opens a session (OpHello). It may be repeated; each is answered.
type HelloReq struct {
	Major         uint16
	Minor         uint16
	Role          uint32
	Features      uint64
	ClientVersion [32]byte // NUL-padded text
	PID           uint32
	// UID is the opener's effective uid in the guest (the kernel driver's
	// HELLO; 0 from drivers older than the field, which counts as root).
	// The backend believes PID and UID only from a privileged port.
	UID uint32
}

// HelloReply answers OpHello.
type HelloReply struct {
	Major          uint16
	Minor          uint16
	DeviceCount    uint32
	Features       uint64 // accepted features
	BackendVersion [32]byte
	DeviceKind     [16]byte // "cuda" or "sim"
	MaxPayload     uint32
	MaxSegments    uint32
	MaxBatch       uint32 // most calls in one OpBatch
	Pad0           uint32
	SessionID      uint64
}

// BatchReq carries Count sub-frames in its tail, each a complete frame
// without segments at an 8-byte aligned offset (OpBatch).
type BatchReq struct {
	Count uint32
	Pad0  uint32
}

// BatchReply says how far a batch got.
type BatchReply struct {
	Executed        uint32 // calls executed without error
	FailedIndex     uint32 // index of the first failed call (== Count if none)
	FirstError      int32  // its CUresult (0 if none)
	Pad0            uint32
	FailedRequestID uint64
}

// BatchSyncReply answers OpBatchSync: how far its queued calls got, as
// BatchReply says it, and whether its last call ran. When Ran is 1 the tail
// is the last call's own reply frame (header, padded payload), as it would
// have come had the call been sent alone; when Ran is 0 the last call did
// not run (a host function of the session was outstanding once the queued
// calls had run: its completion may be behind this frame) and the library
// sends it again on its own.
type BatchSyncReply struct {
	Executed        uint32 // queued calls executed without error
	FailedIndex     uint32 // index of the first failed queued call (== Count-1 if none)
	FirstError      int32  // its CUresult (0 if none)
	Ran             uint32 // 1: the last call ran and its reply is the tail; 0: it did not
	FailedRequestID uint64
}

// Session options (OpSetOption keys).
const (
	// OptionCopyEngine picks the memcpy engine for this session's copies
	// (benchmarks): one of the Engine* values.
	OptionCopyEngine uint32 = 1
)

// Copy engines (values of OptionCopyEngine).
const (
	EngineAuto    uint64 = 0 // chosen per request by segment layout and size
	EngineRuns    uint64 = 1 // one DMA copy per contiguous run
	EngineGather  uint64 = 2 // gather/scatter kernel over device-mapped guest memory
	EngineStaging uint64 = 3 // CPU copy through a pinned staging buffer
)

// SetOptionReq sets a session option (OpSetOption).
type SetOptionReq struct {
	Key   uint32
	Pad0  uint32
	Value uint64
}

// SessionStats answers OpGetStats: the backend's own view of this session,
// so benchmarks can separate backend time from transport time.
type SessionStats struct {
	Calls       uint64 // requests handled (batch sub-calls included)
	BytesHtoD   uint64 // bytes copied guest -> device
	BytesDtoH   uint64 // bytes copied device -> guest
	NanosHtoD   uint64 // time in HtoD copies, receipt of request to completion
	NanosDtoH   uint64 // time in DtoH copies, receipt of request to completion
	NanosInCall uint64 // time in all handlers (receipt to reply written)
	Launches    uint64 // kernel launches (executed, or validated on sim)
	Emulated    uint64 // launches the sim emulated (never counted as executed)
	// The per-layer trace (vgpu serve --trace or VGPU_TRACE=1; zero
	// otherwise): for the requests traced, the nanoseconds summed per
	// layer, from the first byte of a request to its reply written.
	Traced        uint64 // requests traced (a batch is one)
	NanosRead     uint64 // first header byte to the whole frame read
	NanosQueued   uint64 // frame read to its execution start (waiting behind earlier frames)
	NanosValidate uint64 // execution start to the handler (table checks, validation)
	NanosHandler  uint64 // the handler: argument translation and the device call
	NanosReply    uint64 // handler end to the reply written (or queued behind others)
}

// DeviceReq names a device ordinal (as the guest numbers them).
type DeviceReq struct {
	Device uint32
	Pad0   uint32
}

// DeviceCountReply answers OpDeviceGetCount.
type DeviceCountReply struct {
	Count uint32
	Pad0  uint32
}

// MaxDeviceAttrs is the size of DeviceInfo.Attrs, indexed by CUdevice_attribute.
const MaxDeviceAttrs = 256

// DeviceInfo answers OpDeviceGetInfo: everything the library needs to answer
// device queries locally (cudaGetDeviceProperties for any ABI,
// cudaDeviceGetAttribute, cuDeviceGetName, ...).
type DeviceInfo struct {
	Name     [256]byte
	UUID     [16]byte
	LUID     [8]byte
	TotalMem uint64
	// Attrs[a] is cuDeviceGetAttribute(a); 0 where the driver has none.
	Attrs          [MaxDeviceAttrs]int32
	LUIDNodeMask   uint32
	ComputeMode    uint32
	DriverVersion  int32
	RuntimeVersion int32
}

// VersionReply answers OpDriverGetVersion.
type VersionReply struct {
	Version int32
	Pad0    uint32
}

// MemInfoReply answers OpMemGetInfo (the VM's cap if one is set).
type MemInfoReply struct {
	Free  uint64
	Total uint64
}

// LimitReq sets or gets a CUlimit of a device's context.
type LimitReq struct {
	Device uint32
	Limit  uint32
	Value  uint64
}

// LimitReply answers OpDeviceGetLimit.
type LimitReply struct {
	Value uint64
}

// DriverInfoReply answers OpDriverGetInfo: what NVML's system queries
// report about the driver behind the vGPU.
type DriverInfoReply struct {
	// DriverVersion is the host's NVIDIA driver version as its NVML says
	// it ("580.159.04"); the sim device says "sim". NUL-padded text.
	DriverVersion [32]byte
}

// MaxProcesses is the most ProcessInfo entries one ProcessListReply carries.
const MaxProcesses = 256

// ProcessListReply answers OpDeviceGetProcesses: the guest processes of this
// VM that use the device (one per session: the PID its HELLO named), never
// another VM's. Count ProcessInfo entries follow, sorted by PID; Total is
// how many there are (more than Count when the list was cut at
// MaxProcesses).
type ProcessListReply struct {
	Count uint32
	Total uint32
}

// ProcessInfo is one entry of a ProcessListReply.
type ProcessInfo struct {
	PID  uint32
	Pad0 uint32
	// UsedMemory is the device memory the process holds on the device
	// (its allocations), in bytes.
	UsedMemory uint64
}

// Monitor validity bits (DeviceMonitor.Valid): which readings the host
// could take.
const (
	MonitorUtilization uint32 = 1 << 0 // GPUUtil, MemUtil
	MonitorTemperature uint32 = 1 << 1
	MonitorPower       uint32 = 1 << 2
	MonitorPowerLimit  uint32 = 1 << 3
	MonitorFan         uint32 = 1 << 4
	MonitorPstate      uint32 = 1 << 5
	// MonitorClock << t: Clocks[t]; MonitorMaxClock << t: MaxClocks[t].
	MonitorClock    uint32 = 1 << 8
	MonitorMaxClock uint32 = 1 << 12
)

// MonitorClocks is the number of clock domains a DeviceMonitor reports,
// indexed like nvmlClockType_t: graphics, SM, memory, video.
const MonitorClocks = 4

// DeviceMonitor answers OpDeviceGetMonitor: the physical GPU's live
// readings as the host's NVML gives them. They describe the whole physical
// GPU, which other VMs may share. A field is meaningful only where its bit
// in Valid is set.
type DeviceMonitor struct {
	Valid                uint32
	GPUUtil              uint32 // percent of the last sample period a kernel ran
	MemUtil              uint32 // percent of it device memory was read or written
	TemperatureC         uint32
	PowerMilliwatts      uint32
	PowerLimitMilliwatts uint32 // the enforced power limit
	FanPercent           uint32
	Pstate               uint32                // performance state, 0 (P0) to 15; 32 unknown
	Clocks               [MonitorClocks]uint32 // current, MHz
	MaxClocks            [MonitorClocks]uint32 // maximum, MHz
}

// MemAllocReq allocates device memory (OpMemAlloc).
type MemAllocReq struct {
	Device uint32
	Flags  uint32
	Size   uint64
}

// PtrReq names a device pointer.
type PtrReq struct {
	Ptr uint64
}

// PtrReply returns a device pointer.
type PtrReply struct {
	Ptr uint64
}

// AddressRangeReply answers OpMemGetAddressRange.
type AddressRangeReply struct {
	Base   uint64
	Size   uint64
	Device uint32
	Pad0   uint32
}

// Copy flags.
const (
	CopyAsync uint32 = 1 << 0 // ordered on Stream; the call may return before the copy ends
)

// MemcpyHtoDReq copies guest memory to the device (OpMemcpyHtoD).
type MemcpyHtoDReq struct {
	Dst    uint64
	Stream uint64
	Flags  uint32
	Pad0   uint32
	Src    BufRef
}

// MemcpyDtoHReq copies device memory to guest memory (OpMemcpyDtoH). With
// Dst.Kind == BufInline the bytes come back as the reply's payload.
type MemcpyDtoHReq struct {
	Src    uint64
	Stream uint64
	Flags  uint32
	Pad0   uint32
	Dst    BufRef
}

// MemcpyDtoDReq copies between device ranges (OpMemcpyDtoD).
type MemcpyDtoDReq struct {
	Dst    uint64
	Src    uint64
	Size   uint64
	Stream uint64
	Flags  uint32
	Pad0   uint32
}

// MemsetReq sets Count elements of ElemSize (1, 2 or 4) bytes to Value
// (OpMemset). With Height > 0 it is a 2D memset of Height rows of Count
// elements, Pitch bytes apart.
type MemsetReq struct {
	Dst      uint64
	Count    uint64
	Stream   uint64
	Pitch    uint64
	Height   uint64
	Value    uint32
	ElemSize uint32
	Flags    uint32
	Pad0     uint32
}

// Register flags (OpGuestRegister).
const (
	RegisterMapped   uint32 = 1 << 0 // give it a device address (zero-copy)
	RegisterReadOnly uint32 = 1 << 1
)

// GuestRegisterReq announces long-term pinned guest memory (OpGuestRegister;
// the guest driver sends it with the range's segments).
type GuestRegisterReq struct {
	Flags uint32
	Pad0  uint32
	Size  uint64 // bytes; equals the sum of the segments
}

// GuestRegisterReply answers OpGuestRegister.
type GuestRegisterReply struct {
	Region uint64
	DevPtr uint64 // RegisterMapped: device address of the first byte
}

// HostShareReq shares a memfd with the backend (OpHostShare, host mode
// only): the fd travels beside the frame on the unix socket (SCM_RIGHTS,
// exactly one, in the same sendmsg as the frame's first byte). The backend
// maps [0, Size) of it at the pseudo guest-physical range [Base, Base+Size)
// of the connection's memory, where segments and OpGuestRegister can name
// it as in guest mode. Base and Size are page-aligned, Size > 0, the range
// must not wrap or overlap an existing share; the fd must be a memfd sealed
// against shrinking (F_SEAL_SHRINK) and at least Size bytes long.
type HostShareReq struct {
	Base  uint64
	Size  uint64
	Flags uint64 // none defined: 0
}

// HostUnshareReq ends a share (OpHostUnshare). The backend unmaps it once
// nothing uses it any more (registered regions keep it until unregistered).
type HostUnshareReq struct {
	Base uint64
}

// HandleReq names one handle (module, function, stream, event, region).
type HandleReq struct {
	Handle uint64
}

// HandleReply returns a new handle.
type HandleReply struct {
	Handle uint64
}

// Module image kinds.
const (
	ImageAuto   uint32 = 0 // let the driver tell (cuModuleLoadData)
	ImageFatbin uint32 = 1
	ImageCubin  uint32 = 2
	ImagePTX    uint32 = 3
)

// ModuleLoadReq loads a module (OpModuleLoad). With Image.Kind == BufNone
// only Hash is sent; the host answers CUDA_ERROR_NOT_FOUND if it has not
// seen that image, and the library sends it again with the bytes.
type ModuleLoadReq struct {
	Device uint32
	Kind   uint32
	Flags  uint32
	Pad0   uint32
	Hash   [32]byte // SHA-256 of the image
	Image  BufRef
}

// ModuleLoadReply answers OpModuleLoad.
type ModuleLoadReply struct {
	Module uint64
	Cached uint32 // 1 if the image came from this VM's cache (a load by hash)
	Pad0   uint32
}

// NameReq looks a name up in a module; NameLen bytes of name follow (no NUL).
type NameReq struct {
	Module  uint64
	NameLen uint32
	Pad0    uint32
}

// ParamInfo is one kernel parameter's place in the parameter block.
type ParamInfo struct {
	Offset uint32
	Size   uint32
}

// FunctionReply answers OpModuleGetFunction; NumParams ParamInfo follow.
type FunctionReply struct {
	Func       uint64
	NumParams  uint32
	ParamBytes uint32 // size of the whole parameter block
}

// ModuleFunctionsReq lists a module's kernels (OpModuleListFunctions),
// from the First-th on in the device's order.
type ModuleFunctionsReq struct {
	Module uint64
	First  uint32
	Pad0   uint32
}

// ModuleFunctionsReply answers OpModuleListFunctions: the module has Total
// kernels; Count names follow from First on, each NUL-terminated, at most
// MaxFunctionListBytes of them (ask again from First+Count for more).
type ModuleFunctionsReply struct {
	Total uint32
	Count uint32
}

// MaxFunctionListBytes bounds the names one ModuleFunctionsReply carries.
const MaxFunctionListBytes = 32 << 10

// GlobalReply answers OpModuleGetGlobal.
type GlobalReply struct {
	Ptr  uint64
	Size uint64
}

// MaxFuncAttrs is the size of FuncAttributesReply.Attrs (CUfunction_attribute).
const MaxFuncAttrs = 16

// FuncAttributesReply answers OpFuncGetAttributes.
type FuncAttributesReply struct {
	Attrs [MaxFuncAttrs]int32
}

// FuncSetAttributeReq sets a CUfunction_attribute.
type FuncSetAttributeReq struct {
	Func  uint64
	Attr  uint32
	Value int32
}

// GranularityReq asks cuMemGetAllocationGranularity (OpMemGetGranularity)
// for an allocation on device Device (CUmemAllocationProp with location
// type CU_MEM_LOCATION_TYPE_DEVICE and id Device); the other fields are
// the property's, as cuda.h numbers them.
type GranularityReq struct {
	Device      uint32
	Option      uint32 // CUmemAllocationGranularity_flags: 0 minimum, 1 recommended
	Type        uint32 // CUmemAllocationType: 1 pinned (2 managed, CUDA 13)
	HandleTypes uint32 // CUmemAllocationHandleType bits requested
	Compression uint8  // allocFlags.compressionType
	RDMA        uint8  // allocFlags.gpuDirectRDMACapable
	Usage       uint16 // allocFlags.usage
	Pad0        uint32
}

// GranularityReply answers OpMemGetGranularity.
type GranularityReply struct {
	Granularity uint64
}

// OccupancyReq asks cuOccupancyMaxActiveBlocksPerMultiprocessor(WithFlags).
type OccupancyReq struct {
	Func      uint64
	BlockSize uint32
	Flags     uint32
	DynSmem   uint64
}

// OccupancyReply answers OpOccupancyMaxBlocks.
type OccupancyReply struct {
	NumBlocks int32
	Pad0      uint32
}

// Cluster is a thread-block cluster's shape and how to place it: the
// launch attributes CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (X, Y, Z; all 0
// when the caller gave none, so the kernel's compile-time shape applies)
// and CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE (Policy,
// CUclusterSchedulingPolicy; 0 is the default).
type Cluster struct {
	X, Y, Z uint32
	Policy  uint32
}

// ClusterOccupancyReq asks cuOccupancyMaxActiveClusters for f launched
// with this geometry (OpOccupancyMaxClusters); the reply is an
// OccupancyReply whose NumBlocks is the number of clusters.
type ClusterOccupancyReq struct {
	Func      uint64
	GridX     uint32
	GridY     uint32
	GridZ     uint32
	BlockX    uint32
	BlockY    uint32
	BlockZ    uint32
	SharedMem uint32
	Pad0      uint32
	Cluster   Cluster
}

// MaxParamBytes is the largest kernel parameter block (CUDA 12.1+).
const MaxParamBytes = 32764

// LaunchReq launches a kernel (OpLaunchKernel); ParamSize bytes of the
// parameter block follow, laid out as FunctionReply's ParamInfo says.
type LaunchReq struct {
	Func      uint64
	Stream    uint64
	GridX     uint32
	GridY     uint32
	GridZ     uint32
	BlockX    uint32
	BlockY    uint32
	BlockZ    uint32
	SharedMem uint32
	ParamSize uint32
}

// LaunchExReq launches a kernel in thread-block clusters
// (OpLaunchKernelEx, cuLaunchKernelEx with cluster attributes); the
// parameter block follows as for LaunchReq.
type LaunchExReq struct {
	Launch  LaunchReq
	Cluster Cluster
}

// LaunchAttrs are the launch attributes of cuLaunchKernelEx beside the
// cluster's, and cuLaunchCooperativeKernel's cooperative flag. Has has bit
// 1<<id set for each attribute (CUlaunchAttributeID) the launch gives:
// ACCESS_POLICY_WINDOW 1 (Window), COOPERATIVE 2, SYNCHRONIZATION_POLICY 3,
// PROGRAMMATIC_STREAM_SERIALIZATION 6, PRIORITY 8, MEM_SYNC_DOMAIN_MAP 9
// (default | remote<<8), MEM_SYNC_DOMAIN 10, PREFERRED_SHARED_MEMORY_CARVEOUT
// 14; the fields of the others are 0.
type LaunchAttrs struct {
	Has                       uint32
	Cooperative               uint32
	SyncPolicy                uint32
	ProgrammaticSerialization uint32
	Priority                  int32
	MemSyncDomainMap          uint32
	MemSyncDomain             uint32
	Carveout                  uint32
	Window                    AccessPolicyWindow
}

// LaunchAttrsReq launches a kernel with launch attributes
// (LAUNCH_KERNEL_ATTRS: cuLaunchKernelEx with attributes beside the
// cluster's, cuLaunchCooperativeKernel); Cluster as LaunchExReq's (all 0:
// none). The parameter block follows as for LaunchReq.
type LaunchAttrsReq struct {
	Launch  LaunchReq
	Cluster Cluster
	Attrs   LaunchAttrs
}

// StreamCreateReq creates a stream (OpStreamCreate).
type StreamCreateReq struct {
	Device   uint32
	Flags    uint32
	Priority int32
	Pad0     uint32
}

// AccessPolicyWindow is a CUaccessPolicyWindow: an L2 persistence hint
// over [Base, Base+Bytes). HitRatio is a float32's bits; HitProp and
// MissProp are CUaccessProperty (0 normal, 1 streaming, 2 persisting).
type AccessPolicyWindow struct {
	Base     uint64
	Bytes    uint64
	HitRatio uint32
	HitProp  uint32
	MissProp uint32
	Pad0     uint32
}

// StreamAttrValue is the value of a stream attribute (CUstreamAttrValue):
// Value for the integer ones (SYNCHRONIZATION_POLICY 3, PRIORITY 8 as an
// int32's bits, MEM_SYNC_DOMAIN_MAP 9 as default | remote<<8,
// MEM_SYNC_DOMAIN 10), Window for ACCESS_POLICY_WINDOW 1.
type StreamAttrValue struct {
	Value  uint32
	Pad0   uint32
	Window AccessPolicyWindow
}

// StreamAttrReq sets (STREAM_SET_ATTRIBUTE) or gets (STREAM_GET_ATTRIBUTE,
// a zero value) attribute Attr (CUstreamAttrID) of a stream; Device is the
// device of a default stream.
type StreamAttrReq struct {
	Stream uint64
	Device uint32
	Attr   uint32
	Value  StreamAttrValue
}

// StreamCopyAttrReq copies Src's attributes to Dst (STREAM_COPY_ATTRIBUTES);
// Device is a default stream's device.
type StreamCopyAttrReq struct {
	Dst    uint64
	Src    uint64
	Device uint32
	Pad0   uint32
}

// StreamWaitEventReq makes a stream wait for an event.
type StreamWaitEventReq struct {
	Stream uint64
	Event  uint64
	Flags  uint32
	Pad0   uint32
}

// EventCreateReq creates an event.
type EventCreateReq struct {
	Device uint32
	Flags  uint32
}

// EventRecordReq records an event on a stream.
type EventRecordReq struct {
	Event  uint64
	Stream uint64
	Flags  uint32
	Pad0   uint32
}

// ElapsedTimeReq asks the time between two recorded events.
type ElapsedTimeReq struct {
	Start uint64
	End   uint64
}

// ElapsedTimeReply answers OpEventElapsedTime.
type ElapsedTimeReply struct {
	Milliseconds float32
	Pad0         uint32
}

// HostFuncReq enqueues a guest host function on a stream: the stream waits
// until the guest has run it (OpHostFuncLaunch). The host sends
// OpNotifyHostFunc when the stream reaches it; the guest answers with
// OpHostFuncDone.
type HostFuncReq struct {
	Stream     uint64
	CallbackID uint64
}

// HostFuncDoneReq says a guest host function has finished.
type HostFuncDoneReq struct {
	CallbackID uint64
	Status     int32
	Pad0       uint32
}

// HostFuncNotify asks the guest to run a host function now.
type HostFuncNotify struct {
	CallbackID uint64
	Stream     uint64
}

// Output streams of OutputNotify.
const (
	OutputStdout uint32 = 1
	OutputStderr uint32 = 2
)

// OutputFinal marks the last OutputNotify of one flush (the one before a
// FlagOutput reply).
const OutputFinal uint32 = 1

// OutputNotify carries Len bytes of the process's device output (printf,
// assert messages) for its Stream (OutputStdout, OutputStderr), in the
// tail; the guest library writes them to its own stdout or stderr. A flush
// may be split over several frames. A flush that precedes a reply carries
// that reply's request id in its frames' headers, its last frame has
// OutputFinal, and the reply has FlagOutput; a flush before a host function
// runs has request id 0 and no OutputFinal.
type OutputNotify struct {
	Stream uint32
	Flags  uint32
	Len    uint32
	Pad0   uint32
}

// MaxOutputChunk is the most output bytes one OutputNotify carries (so a
// frame fits the guest driver's 4 KiB notification buffer).
const MaxOutputChunk = 4096 - HeaderSize - 16

// ErrorNotify reports a deferred error of an asynchronous call.
type ErrorNotify struct {
	RequestID uint64
	Error     int32
	Opcode    uint16
	Pad0      uint16
}

// BeginCaptureReq starts capturing a stream (STREAM_BEGIN_CAPTURE).
type BeginCaptureReq struct {
	Stream uint64
	Mode   uint32 // CUstreamCaptureMode: 0 global, 1 thread-local, 2 relaxed
	Pad0   uint32
}

// CaptureStatusReply says whether a stream is capturing
// (STREAM_IS_CAPTURING): a CUstreamCaptureStatus, 0 none, 1 active,
// 2 invalidated.
type CaptureStatusReply struct {
	Status uint32
	Pad0   uint32
}

// GraphInstantiateReq instantiates a graph (GRAPH_INSTANTIATE).
type GraphInstantiateReq struct {
	Graph uint64
	Flags uint64 // CUgraphInstantiate_flags
}

// GraphLaunchReq launches an instantiated graph on a stream (GRAPH_LAUNCH).
type GraphLaunchReq struct {
	Exec   uint64
	Stream uint64
}

// GraphCreateReq makes an empty graph on a device (GRAPH_CREATE:
// cuGraphCreate; Flags must be 0, as cuda.h defines none).
type GraphCreateReq struct {
	Device uint32
	Flags  uint32
}

// GraphNodesReq lists a graph's nodes (GRAPH_GET_NODES: cuGraphGetNodes,
// or its root nodes, cuGraphGetRootNodes, when Roots is 1), from node
// First on.
type GraphNodesReq struct {
	Graph uint64
	Roots uint32
	First uint32
}

// GraphNodesReply answers GRAPH_GET_NODES: the graph has Total nodes (of
// the kind asked); Count node handles (uint64 each) follow from First on,
// at most MaxGraphNodeList of them (ask again from First+Count for more).
type GraphNodesReply struct {
	Total uint32
	Count uint32
}

// MaxGraphNodeList bounds the node handles one GraphNodesReply carries.
const MaxGraphNodeList = 4096

// GraphNodeTypeReply answers GRAPH_NODE_GET_TYPE: a CUgraphNodeType
// (0 kernel, 1 memcpy, 2 memset, 3 host, 4 child graph, 5 empty, 6 wait
// event, 7 event record, ...).
type GraphNodeTypeReply struct {
	Type uint32
	Pad0 uint32
}

// MaxGraphDeps bounds the dependencies of one added node.
const MaxGraphDeps = 1024

// GraphAddKernelNodeReq adds a kernel node (GRAPH_ADD_KERNEL_NODE:
// cuGraphAddKernelNode). The tail holds NumDeps node handles (uint64
// each), then the packed parameter block of Launch.ParamSize bytes, laid
// out as for LAUNCH_KERNEL; Launch.Stream is unused (0).
type GraphAddKernelNodeReq struct {
	Graph   uint64
	NumDeps uint32
	Pad0    uint32
	Launch  LaunchReq
}

// Directions of a graph memcpy node (GraphAddMemcpyNodeReq.Dir).
const (
	GraphCopyHtoD uint32 = 1 // Host (a registered region) to Dst
	GraphCopyDtoH uint32 = 2 // Src to Host (a registered region)
	GraphCopyDtoD uint32 = 3 // Src to Dst, Size bytes
)

// GraphAddMemcpyNodeReq adds a 1D memcpy node (GRAPH_ADD_MEMCPY_NODE:
// cuGraphAddMemcpyNode). Host memory must be pinned: Host is a BufRegion
// (a registration's id, offset and length) for GraphCopyHtoD and
// GraphCopyDtoH, and its Len is the copy's size; GraphCopyDtoD uses Size.
// The tail holds NumDeps node handles.
type GraphAddMemcpyNodeReq struct {
	Graph   uint64
	NumDeps uint32
	Dir     uint32
	Dst     uint64
	Src     uint64
	Size    uint64
	Host    BufRef
}

// Params are the node's copy.
func (r *GraphAddMemcpyNodeReq) Params() *GraphMemcpyParams {
	return &GraphMemcpyParams{Dir: r.Dir, Dst: r.Dst, Src: r.Src, Size: r.Size, Host: r.Host}
}

// GraphAddMemsetNodeReq adds a memset node (GRAPH_ADD_MEMSET_NODE:
// cuGraphAddMemsetNode): Height rows (0 or 1: one) of Width elements of
// ElemSize bytes, Pitch bytes apart. The tail holds NumDeps node handles.
type GraphAddMemsetNodeReq struct {
	Graph    uint64
	NumDeps  uint32
	ElemSize uint32
	Dst      uint64
	Value    uint32
	Pad0     uint32
	Width    uint64
	Height   uint64
	Pitch    uint64
}

// GraphAddEmptyNodeReq adds an empty node (GRAPH_ADD_EMPTY_NODE:
// cuGraphAddEmptyNode). The tail holds NumDeps node handles.
type GraphAddEmptyNodeReq struct {
	Graph   uint64
	NumDeps uint32
	Pad0    uint32
}

// GraphKernelNodeSetReq sets a kernel node's launch (GRAPH_KERNEL_NODE_SET_PARAMS:
// cuGraphKernelNodeSetParams when Exec is 0; cuGraphExecKernelNodeSetParams,
// the node's copy in executable graph Exec, else). The tail is the packed
// parameter block of Launch.ParamSize bytes, as for LAUNCH_KERNEL;
// Launch.Stream is unused (0). GRAPH_KERNEL_NODE_GET_PARAMS answers a
// LaunchReq (Stream 0) and the block in the reply's tail.
type GraphKernelNodeSetReq struct {
	Node   uint64
	Exec   uint64
	Launch LaunchReq
}

// GraphMemsetParams are a memset node's parameters: Height rows (0 or 1:
// one) of Width elements of ElemSize bytes, Pitch bytes apart, set to
// Value (GRAPH_MEMSET_NODE_GET_PARAMS answers them).
type GraphMemsetParams struct {
	Dst      uint64
	Value    uint32
	ElemSize uint32
	Width    uint64
	Height   uint64
	Pitch    uint64
}

// GraphMemsetNodeSetReq sets a memset node's parameters
// (GRAPH_MEMSET_NODE_SET_PARAMS: cuGraphMemsetNodeSetParams when Exec is
// 0, cuGraphExecMemsetNodeSetParams else).
type GraphMemsetNodeSetReq struct {
	Node   uint64
	Exec   uint64
	Params GraphMemsetParams
}

// GraphMemcpyParams are a 1D memcpy node's parameters, as in
// GraphAddMemcpyNodeReq: Dir, Dst and Src, Size for GraphCopyDtoD, and
// Host (a registered region; its Len the copy's size) for the others
// (GRAPH_MEMCPY_NODE_GET_PARAMS answers them).
type GraphMemcpyParams struct {
	Dir  uint32
	Pad0 uint32
	Dst  uint64
	Src  uint64
	Size uint64
	Host BufRef
}

// GraphMemcpyNodeSetReq sets a memcpy node's parameters
// (GRAPH_MEMCPY_NODE_SET_PARAMS: cuGraphMemcpyNodeSetParams when Exec is
// 0, cuGraphExecMemcpyNodeSetParams else).
type GraphMemcpyNodeSetReq struct {
	Node   uint64
	Exec   uint64
	Params GraphMemcpyParams
}

// GraphEdgesReq adds (GRAPH_ADD_DEPENDENCIES: cuGraphAddDependencies) or
// removes (GRAPH_REMOVE_DEPENDENCIES: cuGraphRemoveDependencies) Count
// edges of Graph, at most MaxGraphEdges; the tail holds Count (from, to)
// pairs of node handles (uint64 each): to depends on from.
type GraphEdgesReq struct {
	Graph uint64
	Count uint32
	Pad0  uint32
}

// MaxGraphEdges bounds the edges one GraphEdgesReq adds or removes.
const MaxGraphEdges = 1024

// GraphGetEdgesReq lists a graph's edges from edge First on
// (GRAPH_GET_EDGES: cuGraphGetEdges). The reply is a GraphNodesReply
// (Total edges, Count of them here) and Count (from, to) pairs of node
// handles, at most MaxGraphNodeList/2 of them.
type GraphGetEdgesReq struct {
	Graph uint64
	First uint32
	Pad0  uint32
}

// GraphNodeDepsReq lists a node's dependencies (Dependents 0:
// cuGraphNodeGetDependencies) or the nodes that depend on it
// (Dependents 1: cuGraphNodeGetDependentNodes) from First on
// (GRAPH_NODE_GET_DEPENDENCIES); the reply is a GraphNodesReply and its
// node handles.
type GraphNodeDepsReq struct {
	Node       uint64
	Dependents uint32
	First      uint32
}

// GraphExecFlagsReply answers GRAPH_EXEC_GET_FLAGS: the
// CUgraphInstantiate_flags the executable graph was instantiated with.
type GraphExecFlagsReply struct {
	Flags uint64
}

// GraphAddEventNodeReq adds an event record node (GRAPH_ADD_EVENT_NODE:
// cuGraphAddEventRecordNode, Wait 0) or an event wait node
// (cuGraphAddEventWaitNode, Wait 1) of Event. The tail holds NumDeps node
// handles.
type GraphAddEventNodeReq struct {
	Graph   uint64
	NumDeps uint32
	Wait    uint32
	Event   uint64
}

// GraphEventNodeReq reads (GRAPH_EVENT_NODE_GET_EVENT: Exec and Event 0;
// the reply is a HandleReply) or sets (GRAPH_EVENT_NODE_SET_EVENT) the
// event of an event record (Wait 0) or wait (Wait 1) node: on the graph's
// node when Exec is 0, on its copy in executable graph Exec else.
type GraphEventNodeReq struct {
	Node  uint64
	Exec  uint64
	Event uint64
	Wait  uint32
	Pad0  uint32
}

// GraphAddChildNodeReq adds a child graph node holding a copy of graph
// Child (GRAPH_ADD_CHILD_NODE: cuGraphAddChildGraphNode). The tail holds
// NumDeps node handles.
type GraphAddChildNodeReq struct {
	Graph   uint64
	NumDeps uint32
	Pad0    uint32
	Child   uint64
}

// GraphExecChildSetReq gives the copy of child graph node Node in
// executable graph Exec the node parameters of graph Child, of the same
// shape (GRAPH_EXEC_CHILD_NODE_SET_PARAMS: cuGraphExecChildGraphNodeSetParams).
type GraphExecChildSetReq struct {
	Exec  uint64
	Node  uint64
	Child uint64
}

// GraphKernelNodeAttrReq sets (GRAPH_KERNEL_NODE_SET_ATTRIBUTE) or gets
// (GRAPH_KERNEL_NODE_GET_ATTRIBUTE, a zero value; the reply is a
// StreamAttrValue) attribute Attr of a kernel node (CUkernelNodeAttrID:
// ACCESS_POLICY_WINDOW 1, COOPERATIVE 2, PRIORITY 8, MEM_SYNC_DOMAIN_MAP
// 9, MEM_SYNC_DOMAIN 10), its value laid out as a stream attribute's
// (COOPERATIVE: Value 0 or 1).
type GraphKernelNodeAttrReq struct {
	Node  uint64
	Attr  uint32
	Pad0  uint32
	Value StreamAttrValue
}

// GraphNodePairReq names two nodes: GRAPH_KERNEL_NODE_COPY_ATTRIBUTES
// gives kernel node Dst the attributes of kernel node Src.
type GraphNodePairReq struct {
	Dst uint64
	Src uint64
}

// GraphNodeFindReq asks for the node of graph Clone, a clone of Node's
// graph, that was copied from Node (GRAPH_NODE_FIND_IN_CLONE:
// cuGraphNodeFindInClone; the reply is a HandleReply).
type GraphNodeFindReq struct {
	Node  uint64
	Clone uint64
}

// GraphNodeEnabledReq enables or disables (GRAPH_NODE_SET_ENABLED:
// cuGraphNodeSetEnabled, Enabled 1 or 0) the copy of Node in executable
// graph Exec, or asks whether it is enabled (GRAPH_NODE_GET_ENABLED:
// cuGraphNodeGetEnabled, Enabled 0; the reply is a GraphNodeEnabledReply).
type GraphNodeEnabledReq struct {
	Exec    uint64
	Node    uint64
	Enabled uint32
	Pad0    uint32
}

// GraphNodeEnabledReply answers GRAPH_NODE_GET_ENABLED: 1 enabled, 0 not.
type GraphNodeEnabledReply struct {
	Enabled uint32
	Pad0    uint32
}

// GraphExecUpdateReq gives an executable graph the node parameters of a
// graph of the same shape (GRAPH_EXEC_UPDATE: cuGraphExecUpdate).
type GraphExecUpdateReq struct {
	Exec  uint64
	Graph uint64
}

// GraphExecUpdateReply answers GRAPH_EXEC_UPDATE: Result is a
// CUgraphExecUpdateResult (0 success; else the executable graph is
// unchanged and the guest answers CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE),
// ErrorNode the graph's node that failed (0: none named).
type GraphExecUpdateReply struct {
	Result    uint32
	Pad0      uint32
	ErrorNode uint64
}

// MemAllocAsyncReq allocates device memory in stream order
// (MEM_ALLOC_ASYNC: cuMemAllocAsync, from the device's default pool).
type MemAllocAsyncReq struct {
	Device uint32
	Flags  uint32 // none defined
	Size   uint64
	Stream uint64
}

// MemFreeAsyncReq frees an allocation in stream order (MEM_FREE_ASYNC).
type MemFreeAsyncReq struct {
	Ptr    uint64
	Stream uint64
}

// Memory pools (cuMemPoolCreate, cuMemPoolSetAttribute, ...). A pool is
// named by Pool, a handle MEMPOOL_CREATE gave the session, or by Pool 0
// and Device: that device's default pool. Device is the pool's device in
// either case.

// MemPoolCreateReq creates a memory pool on device Device
// (MEMPOOL_CREATE): the fields of a CUmemPoolProps of location type
// device.
type MemPoolCreateReq struct {
	Device      uint32
	Type        uint32 // CUmemAllocationType: 1 pinned
	HandleTypes uint32 // CUmemAllocationHandleType bits: none served
	Usage       uint16 // CUmemPoolProps.usage: 0
	Pad0        uint16
	MaxSize     uint64 // the pool's most bytes; 0: the driver's default
}

// MemPoolAttrReq sets or gets attribute Attr (CUmemPool_attribute) of a
// pool (MEMPOOL_SET_ATTRIBUTE, MEMPOOL_GET_ATTRIBUTE): Value is the new
// value (an int attribute's in the low 32 bits); a get sends 0.
type MemPoolAttrReq struct {
	Pool   uint64
	Device uint32
	Attr   uint32
	Value  uint64
}

// ValueReply is one 64-bit value (MEMPOOL_GET_ATTRIBUTE).
type ValueReply struct {
	Value uint64
}

// MemPoolTrimReq releases a pool's unused memory down to Keep bytes
// (MEMPOOL_TRIM_TO).
type MemPoolTrimReq struct {
	Pool   uint64
	Device uint32
	Pad0   uint32
	Keep   uint64
}

// MemPoolAccessReq sets (MEMPOOL_SET_ACCESS) or gets (MEMPOOL_GET_ACCESS,
// Flags 0) device Peer's access to a pool's memory: CUmemAccess_flags,
// 3 read-write.
type MemPoolAccessReq struct {
	Pool   uint64
	Device uint32
	Peer   uint32
	Flags  uint32
	Pad0   uint32
}

// AccessReply is a CUmemAccess_flags (MEMPOOL_GET_ACCESS).
type AccessReply struct {
	Flags uint32
	Pad0  uint32
}

// MemAllocFromPoolReq allocates device memory from pool Pool (never 0: the
// default pool's allocations are MEM_ALLOC_ASYNC's) in stream order
// (MEM_ALLOC_FROM_POOL).
type MemAllocFromPoolReq struct {
	Pool   uint64
	Stream uint64
	Size   uint64
}

// The virtual-memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess): device memory the guest maps into address ranges it
// reserved.

// MemReserveReq reserves a device virtual address range
// (MEM_ADDRESS_RESERVE) through device Device's context.
type MemReserveReq struct {
	Device    uint32
	Pad0      uint32
	Size      uint64
	Alignment uint64 // 0: the allocation granularity
	Flags     uint64 // none defined
}

// MemRangeReq names [Ptr, Ptr+Size) (MEM_ADDRESS_FREE, MEM_UNMAP).
type MemRangeReq struct {
	Ptr  uint64
	Size uint64
}

// MemCreateReq creates physical memory on device Device (MEM_CREATE):
// the fields of a CUmemAllocationProp of location type device.
type MemCreateReq struct {
	Device      uint32
	Type        uint32 // CUmemAllocationType: 1 pinned
	HandleTypes uint32 // CUmemAllocationHandleType bits: none served
	Compression uint8
	RDMA        uint8
	Usage       uint16
	Size        uint64
	Flags       uint64 // none defined
}

// MemMapReq maps [Offset, Offset+Size) of physical memory Handle at Ptr,
// inside a reserved range (MEM_MAP).
type MemMapReq struct {
	Ptr    uint64
	Size   uint64
	Offset uint64
	Handle uint64
}

// MemSetAccessReq sets device Device's access to [Ptr, Ptr+Size), which
// must be mapped (MEM_SET_ACCESS): CUmemAccess_flags, 3 read-write (the
// one served; 0 none and 1 read-only are not).
type MemSetAccessReq struct {
	Ptr    uint64
	Size   uint64
	Device uint32
	Flags  uint32
}

// CUDA arrays (cuArrayCreate, cuArray3DCreate, cuMemcpy3D): opaque,
// driver-laid-out device memory of Width x Height x Depth elements of
// Channels channels of Format (CUarray_format). Height 0 is a 1D array,
// Depth 0 a 1D or 2D one, as in CUDA_ARRAY3D_DESCRIPTOR.

// ArrayCreateReq creates an array on device Device (ARRAY_CREATE): the
// fields of a CUDA_ARRAY3D_DESCRIPTOR.
type ArrayCreateReq struct {
	Device   uint32
	Format   uint32 // CUarray_format: 0x01 u8 ... 0x20 f32
	Channels uint32 // 1, 2 or 4
	Flags    uint32 // CUDA_ARRAY3D_* flags: LAYERED 1, SURFACE_LDST 2, TEXTURE_GATHER 8
	Width    uint64
	Height   uint64
	Depth    uint64
}

// ArrayDescReply is an array's descriptor (ARRAY_GET_DESCRIPTOR), as it
// was created.
type ArrayDescReply struct {
	Width    uint64
	Height   uint64
	Depth    uint64
	Format   uint32
	Channels uint32
	Flags    uint32
	Pad0     uint32
}

// CopySide is one side of a 3D copy: the array Array when it is not 0,
// else linear device memory at Ptr laid out in rows of Pitch bytes and
// slices of Height rows. X is in bytes, Y in rows, Z in slices.
type CopySide struct {
	Ptr    uint64
	Array  uint64
	X      uint64
	Y      uint64
	Z      uint64
	Pitch  uint64
	Height uint64
}

// BoxCopyReq copies a box of Width bytes x Height rows x Depth slices
// between device memory and arrays, or between arrays (MEMCPY_3D). Host
// sides are not sent here: the library stages them through device memory
// with MEMCPY_HTOD and MEMCPY_DTOH, the copies that read guest memory.
type BoxCopyReq struct {
	Src    CopySide
	Dst    CopySide
	Width  uint64
	Height uint64
	Depth  uint64
	Stream uint64
	Flags  uint32 // CopyAsync
	Pad0   uint32
}

// Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate).
// The object's value is the driver's (kernels take it by value), and the
// session answers only for objects it created.

// Resource types (CUresourcetype) served: arrays, linear and pitched
// memory (mipmapped arrays are not).
const (
	ResourceArray   uint32 = 0
	ResourceMipmap  uint32 = 1
	ResourceLinear  uint32 = 2
	ResourcePitch2D uint32 = 3
)

// ResourceDesc is a CUDA_RESOURCE_DESC with the guest's handles: Array for
// an array, else device memory at Ptr of Format x Channels elements, Width
// bytes long (linear) or Width x Height elements in rows Pitch bytes apart
// (pitch2D).
type ResourceDesc struct {
	Type     uint32
	Flags    uint32 // must be 0
	Array    uint64
	Ptr      uint64
	Format   uint32
	Channels uint32
	Width    uint64
	Height   uint64
	Pitch    uint64
}

// TextureDesc is a CUDA_TEXTURE_DESC; the float fields travel as their
// IEEE-754 bits.
type TextureDesc struct {
	AddressMode0   uint32 // CUaddress_mode: 0 wrap, 1 clamp, 2 mirror, 3 border
	AddressMode1   uint32
	AddressMode2   uint32
	Filter         uint32 // CUfilter_mode: 0 point, 1 linear
	Flags          uint32 // CU_TRSF_*
	MaxAnisotropy  uint32
	MipmapFilter   uint32
	MipmapBias     uint32
	MinMipmapClamp uint32
	MaxMipmapClamp uint32
	Border0        uint32
	Border1        uint32
	Border2        uint32
	Border3        uint32
	Pad0           uint32
	Pad1           uint32
}

// ViewDesc is a CUDA_RESOURCE_VIEW_DESC.
type ViewDesc struct {
	Format     uint32 // CUresourceViewFormat
	FirstMip   uint32
	LastMip    uint32
	FirstLayer uint32
	LastLayer  uint32
	Pad0       uint32
	Width      uint64
	Height     uint64
	Depth      uint64
}

// TexObjectCreateReq creates a texture object (TEX_OBJECT_CREATE); View
// applies when HasView is 1.
type TexObjectCreateReq struct {
	Res     ResourceDesc
	Tex     TextureDesc
	View    ViewDesc
	HasView uint32
	Pad0    uint32
}

// ViewReply is a texture object's view (TEX_OBJECT_GET_VIEW_DESC): HasView
// 0 when it was created without one.
type ViewReply struct {
	View    ViewDesc
	HasView uint32
	Pad0    uint32
}
