package protocol

import (
	"fmt"
	"reflect"
)

// Opcode says what a frame asks for. The high byte is the area; numbers are
// wire values: explicit, never reused, never set by position.
type Opcode uint16

// Areas (high byte of an opcode).
const (
	AreaSession  = 0x00
	AreaDevice   = 0x01
	AreaMemory   = 0x02
	AreaModule   = 0x03
	AreaLaunch   = 0x04
	AreaStream   = 0x05
	AreaEvent    = 0x06
	AreaGraph    = 0x07 // reserved: host-side graphs
	AreaHostFunc = 0x08
	AreaNotify   = 0x09
	AreaLibrary  = 0x0a // reserved: cuBLAS/cuDNN by handle
)

// Opcodes.
const (
	OpHello     Opcode = 0x0001
	OpGoodbye   Opcode = 0x0002
	OpSegments  Opcode = 0x0003
	OpBatch     Opcode = 0x0004
	OpPing      Opcode = 0x0005
	OpSetOption Opcode = 0x0006
	OpGetStats  Opcode = 0x0007
	OpRingSetup Opcode = 0x0008

	OpDeviceGetCount     Opcode = 0x0101
	OpDeviceGetInfo      Opcode = 0x0102
	OpDriverGetVersion   Opcode = 0x0103
	OpDeviceSynchronize  Opcode = 0x0104
	OpDeviceReset        Opcode = 0x0105
	OpMemGetInfo         Opcode = 0x0106
	OpDeviceSetLimit     Opcode = 0x0107
	OpDeviceGetLimit     Opcode = 0x0108
	OpDriverGetInfo      Opcode = 0x0109
	OpDeviceGetProcesses Opcode = 0x010a
	OpDeviceGetMonitor   Opcode = 0x010b

	OpMemAlloc           Opcode = 0x0201
	OpMemFree            Opcode = 0x0202
	OpMemcpyHtoD         Opcode = 0x0203
	OpMemcpyDtoH         Opcode = 0x0204
	OpMemcpyDtoD         Opcode = 0x0205
	OpMemset             Opcode = 0x0206
	OpGuestRegister      Opcode = 0x0207
	OpGuestUnregister    Opcode = 0x0208
	OpMemGetAddressRange Opcode = 0x0209
	OpHostShare          Opcode = 0x020a
	OpHostUnshare        Opcode = 0x020b

	OpModuleLoad         Opcode = 0x0301
	OpModuleUnload       Opcode = 0x0302
	OpModuleGetFunction  Opcode = 0x0303
	OpModuleGetGlobal    Opcode = 0x0304
	OpFuncGetAttributes  Opcode = 0x0305
	OpFuncSetAttribute   Opcode = 0x0306
	OpOccupancyMaxBlocks Opcode = 0x0307

	OpLaunchKernel Opcode = 0x0401

	OpStreamCreate      Opcode = 0x0501
	OpStreamDestroy     Opcode = 0x0502
	OpStreamSynchronize Opcode = 0x0503
	OpStreamQuery       Opcode = 0x0504
	OpStreamWaitEvent   Opcode = 0x0505

	OpEventCreate      Opcode = 0x0601
	OpEventDestroy     Opcode = 0x0602
	OpEventRecord      Opcode = 0x0603
	OpEventSynchronize Opcode = 0x0604
	OpEventQuery       Opcode = 0x0605
	OpEventElapsedTime Opcode = 0x0606

	OpHostFuncLaunch Opcode = 0x0801
	OpHostFuncDone   Opcode = 0x0802

	OpNotifyHostFunc Opcode = 0x0901
	OpNotifyError    Opcode = 0x0902
	OpNotifyOutput   Opcode = 0x0903
)

// Tail says what may follow a payload's fixed part.
type Tail uint8

// Tail kinds.
const (
	TailNone  Tail = iota // nothing; longer payloads are refused
	TailBytes             // opaque bytes whose length the fixed part declares
)

// OpInfo describes one opcode: its name, payload types and rules.
type OpInfo struct {
	Op        Opcode
	Name      string // C name suffix: VGPU_OP_<Name>
	Req       any    // request payload (fixed part)
	ReqTail   Tail
	Reply     any // reply payload (fixed part)
	ReplyTail Tail
	// Batchable: may appear inside OpBatch (asynchronous, stream-ordered or
	// cheap, with no guest-physical segments).
	Batchable bool
	// Segments: may carry guest-physical segments.
	Segments bool
	// FD: carries file descriptors beside the frame (host mode's unix
	// socket, SCM_RIGHTS in the sendmsg of the frame's first byte): one
	// (HOST_SHARE) or RingFDs (RING_SETUP).
	FD bool
}

