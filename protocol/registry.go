package protocol

// Ops is the call registry: one row per opcode, the one place a call is
// defined. Every other layer is generated from it or checked against it:
//
//   - the Op constants (opcodes_gen.go) and the C header's VGPU_OP_* and
//     payload structs (vgpu_protocol.h);
//   - the message reference, docs/PROTOCOL.md;
//   - the backend's dispatch table, backend/session/dispatch_gen.go
//     (opcode → handler and validator);
//   - a golden request (and reply) frame per row, testdata/golden/ops/,
//     checked from Go and from C (protocol/ctest).
//
// `go generate ./protocol/...` (or `make generate`) rewrites them all;
// TestGeneratedNotStale fails when they differ from this table. Tests beside
// the backend check that every row's device method exists on every device
// (sim and cuda) and that its symbols are served by the guest library.
//
// To add a call: docs/ADDING_A_CALL.md. In short: pick the next free number
// in its area (numbers are wire values: never reused, never renumbered), add
// its payload structs to payloads.go, add a row here, write its handler and
// validator in backend/session and its device methods, run go generate.
var Ops = []OpInfo{
	// Session (0x00): the connection itself; no device.
	{Op: 0x0001, Name: "HELLO", Req: HelloReq{Major: uint16(Major), Role: RoleLibrary, PID: 1}, Reply: HelloReply{Major: uint16(Major), DeviceCount: 1}, Shape: ShapeSync,
		Symbols: []string{"cuInit", "nvmlInit_v2"}, NoDevice: "the session's handshake: versions and features",
		Handler: "reply(hello)", Unchecked: "role, version and pid are only logged; features are masked with what the backend offers"},
	{Op: 0x0002, Name: "GOODBYE", Req: Empty{}, Reply: Empty{}, Shape: ShapeSync,
		NoDevice: "ends the session (sent by the library at exit)",
		Handler:  "do(noop)", Unchecked: "empty"},
	{Op: 0x0003, Name: "SEGMENTS", Req: Empty{}, Reply: Empty{}, Shape: ShapeSync, Segments: true,
		NoDevice: "continues the segment list of the call before it (the guest kernel driver sends it)",
		Handler:  "do(strayContinuation)", Unchecked: "empty; its segments are checked when the call they continue runs"},
	{Op: 0x0004, Name: "BATCH", Req: BatchReq{Count: 1}, ReqTail: TailBytes, Reply: BatchReply{}, Shape: ShapeSync,
		NoDevice: "carries asynchronous calls, each dispatched through its own row",
		Handler:  "batch", Check: "checkBatch"},
	{Op: 0x0005, Name: "PING", Req: Empty{}, Reply: Empty{}, Shape: ShapeSync,
		NoDevice: "a round trip and nothing else",
		Handler:  "do(noop)", Unchecked: "empty"},
	{Op: 0x0006, Name: "SET_OPTION", Req: SetOptionReq{Key: OptionCopyEngine}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"vgpuSetOption"}, NoDevice: "a setting of the session (the copy engine)",
		Handler: "do(setOption)", Check: "checkSetOption"},
	{Op: 0x0007, Name: "GET_STATS", Req: Empty{}, Reply: SessionStats{}, Shape: ShapeSync,
		Symbols: []string{"vgpuGetStats"}, NoDevice: "the session's own counters",
		Handler: "reply(getStats)", Unchecked: "empty"},

	// Device (0x01): devices, the driver, limits, NVML's readings.
	{Op: 0x0101, Name: "DEVICE_GET_COUNT", Req: Empty{}, Reply: DeviceCountReply{Count: 1}, Shape: ShapeSync,
		Symbols: []string{"cuDeviceGetCount", "nvmlDeviceGetCount_v2"}, NoDevice: "the number of devices the session was given",
		Handler: "reply(deviceGetCount)", Unchecked: "empty"},
	{Op: 0x0102, Name: "DEVICE_GET_INFO", Req: DeviceReq{}, Reply: DeviceInfo{}, Shape: ShapeSync,
		Symbols: []string{"cuDeviceGetAttribute", "cuDeviceGetName", "cuDeviceGetUuid_v2", "cuDeviceTotalMem_v2", "cuDeviceGetPCIBusId", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3"},
		Device:  "Properties", Handler: "reply(deviceGetInfo)", Check: "checkDeviceReq"},
	{Op: 0x0103, Name: "DRIVER_GET_VERSION", Req: Empty{}, Reply: VersionReply{Version: 12080}, Shape: ShapeSync,
		Symbols: []string{"cuDriverGetVersion", "nvmlSystemGetCudaDriverVersion_v2"}, NoDevice: "the driver's version, read once when the backend starts",
		Handler: "reply(driverGetVersion)", Unchecked: "empty"},
	{Op: 0x0104, Name: "DEVICE_SYNCHRONIZE", Req: DeviceReq{}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuCtxSynchronize"}, Device: "Synchronize",
		Handler: "do(deviceSynchronize)", Check: "checkDeviceReq"},
	{Op: 0x0105, Name: "DEVICE_RESET", Req: DeviceReq{}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuDevicePrimaryCtxReset_v2"}, Device: "Reset",
		Handler: "do(deviceReset)", Check: "checkDeviceReq"},
	{Op: 0x0106, Name: "MEM_GET_INFO", Req: DeviceReq{}, Reply: MemInfoReply{}, Shape: ShapeSync,
		Symbols: []string{"cuMemGetInfo_v2", "nvmlDeviceGetMemoryInfo"}, Device: "MemGetInfo",
		Handler: "reply(memGetInfo)", Check: "checkDeviceReq"},
	{Op: 0x0107, Name: "DEVICE_SET_LIMIT", Req: LimitReq{Value: 1024}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuCtxSetLimit"}, Device: "SetLimit",
		Handler: "do(deviceSetLimit)", Check: "checkSetLimit"},
	{Op: 0x0108, Name: "DEVICE_GET_LIMIT", Req: LimitReq{}, Reply: LimitReply{Value: 1024}, Shape: ShapeSync,
		Symbols: []string{"cuCtxGetLimit"}, Device: "GetLimit",
		Handler: "reply(deviceGetLimit)", Check: "checkGetLimit"},
	{Op: 0x0109, Name: "DRIVER_GET_INFO", Req: Empty{}, Reply: DriverInfoReply{}, Shape: ShapeSync,
		Symbols: []string{"nvmlSystemGetDriverVersion"}, NoDevice: "the driver's release, read once when the backend starts",
		Handler: "reply(driverGetInfo)", Unchecked: "empty"},
	{Op: 0x010a, Name: "DEVICE_GET_PROCESSES", Req: DeviceReq{}, Reply: ProcessListReply{}, ReplyTail: TailBytes, Shape: ShapeSync,
		Symbols:  []string{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses"},
		NoDevice: "the VM's own processes, from the backend's workers (never the host's)",
		Handler:  "do(deviceGetProcesses)", Check: "checkDeviceReq"},
	{Op: 0x010b, Name: "DEVICE_GET_MONITOR", Req: DeviceReq{}, Reply: DeviceMonitor{}, Shape: ShapeSync,
		Symbols: []string{"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo", "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState"},
		Device:  "Monitor", Handler: "reply(deviceGetMonitor)", Check: "checkDeviceReq"},

	// Memory (0x02).
	{Op: 0x0201, Name: "MEM_ALLOC", Req: MemAllocReq{Size: 1 << 20}, Reply: PtrReply{Ptr: 0x7f0000000000}, Shape: ShapeSync,
		Symbols: []string{"cuMemAlloc_v2", "cuMemAllocPitch_v2"}, Device: "MemAlloc",
		Handler: "reply(memAlloc)", Check: "checkMemAlloc"},
	{Op: 0x0202, Name: "MEM_FREE", Req: PtrReq{Ptr: 0x7f0000000000}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuMemFree_v2"}, Device: "MemFree",
		Handler: "do(memFree)", Unchecked: "a pointer: the handler checks it is one of the session's allocations"},
	{Op: 0x0203, Name: "MEMCPY_HTOD", Go: "MemcpyHtoD", Req: MemcpyHtoDReq{Dst: 0x7f0000000000, Src: BufRef{Kind: BufInline}}, ReqTail: TailBytes, Reply: Empty{}, Shape: ShapeAsync, Segments: true,
		Symbols: []string{"cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpy", "cuMemcpyAsync", "cuMemcpy2D_v2", "cuMemcpy2DAsync_v2"}, Device: "MemcpyHtoD",
		Handler: "do(memcpyHtoD)", Check: "checkHtoD"},
	{Op: 0x0204, Name: "MEMCPY_DTOH", Go: "MemcpyDtoH", Req: MemcpyDtoHReq{Src: 0x7f0000000000, Dst: BufRef{Kind: BufInline}}, Reply: Empty{}, ReplyTail: TailBytes, Shape: ShapeAsync, Segments: true,
		Symbols: []string{"cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpy", "cuMemcpyAsync", "cuMemcpy2D_v2", "cuMemcpy2DAsync_v2"}, Device: "MemcpyDtoH",
		Handler: "do(memcpyDtoH)", Check: "checkDtoH"},
	{Op: 0x0205, Name: "MEMCPY_DTOD", Go: "MemcpyDtoD", Req: MemcpyDtoDReq{Dst: 0x7f0000001000, Src: 0x7f0000000000, Size: 4096}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuMemcpyDtoD_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpy", "cuMemcpyAsync"}, Device: "MemcpyDtoD",
		Handler: "do(memcpyDtoD)", Check: "checkDtoD"},
	{Op: 0x0206, Name: "MEMSET", Req: MemsetReq{Dst: 0x7f0000000000, Count: 64, ElemSize: 1}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuMemsetD8_v2", "cuMemsetD16_v2", "cuMemsetD32_v2", "cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async", "cuMemsetD2D8_v2", "cuMemsetD2D16_v2", "cuMemsetD2D32_v2", "cuMemsetD2D8Async", "cuMemsetD2D16Async", "cuMemsetD2D32Async"},
		Device:  "Memset", Handler: "do(memset)", Check: "checkMemset"},
	{Op: 0x0207, Name: "GUEST_REGISTER", Req: GuestRegisterReq{Flags: RegisterMapped, Size: 4096}, Reply: GuestRegisterReply{}, Shape: ShapeSync, Segments: true,
		Symbols: []string{"cuMemHostRegister_v2", "cuMemHostAlloc", "cuMemAllocHost_v2"}, Device: "HostRegister",
		Handler: "reply(guestRegister)", Check: "checkGuestRegister"},
	{Op: 0x0208, Name: "GUEST_UNREGISTER", Req: HandleReq{}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuMemHostUnregister", "cuMemFreeHost"}, Device: "HostUnregister",
		Handler: "do(guestUnregister)", Unchecked: "a handle"},
	{Op: 0x0209, Name: "MEM_GET_ADDRESS_RANGE", Req: PtrReq{Ptr: 0x7f0000000010}, Reply: AddressRangeReply{}, Shape: ShapeSync,
		Symbols: []string{"cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes"}, NoDevice: "the session's own allocation table",
		Handler: "reply(memGetAddressRange)", Unchecked: "a pointer: only the session's own ranges are looked up"},
	{Op: 0x020a, Name: "HOST_SHARE", Req: HostShareReq{Base: 1 << 40, Size: 2 << 20}, Reply: Empty{}, Shape: ShapeSync, FD: true,
		Symbols: []string{"cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemHostRegister_v2"}, NoDevice: "maps the guest library's memfd into the backend (host mode)",
		Handler: "do(hostShare)", Check: "checkHostShare"},
	{Op: 0x020b, Name: "HOST_UNSHARE", Req: HostUnshareReq{Base: 1 << 40}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuMemFreeHost", "cuMemHostUnregister"}, NoDevice: "unmaps a share (host mode)",
		Handler: "do(hostUnshare)", Unchecked: "a base the connection looks up among its shares"},
	// 0x0280..: calls NVIDIA's libraries need (issue 16, helper libs).
	{Op: 0x0280, Name: "MEM_GET_GRANULARITY", Req: GranularityReq{Type: 1, HandleTypes: 1}, Reply: GranularityReply{Granularity: 2 << 20}, Shape: ShapeSync,
		Symbols: []string{"cuMemGetAllocationGranularity"}, Device: "MemGetGranularity",
		Handler: "reply(memGetGranularity)", Check: "checkGranularity"},

	// Modules and functions (0x03).
	{Op: 0x0301, Name: "MODULE_LOAD", Req: ModuleLoadReq{Kind: ImageCubin, Image: BufRef{Kind: BufInline}}, ReqTail: TailBytes, Reply: ModuleLoadReply{}, Shape: ShapeSync, Segments: true,
		Symbols: []string{"cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuLibraryLoadData", "cuLibraryLoadFromFile"}, Device: "ModuleLoad",
		Handler: "reply(moduleLoad)", Check: "checkModuleLoad"},
	{Op: 0x0302, Name: "MODULE_UNLOAD", Req: HandleReq{}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuModuleUnload", "cuLibraryUnload"}, Device: "ModuleUnload",
		Handler: "do(moduleUnload)", Unchecked: "a handle"},
	{Op: 0x0303, Name: "MODULE_GET_FUNCTION", Req: NameReq{}, ReqTail: TailBytes, Reply: FunctionReply{}, ReplyTail: TailBytes, Shape: ShapeSync,
		Symbols: []string{"cuModuleGetFunction", "cuLibraryGetKernel", "cuKernelGetFunction"}, Device: "ModuleGetFunction",
		Handler: "do(moduleGetFunction)", Check: "checkName"},
	{Op: 0x0304, Name: "MODULE_GET_GLOBAL", Req: NameReq{}, ReqTail: TailBytes, Reply: GlobalReply{}, Shape: ShapeSync,
		Symbols: []string{"cuModuleGetGlobal_v2", "cuLibraryGetGlobal"}, Device: "ModuleGetGlobal",
		Handler: "reply(moduleGetGlobal)", Check: "checkName"},
	{Op: 0x0305, Name: "FUNC_GET_ATTRIBUTES", Req: HandleReq{}, Reply: FuncAttributesReply{}, Shape: ShapeSync,
		Symbols: []string{"cuFuncGetAttribute", "cuKernelGetAttribute"}, Device: "FuncGetAttribute",
		Handler: "reply(funcGetAttributes)", Unchecked: "a handle; the attributes asked are the 16 of CUfunction_attribute"},
	{Op: 0x0306, Name: "FUNC_SET_ATTRIBUTE", Req: FuncSetAttributeReq{}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuFuncSetAttribute", "cuKernelSetAttribute"}, Device: "FuncSetAttribute",
		Handler: "do(funcSetAttribute)", Check: "checkSetAttribute"},
	{Op: 0x0307, Name: "OCCUPANCY_MAX_BLOCKS", Req: OccupancyReq{BlockSize: 128}, Reply: OccupancyReply{}, Shape: ShapeSync,
		Symbols: []string{"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyMaxPotentialBlockSize", "cuOccupancyMaxPotentialBlockSizeWithFlags"},
		Device:  "OccupancyMaxBlocks", Handler: "reply(occupancyMaxBlocks)", Check: "checkOccupancy"},
	// 0x0380..: calls NVIDIA's libraries need (issue 16, helper libs).
	{Op: 0x0380, Name: "OCCUPANCY_MAX_CLUSTERS", Req: ClusterOccupancyReq{GridX: 2, GridY: 1, GridZ: 1, BlockX: 128, BlockY: 1, BlockZ: 1, Cluster: Cluster{X: 2, Y: 1, Z: 1}}, Reply: OccupancyReply{NumBlocks: 56}, Shape: ShapeSync,
		Symbols: []string{"cuOccupancyMaxActiveClusters"}, Device: "OccupancyMaxClusters",
		Handler: "reply(occupancyMaxClusters)", Check: "checkClusterOccupancy"},

	// Launch (0x04).
	{Op: 0x0401, Name: "LAUNCH_KERNEL", Req: LaunchReq{GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1}, ReqTail: TailBytes, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"}, Device: "Launch",
		Handler: "do(launchKernel)", Check: "checkLaunch"},
	// 0x0480..: calls NVIDIA's libraries need (issue 16, helper libs).
	{Op: 0x0480, Name: "LAUNCH_KERNEL_EX", Req: LaunchExReq{Launch: LaunchReq{GridX: 2, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1}, Cluster: Cluster{X: 2, Y: 1, Z: 1, Policy: 1}}, ReqTail: TailBytes, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"}, Device: "Launch",
		Handler: "do(launchKernelEx)", Check: "checkLaunchEx"},

	// Streams (0x05).
	{Op: 0x0501, Name: "STREAM_CREATE", Req: StreamCreateReq{}, Reply: HandleReply{Handle: 1}, Shape: ShapeSync,
		Symbols: []string{"cuStreamCreate", "cuStreamCreateWithPriority"}, Device: "StreamCreate",
		Handler: "reply(streamCreate)", Check: "checkStreamCreate"},
	{Op: 0x0502, Name: "STREAM_DESTROY", Req: HandleReq{Handle: 1}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuStreamDestroy_v2", "cuStreamDestroy"}, Device: "StreamDestroy",
		Handler: "do(streamDestroy)", Unchecked: "a handle"},
	{Op: 0x0503, Name: "STREAM_SYNCHRONIZE", Req: HandleReq{Handle: 1}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuStreamSynchronize", "cuStreamSynchronize_ptsz"}, Device: "StreamSynchronize",
		Handler: "onStream(device.Context.StreamSynchronize, true)", Unchecked: "a handle"},
	{Op: 0x0504, Name: "STREAM_QUERY", Req: HandleReq{Handle: 1}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuStreamQuery", "cuStreamQuery_ptsz"}, Device: "StreamQuery",
		Handler: "onStream(device.Context.StreamQuery, false)", Unchecked: "a handle"},
	{Op: 0x0505, Name: "STREAM_WAIT_EVENT", Req: StreamWaitEventReq{Stream: 1, Event: 2}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"}, Device: "StreamWaitEvent",
		Handler: "do(streamWaitEvent)", Check: "checkStreamWaitEvent"},

	// Events (0x06).
	{Op: 0x0601, Name: "EVENT_CREATE", Req: EventCreateReq{}, Reply: HandleReply{Handle: 2}, Shape: ShapeSync,
		Symbols: []string{"cuEventCreate"}, Device: "EventCreate",
		Handler: "reply(eventCreate)", Check: "checkEventCreate"},
	{Op: 0x0602, Name: "EVENT_DESTROY", Req: HandleReq{Handle: 2}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuEventDestroy_v2", "cuEventDestroy"}, Device: "EventDestroy",
		Handler: "do(eventDestroy)", Unchecked: "a handle"},
	{Op: 0x0603, Name: "EVENT_RECORD", Req: EventRecordReq{Event: 2, Stream: 1}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz"}, Device: "EventRecord",
		Handler: "do(eventRecord)", Check: "checkEventRecord"},
	{Op: 0x0604, Name: "EVENT_SYNCHRONIZE", Req: HandleReq{Handle: 2}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuEventSynchronize"}, Device: "EventSynchronize",
		Handler: "onEvent(device.Context.EventSynchronize)", Unchecked: "a handle"},
	{Op: 0x0605, Name: "EVENT_QUERY", Req: HandleReq{Handle: 2}, Reply: Empty{}, Shape: ShapeSync,
		Symbols: []string{"cuEventQuery"}, Device: "EventQuery",
		Handler: "onEvent(device.Context.EventQuery)", Unchecked: "a handle"},
	{Op: 0x0606, Name: "EVENT_ELAPSED_TIME", Req: ElapsedTimeReq{Start: 2, End: 3}, Reply: ElapsedTimeReply{}, Shape: ShapeSync,
		Symbols: []string{"cuEventElapsedTime", "cuEventElapsedTime_v2"}, Device: "EventElapsed",
		Handler: "reply(eventElapsedTime)", Unchecked: "two handles"},

	// Host functions (0x08).
	{Op: 0x0801, Name: "HOST_FUNC_LAUNCH", Req: HostFuncReq{Stream: 1, CallbackID: 9}, Reply: Empty{}, Shape: ShapeAsync,
		Symbols: []string{"cuLaunchHostFunc", "cuLaunchHostFunc_ptsz", "cuStreamAddCallback", "cuStreamAddCallback_ptsz"}, Device: "LaunchHostFunc",
		Handler: "do(hostFuncLaunch)", Unchecked: "a stream handle and the guest's own callback id"},
	{Op: 0x0802, Name: "HOST_FUNC_DONE", Req: HostFuncDoneReq{CallbackID: 9}, Reply: Empty{}, Shape: ShapeSync,
		NoDevice: "ends a host function its stream waits on (sent by the library's callback thread)",
		Handler:  "do(hostFuncDone)", Unchecked: "a callback id the session looks up, and the guest's status (any value)"},

	// Notifications (0x09): host to guest.
	{Op: 0x0901, Name: "NOTIFY_HOST_FUNC", Req: HostFuncNotify{CallbackID: 9, Stream: 1}, Shape: ShapeNotify,
		NoDevice: "the session tells the guest to run a host function"},
	{Op: 0x0902, Name: "NOTIFY_ERROR", Req: ErrorNotify{}, Shape: ShapeNotify,
		NoDevice: "the session reports an asynchronous call's failure"},
	{Op: 0x0903, Name: "NOTIFY_OUTPUT", Req: OutputNotify{Stream: OutputStdout, Flags: OutputFinal}, ReqTail: TailBytes, Shape: ShapeNotify,
		NoDevice: "the session forwards device printf output"},
}
