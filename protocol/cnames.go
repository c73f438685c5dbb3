package protocol

// NamedConst is a constant exported to the C header as VGPU_<Name>.
type NamedConst struct {
	Name  string
	Value uint64
}

// CConstants lists the constants the C header carries (opcodes come from
// Ops). Keep it in the order of the Go declarations.
var CConstants = []NamedConst{
	{"MAGIC", uint64(Magic)},
	{"PROTO_MAJOR", uint64(Major)},
	{"PROTO_MINOR", uint64(Minor)},
	{"HEADER_SIZE", HeaderSize},
	{"SEGMENT_SIZE", SegmentSize},
	{"ALIGN", Align},
	{"DEFAULT_MAX_PAYLOAD", uint64(DefaultLimits.MaxPayload)},
	{"DEFAULT_MAX_SEGMENTS", uint64(DefaultLimits.MaxSegments)},

	{"FLAG_REPLY", uint64(FlagReply)},
	{"FLAG_SEGMENTS", uint64(FlagSegments)},
	{"FLAG_MORE_SEGMENTS", uint64(FlagMoreSegments)},
	{"FLAG_NO_REPLY", uint64(FlagNoReply)},
	{"FLAG_NOTIFY", uint64(FlagNotify)},
	{"FLAG_OUTPUT", uint64(FlagOutput)},

	{"BUF_NONE", uint64(BufNone)},
	{"BUF_INLINE", uint64(BufInline)},
	{"BUF_SEGMENTS", uint64(BufSegments)},
	{"BUF_REGION", uint64(BufRegion)},

	{"FEATURE_BATCH", FeatureBatch},
	{"FEATURE_SEGMENTS", FeatureSegments},
	{"FEATURE_HOST_FUNC", FeatureHostFunc},
	{"FEATURE_INLINE", FeatureInline},
	{"FEATURE_MODULE_HASH", FeatureModuleHash},
	{"FEATURE_HOST_SHARE", FeatureHostShare},
	{"FEATURE_DEVICE_OUTPUT", FeatureDeviceOutput},
	{"FEATURE_SHM_RING", FeatureShmRing},
	{"FEATURE_BATCH_SYNC", FeatureBatchSync},

	{"ROLE_LIBRARY", uint64(RoleLibrary)},
	{"ROLE_DRIVER", uint64(RoleDriver)},

	{"COPY_ASYNC", uint64(CopyAsync)},
	{"REGISTER_MAPPED", uint64(RegisterMapped)},
	{"REGISTER_READONLY", uint64(RegisterReadOnly)},

	{"IMAGE_AUTO", uint64(ImageAuto)},
	{"IMAGE_FATBIN", uint64(ImageFatbin)},
	{"IMAGE_CUBIN", uint64(ImageCubin)},
	{"IMAGE_PTX", uint64(ImagePTX)},

	{"OPTION_COPY_ENGINE", uint64(OptionCopyEngine)},
	{"ENGINE_AUTO", EngineAuto},
	{"ENGINE_RUNS", EngineRuns},
	{"ENGINE_GATHER", EngineGather},
	{"ENGINE_STAGING", EngineStaging},

	{"MAX_DEVICE_ATTRS", MaxDeviceAttrs},
	{"MAX_PROCESSES", MaxProcesses},
	{"MONITOR_UTILIZATION", uint64(MonitorUtilization)},
	{"MONITOR_TEMPERATURE", uint64(MonitorTemperature)},
	{"MONITOR_POWER", uint64(MonitorPower)},
	{"MONITOR_POWER_LIMIT", uint64(MonitorPowerLimit)},
	{"MONITOR_FAN", uint64(MonitorFan)},
	{"MONITOR_PSTATE", uint64(MonitorPstate)},
	{"MONITOR_CLOCK", uint64(MonitorClock)},
	{"MONITOR_MAX_CLOCK", uint64(MonitorMaxClock)},
	{"MONITOR_CLOCKS", MonitorClocks},
	{"MAX_FUNC_ATTRS", MaxFuncAttrs},
	{"MAX_PARAM_BYTES", MaxParamBytes},
	{"MAX_FUNCTION_LIST_BYTES", MaxFunctionListBytes},
	{"MAX_GRAPH_NODE_LIST", MaxGraphNodeList},
	{"MAX_GRAPH_DEPS", MaxGraphDeps},
	{"MAX_GRAPH_EDGES", MaxGraphEdges},
	{"GRAPH_COPY_HTOD", uint64(GraphCopyHtoD)},
	{"GRAPH_COPY_DTOH", uint64(GraphCopyDtoH)},
	{"GRAPH_COPY_DTOD", uint64(GraphCopyDtoD)},
	{"DEFAULT_PORT", DefaultPort},
	{"MAX_BATCH", DefaultMaxBatch},
	{"OUTPUT_STDOUT", uint64(OutputStdout)},
	{"OUTPUT_STDERR", uint64(OutputStderr)},
	{"OUTPUT_FINAL", uint64(OutputFinal)},
	{"MAX_OUTPUT_CHUNK", MaxOutputChunk},

	{"RING_MAGIC", RingMagic},
	{"RING_VERSION", RingVersion},
	{"RING_HEADER_SIZE", RingHeaderSize},
	{"RING_MIN_BYTES", RingMinBytes},
	{"RING_MAX_BYTES", RingMaxBytes},
	{"RING_FDS", RingFDs},
	{"RING_OFF_MAGIC", RingOffMagic},
	{"RING_OFF_REQ_TAIL", RingOffReqTail},
	{"RING_OFF_REQ_HEAD", RingOffReqHead},
	{"RING_OFF_COMP_TAIL", RingOffCompTail},
	{"RING_OFF_COMP_HEAD", RingOffCompHead},
	{"RING_OFF_SRV_SLEEP", RingOffSrvSleep},
	{"RING_OFF_SRV_WAIT", RingOffSrvWait},
	{"RING_OFF_CLI_SLEEP", RingOffCliSleep},
	{"RING_OFF_CLI_WAIT", RingOffCliWait},
	{"RING_OFF_CARRIERS", RingOffCarriers},
	{"RING_OFF_REQ_TAKEN", RingOffReqTaken},
	{"RING_PAGE_SIZE", RingPageSize},
	{"RING_BELL_REQUESTS", RingBellRequests},
	{"RING_BELL_SPACE", RingBellSpace},
	{"RING_BELL_BROKEN", RingBellBroken},
	{"RING_CARRIER_SIZE", RingCarrierSize},
	{"RING_DEFAULT_BYTES", RingDefaultBytes},
	{"RING_DEFAULT_SPIN_NS", RingDefaultSpinNs},
}

// DefaultPort is the vsock port of the vGPU service.
const DefaultPort = 0x7667

// DefaultMaxBatch is the default limit on calls per OpBatch.
const DefaultMaxBatch = 4096