// Ops is the opcode table: one line per opcode. To add a call: pick the next
// free number in its area, add the payload structs to payloads.go, add a line
// here, run `go generate ./protocol/...`, add a golden frame in
// golden_test.go, and a handler in the backend's dispatch table.
var Ops = []OpInfo{
	{Op: OpHello, Name: "HELLO", Req: HelloReq{}, Reply: HelloReply{}},
	{Op: OpGoodbye, Name: "GOODBYE", Req: Empty{}, Reply: Empty{}},
	{Op: OpSegments, Name: "SEGMENTS", Req: Empty{}, Reply: Empty{}, Segments: true},
	{Op: OpBatch, Name: "BATCH", Req: BatchReq{}, ReqTail: TailBytes, Reply: BatchReply{}},
	{Op: OpPing, Name: "PING", Req: Empty{}, Reply: Empty{}},
	{Op: OpSetOption, Name: "SET_OPTION", Req: SetOptionReq{}, Reply: Empty{}},
	{Op: OpGetStats, Name: "GET_STATS", Req: Empty{}, Reply: SessionStats{}},
	{Op: OpRingSetup, Name: "RING_SETUP", Req: RingSetupReq{}, Reply: Empty{}, FD: true},

	{Op: OpDeviceGetCount, Name: "DEVICE_GET_COUNT", Req: Empty{}, Reply: DeviceCountReply{}},
	{Op: OpDeviceGetInfo, Name: "DEVICE_GET_INFO", Req: DeviceReq{}, Reply: DeviceInfo{}},
	{Op: OpDriverGetVersion, Name: "DRIVER_GET_VERSION", Req: Empty{}, Reply: VersionReply{}},
	{Op: OpDeviceSynchronize, Name: "DEVICE_SYNCHRONIZE", Req: DeviceReq{}, Reply: Empty{}},
	{Op: OpDeviceReset, Name: "DEVICE_RESET", Req: DeviceReq{}, Reply: Empty{}},
	{Op: OpMemGetInfo, Name: "MEM_GET_INFO", Req: DeviceReq{}, Reply: MemInfoReply{}},
	{Op: OpDeviceSetLimit, Name: "DEVICE_SET_LIMIT", Req: LimitReq{}, Reply: Empty{}},
	{Op: OpDeviceGetLimit, Name: "DEVICE_GET_LIMIT", Req: LimitReq{}, Reply: LimitReply{}},
	{Op: OpDriverGetInfo, Name: "DRIVER_GET_INFO", Req: Empty{}, Reply: DriverInfoReply{}},
	{Op: OpDeviceGetProcesses, Name: "DEVICE_GET_PROCESSES", Req: DeviceReq{}, Reply: ProcessListReply{}, ReplyTail: TailBytes},
	{Op: OpDeviceGetMonitor, Name: "DEVICE_GET_MONITOR", Req: DeviceReq{}, Reply: DeviceMonitor{}},

	{Op: OpMemAlloc, Name: "MEM_ALLOC", Req: MemAllocReq{}, Reply: PtrReply{}},
	{Op: OpMemFree, Name: "MEM_FREE", Req: PtrReq{}, Reply: Empty{}},
	{Op: OpMemcpyHtoD, Name: "MEMCPY_HTOD", Req: MemcpyHtoDReq{}, ReqTail: TailBytes, Reply: Empty{}, Batchable: true, Segments: true},
	{Op: OpMemcpyDtoH, Name: "MEMCPY_DTOH", Req: MemcpyDtoHReq{}, Reply: Empty{}, ReplyTail: TailBytes, Batchable: true, Segments: true},
	{Op: OpMemcpyDtoD, Name: "MEMCPY_DTOD", Req: MemcpyDtoDReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpMemset, Name: "MEMSET", Req: MemsetReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpGuestRegister, Name: "GUEST_REGISTER", Req: GuestRegisterReq{}, Reply: GuestRegisterReply{}, Segments: true},
	{Op: OpGuestUnregister, Name: "GUEST_UNREGISTER", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpMemGetAddressRange, Name: "MEM_GET_ADDRESS_RANGE", Req: PtrReq{}, Reply: AddressRangeReply{}},
	{Op: OpHostShare, Name: "HOST_SHARE", Req: HostShareReq{}, Reply: Empty{}, FD: true},
	{Op: OpHostUnshare, Name: "HOST_UNSHARE", Req: HostUnshareReq{}, Reply: Empty{}},

	{Op: OpModuleLoad, Name: "MODULE_LOAD", Req: ModuleLoadReq{}, ReqTail: TailBytes, Reply: ModuleLoadReply{}, Segments: true},
	{Op: OpModuleUnload, Name: "MODULE_UNLOAD", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpModuleGetFunction, Name: "MODULE_GET_FUNCTION", Req: NameReq{}, ReqTail: TailBytes, Reply: FunctionReply{}, ReplyTail: TailBytes},
	{Op: OpModuleGetGlobal, Name: "MODULE_GET_GLOBAL", Req: NameReq{}, ReqTail: TailBytes, Reply: GlobalReply{}},
	{Op: OpFuncGetAttributes, Name: "FUNC_GET_ATTRIBUTES", Req: HandleReq{}, Reply: FuncAttributesReply{}},
	{Op: OpFuncSetAttribute, Name: "FUNC_SET_ATTRIBUTE", Req: FuncSetAttributeReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpOccupancyMaxBlocks, Name: "OCCUPANCY_MAX_BLOCKS", Req: OccupancyReq{}, Reply: OccupancyReply{}},

	{Op: OpLaunchKernel, Name: "LAUNCH_KERNEL", Req: LaunchReq{}, ReqTail: TailBytes, Reply: Empty{}, Batchable: true},

	{Op: OpStreamCreate, Name: "STREAM_CREATE", Req: StreamCreateReq{}, Reply: HandleReply{}},
	{Op: OpStreamDestroy, Name: "STREAM_DESTROY", Req: HandleReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpStreamSynchronize, Name: "STREAM_SYNCHRONIZE", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpStreamQuery, Name: "STREAM_QUERY", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpStreamWaitEvent, Name: "STREAM_WAIT_EVENT", Req: StreamWaitEventReq{}, Reply: Empty{}, Batchable: true},

	{Op: OpEventCreate, Name: "EVENT_CREATE", Req: EventCreateReq{}, Reply: HandleReply{}},
	{Op: OpEventDestroy, Name: "EVENT_DESTROY", Req: HandleReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpEventRecord, Name: "EVENT_RECORD", Req: EventRecordReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpEventSynchronize, Name: "EVENT_SYNCHRONIZE", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpEventQuery, Name: "EVENT_QUERY", Req: HandleReq{}, Reply: Empty{}},
	{Op: OpEventElapsedTime, Name: "EVENT_ELAPSED_TIME", Req: ElapsedTimeReq{}, Reply: ElapsedTimeReply{}},

	{Op: OpHostFuncLaunch, Name: "HOST_FUNC_LAUNCH", Req: HostFuncReq{}, Reply: Empty{}, Batchable: true},
	{Op: OpHostFuncDone, Name: "HOST_FUNC_DONE", Req: HostFuncDoneReq{}, Reply: Empty{}},

	{Op: OpNotifyHostFunc, Name: "NOTIFY_HOST_FUNC", Req: HostFuncNotify{}},
	{Op: OpNotifyError, Name: "NOTIFY_ERROR", Req: ErrorNotify{}},
	{Op: OpNotifyOutput, Name: "NOTIFY_OUTPUT", Req: OutputNotify{}, ReqTail: TailBytes},
}

var opIndex = func() map[Opcode]*OpInfo {
	m := make(map[Opcode]*OpInfo, len(Ops))
	for i := range Ops {
		if _, dup := m[Ops[i].Op]; dup {
			panic(fmt.Sprintf("protocol: opcode %#04x listed twice", uint16(Ops[i].Op)))
		}
		m[Ops[i].Op] = &Ops[i]
	}
	return m
}()

// Lookup returns the table entry for op.
func Lookup(op Opcode) (*OpInfo, bool) {
	info, ok := opIndex[op]
	return info, ok
}

// String returns the opcode's name, or its number if unknown.
func (op Opcode) String() string {
	if info, ok := opIndex[op]; ok {
		return info.Name
	}
	return fmt.Sprintf("OP_%#04x", uint16(op))
}

// Area returns the opcode's area (high byte).
func (op Opcode) Area() uint8 { return uint8(op >> 8) }

// ReqSize and ReplySize are the sizes of the fixed parts.
func (i *OpInfo) ReqSize() int { return sizeOf(i.Req) }

// ReplySize is the size of the reply's fixed part (0 for notifications).
func (i *OpInfo) ReplySize() int { return sizeOf(i.Reply) }

func sizeOf(v any) int {
	if v == nil {
		return 0
	}
	return int(reflect.TypeOf(v).Size())
}

// CheckRequest checks a request frame's payload size and segment use against
// the opcode table: the fixed part must be present, and a payload longer
// than it only for opcodes with a tail.
func CheckRequest(f *Frame) (*OpInfo, error) {
	info, ok := Lookup(f.Opcode)
	if !ok {
		return nil, fmt.Errorf("%w: %#04x", ErrUnknownOp, uint16(f.Opcode))
	}
	n := info.ReqSize()
	if len(f.Payload) < n {
		return info, fmt.Errorf("%w: %s payload is %d bytes, want %d", ErrPayload, info.Name, len(f.Payload), n)
	}
	if len(f.Payload) > n && info.ReqTail == TailNone {
		return info, fmt.Errorf("%w: %s payload is %d bytes, want %d", ErrPayload, info.Name, len(f.Payload), n)
	}
	if f.NumSegs > 0 && !info.Segments {
		return info, fmt.Errorf("%w: %s does not take guest-physical segments", ErrFlags, info.Name)
	}
	return info, nil
}
