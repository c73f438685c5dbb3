package session

import (
	"bytes"
	"math"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// The argument checks of every opcode, in one table (issue 20: nothing
// from a guest reaches a device unvalidated). Each row checks the enums,
// flag sets, attributes and sizes of its request against what the device
// supports (its Properties) before the handler runs; an unknown value is
// CUDA_ERROR_INVALID_VALUE (a device ordinal out of range
// CUDA_ERROR_INVALID_DEVICE, a size no device has CUDA_ERROR_OUT_OF_MEMORY,
// as the driver answers). Handles and device-pointer ranges are the
// handlers' (they need the session's state), and arithmetic on sizes is
// checked again where it is done. A row that checks nothing says why.
//
// Every row of the call registry (protocol.Ops) names its validator (Check)
// or says why it needs none (Unchecked): a new opcode cannot reach a
// handler without someone deciding what to check. The generator refuses a
// row with neither.

// validator checks one request; c.f is the frame (payload size already
// checked against the opcode table).
type validator struct {
	check func(s *Session, c *call) error
	// none says why the row checks nothing.
	none string
}

// args decodes a request for a validator (a bounds-checked copy of the
// fixed part; the handler decodes its own).
func args[Req any](f func(s *Session, c *call, r *Req) error) validator {
	return validator{check: func(s *Session, c *call) error {
		r, _, err := protocol.Decode[Req](c.f.Payload)
		if err != nil {
			return &device.Error{Op: c.f.Opcode.String(), Result: device.ErrInvalidValue, Detail: err.Error()}
		}
		return f(s, c, &r)
	}}
}

func none(why string) validator { return validator{none: why} }

// CUdevice_attribute numbers the checks read (cuda.h).
const (
	devAttrMaxThreadsPerBlock = 1
	devAttrMaxBlockDimX       = 2
	devAttrMaxGridDimX        = 5
	devAttrMaxPersistingL2    = 108
)

// CUlimit values (cuda.h) and the most a guest may ask of each: a limit
// reserves device memory for every resident thread (stack) or for the
// context (heaps, FIFOs), so a huge one would take memory from every
// guest of the context.
const (
	limitStackSize        = 0
	limitPrintfFIFO       = 1
	limitMallocHeap       = 2
	limitDevRTSyncDepth   = 3
	limitDevRTPendingLnch = 4
	limitMaxL2Fetch       = 5
	limitPersistingL2     = 6
	limitShmemSize        = 7 // read-only
	limitCIGEnabled       = 8 // graphics interop: not served
	limitCIGShmemFallback = 9
)

// validators holds every opcode's argument checks, generated
// (dispatch_gen.go) from the Check or Unchecked of its row in the call
// registry, protocol/registry.go.
var validators map[protocol.Opcode]validator

// validate runs c's row of the table.
func (s *Session) validate(c *call) error {
	v, ok := validators[c.f.Opcode]
	if !ok {
		return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "opcode %#04x has no argument checks; give its row in protocol/registry.go a Check or an Unchecked", uint16(c.f.Opcode))
	}
	if v.check == nil {
		return nil
	}
	return v.check(s, c)
}

// props returns device dev's properties (cached; nil for no such device).
// checkFitsDevice refuses an allocation of size bytes larger than all of
// device dev's memory with CUDA_ERROR_OUT_OF_MEMORY, as the driver would,
// before it reaches the driver or the VM's cap.
func checkFitsDevice(s *Session, op string, dev int, size uint64) error {
	if p := s.props(dev); p != nil && p.TotalMem != 0 && size > p.TotalMem {
		return device.Errorf(op, device.ErrOutOfMemory, "%d bytes: the device has %d", size, p.TotalMem)
	}
	return nil
}

func (s *Session) props(dev int) *device.Properties {
	if dev < 0 || dev >= len(s.cfg.Devices) {
		return nil
	}
	if s.propCache == nil {
		s.propCache = make([]*device.Properties, len(s.cfg.Devices))
	}
	if p := s.propCache[dev]; p != nil {
		return p
	}
	p, err := s.cfg.Devices[dev].Properties()
	if err != nil {
		return nil
	}
	s.propCache[dev] = p
	return p
}

// maxDeviceMem is the largest device's memory: no copy, memset or
// allocation can be larger.
func (s *Session) maxDeviceMem() uint64 {
	var m uint64
	for i := range s.cfg.Devices {
		if p := s.props(i); p != nil {
			m = max(m, p.TotalMem)
		}
	}
	return m
}

func invalid(c *call, format string, args ...any) error {
	return device.Errorf(c.f.Opcode.String(), device.ErrInvalidValue, format, args...)
}

func checkDevice(s *Session, c *call, d uint32) error {
	if int64(d) >= int64(len(s.cfg.Devices)) {
		return device.Errorf(c.f.Opcode.String(), device.ErrInvalidDevice, "device %d of %d", d, len(s.cfg.Devices))
	}
	return nil
}

func checkDeviceReq(s *Session, c *call, r *protocol.DeviceReq) error {
	return checkDevice(s, c, r.Device)
}

func checkBatch(s *Session, c *call, r *protocol.BatchReq) error {
	if r.Count == 0 || r.Count > s.cfg.MaxBatch {
		return invalid(c, "a batch of %d calls (want 1..%d)", r.Count, s.cfg.MaxBatch)
	}
	return nil
}

func checkSetOption(s *Session, c *call, r *protocol.SetOptionReq) error {
	if r.Key == protocol.OptionCopyEngine {
		if _, ok := engineKinds[r.Value]; !ok {
			return invalid(c, "copy engine %d (want 0 auto, 1 runs, 2 gather, 3 staging)", r.Value)
		}
	}
	return nil // an unknown key is the handler's CUDA_ERROR_NOT_SUPPORTED
}

// settableLimit reports the most a guest may set CUlimit l to on a device
// with properties p (ok false: not settable).
func settableLimit(p *device.Properties, l uint32) (maxValue uint64, ok bool) {
	switch l {
	case limitStackSize:
		return 512 << 10, true // CUDA's per-thread local memory maximum
	case limitPrintfFIFO:
		return min(p.TotalMem/16, 1<<30), true
	case limitMallocHeap:
		return p.TotalMem / 2, true
	case limitDevRTSyncDepth:
		return 24, true // CUDA's nesting limit
	case limitDevRTPendingLnch:
		return 1 << 20, true
	case limitMaxL2Fetch:
		return 128, true
	case limitPersistingL2:
		return uint64(max(p.Attrs[devAttrMaxPersistingL2], 0)), true
	}
	return 0, false
}

func checkSetLimit(s *Session, c *call, r *protocol.LimitReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	p := s.props(int(r.Device))
	if p == nil {
		return nil // the handler reports the device's error
	}
	m, ok := settableLimit(p, r.Limit)
	if !ok {
		return invalid(c, "CUlimit %d cannot be set (settable: 0-6)", r.Limit)
	}
	if r.Value > m {
		return invalid(c, "CUlimit %d of %d: at most %d", r.Limit, r.Value, m)
	}
	if r.Limit == limitMaxL2Fetch && r.Value != 0 && r.Value != 32 && r.Value != 64 && r.Value != 128 {
		return invalid(c, "L2 fetch granularity %d (want 0, 32, 64 or 128)", r.Value)
	}
	return nil
}

func checkGetLimit(s *Session, c *call, r *protocol.LimitReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Limit > limitShmemSize {
		return invalid(c, "CUlimit %d (want 0-7)", r.Limit)
	}
	return nil
}

func checkMemAlloc(s *Session, c *call, r *protocol.MemAllocReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags != 0 {
		return invalid(c, "allocation flags %#x (none defined)", r.Flags)
	}
	return checkFitsDevice(s, "OpMemAlloc", int(r.Device), r.Size)
}

func checkCopyFlags(c *call, flags uint32) error {
	if flags&^protocol.CopyAsync != 0 {
		return invalid(c, "copy flags %#x (only CopyAsync, 1, exists)", flags)
	}
	return nil
}

// checkBufRef checks a buffer's kind and size.
func checkBufRef(s *Session, c *call, ref protocol.BufRef, kinds ...protocol.BufKind) error {
	ok := false
	for _, k := range kinds {
		ok = ok || ref.Kind == k
	}
	if !ok {
		// A copy for the message: kinds itself then stays on the stack (no
		// allocation per checked call).
		return invalid(c, "buffer kind %d here (want one of %v)", ref.Kind, append([]protocol.BufKind(nil), kinds...))
	}
	if m := s.maxDeviceMem(); m != 0 && ref.Len > m {
		return invalid(c, "a buffer of %d bytes: larger than any device (%d)", ref.Len, m)
	}
	return nil
}

func checkHtoD(s *Session, c *call, r *protocol.MemcpyHtoDReq) error {
	if err := checkCopyFlags(c, r.Flags); err != nil {
		return err
	}
	return checkBufRef(s, c, r.Src, protocol.BufInline, protocol.BufSegments, protocol.BufRegion)
}

func checkDtoH(s *Session, c *call, r *protocol.MemcpyDtoHReq) error {
	if err := checkCopyFlags(c, r.Flags); err != nil {
		return err
	}
	return checkBufRef(s, c, r.Dst, protocol.BufInline, protocol.BufSegments, protocol.BufRegion)
}

func checkDtoD(s *Session, c *call, r *protocol.MemcpyDtoDReq) error {
	if err := checkCopyFlags(c, r.Flags); err != nil {
		return err
	}
	if m := s.maxDeviceMem(); m != 0 && r.Size > m {
		return invalid(c, "a copy of %d bytes: larger than any device (%d)", r.Size, m)
	}
	return nil
}

func checkMemset(s *Session, c *call, r *protocol.MemsetReq) error {
	if err := checkCopyFlags(c, r.Flags); err != nil {
		return err
	}
	switch r.ElemSize {
	case 1, 2:
		if r.Value>>(8*r.ElemSize) != 0 {
			return invalid(c, "value %#x does not fit a %d-byte element", r.Value, r.ElemSize)
		}
	case 4:
	default:
		return invalid(c, "element size %d (want 1, 2 or 4)", r.ElemSize)
	}
	if m := s.maxDeviceMem(); m != 0 && (r.Count > m || r.Height > m || r.Pitch > m) {
		return invalid(c, "memset of %d elements, %d rows, pitch %d: larger than any device (%d bytes)", r.Count, r.Height, r.Pitch, m)
	}
	return nil
}

func checkGuestRegister(s *Session, c *call, r *protocol.GuestRegisterReq) error {
	if r.Flags&^(protocol.RegisterMapped|protocol.RegisterReadOnly) != 0 {
		return invalid(c, "registration flags %#x (Mapped 1, ReadOnly 2)", r.Flags)
	}
	return nil
}

func checkHostShare(s *Session, c *call, r *protocol.HostShareReq) error {
	if r.Flags != 0 {
		return invalid(c, "share flags %#x (none defined)", r.Flags)
	}
	return nil
}

func checkModuleLoad(s *Session, c *call, r *protocol.ModuleLoadReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Kind > protocol.ImagePTX {
		return invalid(c, "image kind %d (0 auto, 1 fatbin, 2 cubin, 3 PTX)", r.Kind)
	}
	if r.Flags != 0 {
		return invalid(c, "module flags %#x (none defined)", r.Flags)
	}
	if r.Image.Kind == protocol.BufNone {
		return nil // by hash
	}
	if r.Image.Len == 0 || r.Image.Len > MaxModuleBytes {
		return invalid(c, "image of %d bytes (want 1..%d)", r.Image.Len, MaxModuleBytes)
	}
	return checkBufRef(s, c, r.Image, protocol.BufInline, protocol.BufSegments, protocol.BufRegion)
}

func checkName(s *Session, c *call, r *protocol.NameReq) error {
	_, tail, _ := protocol.Decode[protocol.NameReq](c.f.Payload)
	if r.NameLen == 0 || r.NameLen > MaxNameLen || uint64(r.NameLen) > uint64(len(tail)) {
		return invalid(c, "name of %d bytes (tail has %d, limit %d)", r.NameLen, len(tail), MaxNameLen)
	}
	if bytes.IndexByte(tail[:r.NameLen], 0) >= 0 {
		return invalid(c, "a name with a NUL byte inside")
	}
	return nil
}

// funcProps returns the properties of function handle h's device (nil: not
// a function of the session; the handler answers INVALID_HANDLE).
func (s *Session) funcProps(h uint64) *device.Properties {
	f, ok := s.st.funcs[h]
	if !ok {
		return nil
	}
	return s.props(f.dev)
}

func checkSetAttribute(s *Session, c *call, r *protocol.FuncSetAttributeReq) error {
	p := s.funcProps(r.Func)
	if p == nil {
		return nil
	}
	return checkFuncSetAttribute(c.f.Opcode.String(), p, r.Attr, r.Value)
}

func checkOccupancy(s *Session, c *call, r *protocol.OccupancyReq) error {
	if err := checkOccupancyFlags(c.f.Opcode.String(), r.Flags); err != nil {
		return err
	}
	p := s.funcProps(r.Func)
	if p == nil {
		return nil
	}
	if r.BlockSize == 0 || int64(r.BlockSize) > int64(p.Attrs[devAttrMaxThreadsPerBlock]) {
		return invalid(c, "block size %d (want 1..%d)", r.BlockSize, p.Attrs[devAttrMaxThreadsPerBlock])
	}
	return nil
}

func checkLaunch(s *Session, c *call, r *protocol.LaunchReq) error {
	if r.ParamSize > protocol.MaxParamBytes {
		return invalid(c, "a parameter block of %d bytes (at most %d)", r.ParamSize, protocol.MaxParamBytes)
	}
	p := s.funcProps(r.Func)
	if p == nil {
		return nil
	}
	grid := [3]uint32{r.GridX, r.GridY, r.GridZ}
	block := [3]uint32{r.BlockX, r.BlockY, r.BlockZ}
	threads := uint64(1)
	for i := 0; i < 3; i++ {
		if grid[i] == 0 || block[i] == 0 {
			return invalid(c, "grid %v, block %v: no dimension may be 0", grid, block)
		}
		if int64(grid[i]) > int64(p.Attrs[devAttrMaxGridDimX+i]) || int64(block[i]) > int64(p.Attrs[devAttrMaxBlockDimX+i]) {
			return invalid(c, "grid %v or block %v exceeds the device's limits (grid %v, block %v)", grid, block,
				p.Attrs[devAttrMaxGridDimX:devAttrMaxGridDimX+3], p.Attrs[devAttrMaxBlockDimX:devAttrMaxBlockDimX+3])
		}
		threads *= uint64(block[i])
	}
	if threads > uint64(max(p.Attrs[devAttrMaxThreadsPerBlock], 0)) {
		return invalid(c, "%d threads per block (at most %d)", threads, p.Attrs[devAttrMaxThreadsPerBlock])
	}
	if int64(r.SharedMem) > int64(p.Attrs[devAttrMaxSharedPerBlockOptin]) {
		return invalid(c, "%d bytes of dynamic shared memory (at most %d)", r.SharedMem, p.Attrs[devAttrMaxSharedPerBlockOptin])
	}
	return nil
}

// maxClusterBlocks is the most blocks a thread-block cluster may have on
// any GPU (sm_90's non-portable limit); the device checks its own.
const maxClusterBlocks = 16

// checkCluster checks a cluster shape and policy: each dimension 0 (none
// given) or all non-zero, at most maxClusterBlocks blocks, a known
// CUclusterSchedulingPolicy.
func checkCluster(c *call, cl protocol.Cluster) error {
	if cl.Policy > 2 {
		return invalid(c, "cluster scheduling policy %d (0 default, 1 spread, 2 load balancing)", cl.Policy)
	}
	dims := [3]uint32{cl.X, cl.Y, cl.Z}
	if dims == [3]uint32{} {
		return nil
	}
	n := uint64(1)
	for _, d := range dims {
		n *= uint64(min(d, maxClusterBlocks+1)) // capped: no product overflows
	}
	if n == 0 || n > maxClusterBlocks {
		return device.Errorf(c.f.Opcode.String(), device.ErrInvalidClusterSize, "cluster %v: want 1..%d blocks, no dimension 0", dims, maxClusterBlocks)
	}
	return nil
}

func checkClusterOccupancy(s *Session, c *call, r *protocol.ClusterOccupancyReq) error {
	if err := checkCluster(c, r.Cluster); err != nil {
		return err
	}
	p := s.funcProps(r.Func)
	if p == nil {
		return nil
	}
	block := [3]uint32{r.BlockX, r.BlockY, r.BlockZ}
	threads := uint64(1)
	for i, b := range block {
		if b == 0 || int64(b) > int64(p.Attrs[devAttrMaxBlockDimX+i]) {
			return invalid(c, "block %v (limits %v)", block, p.Attrs[devAttrMaxBlockDimX:devAttrMaxBlockDimX+3])
		}
		threads *= uint64(b)
	}
	if threads > uint64(max(p.Attrs[devAttrMaxThreadsPerBlock], 0)) {
		return invalid(c, "%d threads per block (at most %d)", threads, p.Attrs[devAttrMaxThreadsPerBlock])
	}
	return nil
}

// launchAttrsServed are the launch attributes LAUNCH_KERNEL_ATTRS carries
// (bits 1<<CUlaunchAttributeID).
const launchAttrsServed = 1<<device.StreamAttrAccessPolicyWindow | 1<<device.LaunchAttrCooperative |
	1<<device.StreamAttrSyncPolicy | 1<<device.LaunchAttrProgrammaticSerialization | 1<<device.StreamAttrPriority |
	1<<device.StreamAttrMemSyncDomainMap | 1<<device.StreamAttrMemSyncDomain | 1<<device.LaunchAttrCarveout

// checkLaunchAttrs checks the launch and its cluster as checkLaunchEx does
// and each attribute as checkStreamSetAttr does a stream's (except the
// synchronization policy, which the driver refuses on a launch): cooperative
// and programmatic serialization 0 or 1 (cooperative launches on devices
// that support them), the shared memory carveout a percentage (or -1, the
// default); an attribute not given has a zero field.
func checkLaunchAttrs(s *Session, c *call, r *protocol.LaunchAttrsReq) error {
	a := r.Attrs
	if a.Has&^launchAttrsServed != 0 {
		return invalid(c, "launch attributes %#x (bits of %#x)", a.Has, launchAttrsServed)
	}
	has := func(id int) bool { return a.Has&(1<<id) != 0 }
	zero := func(id int, v uint32) error {
		if !has(id) && v != 0 {
			return invalid(c, "launch attribute %d not given but its field is %d", id, v)
		}
		return nil
	}
	for _, f := range [...]struct {
		id int
		v  uint32
	}{{device.LaunchAttrCooperative, a.Cooperative}, {device.StreamAttrSyncPolicy, a.SyncPolicy},
		{device.LaunchAttrProgrammaticSerialization, a.ProgrammaticSerialization}, {device.StreamAttrPriority, uint32(a.Priority)},
		{device.StreamAttrMemSyncDomainMap, a.MemSyncDomainMap}, {device.StreamAttrMemSyncDomain, a.MemSyncDomain},
		{device.LaunchAttrCarveout, a.Carveout}} {
		if err := zero(f.id, f.v); err != nil {
			return err
		}
	}
	if !has(device.StreamAttrAccessPolicyWindow) && a.Window != (protocol.AccessPolicyWindow{}) {
		return invalid(c, "an access policy window not given but set")
	}
	switch {
	case a.Cooperative > 1 || a.ProgrammaticSerialization > 1:
		return invalid(c, "cooperative %d, programmatic serialization %d (0 or 1)", a.Cooperative, a.ProgrammaticSerialization)
	case has(device.StreamAttrSyncPolicy):
		// The driver answers CUDA_ERROR_INVALID_VALUE (measured on the
		// H100, driver 580): the policy is valid for streams only.
		return invalid(c, "the synchronization policy (launch attribute 3) is a stream attribute, not a launch's: set it with cuStreamSetAttribute")
	case !syncDomainMapOK(a.MemSyncDomainMap):
		return invalid(c, "memory sync domain map %#x (two bytes, default and remote, each a domain below %d)", a.MemSyncDomainMap, maxSyncDomains)
	case a.MemSyncDomain > 1:
		return invalid(c, "memory sync domain %d (0 default, 1 remote)", a.MemSyncDomain)
	case int32(a.Carveout) < -1 || int32(a.Carveout) > 100:
		return invalid(c, "shared memory carveout %d (a percentage, or -1 the default)", int32(a.Carveout))
	}
	if has(device.StreamAttrAccessPolicyWindow) {
		w := protocol.StreamAttrReq{Attr: device.StreamAttrAccessPolicyWindow, Value: protocol.StreamAttrValue{Window: a.Window}}
		if f, ok := s.st.funcs[r.Launch.Func]; ok {
			w.Device = uint32(f.dev)
		}
		if err := checkStreamSetAttr(s, c, &w); err != nil {
			return err
		}
	}
	if a.Cooperative == 1 {
		if f, ok := s.st.funcs[r.Launch.Func]; ok {
			if p := s.props(f.dev); p != nil && p.Attrs[devAttrCooperativeLaunch] == 0 {
				return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "a cooperative launch on device %d, which does not support them", f.dev)
			}
		}
	}
	if err := checkCluster(c, r.Cluster); err != nil {
		return err
	}
	return checkLaunch(s, c, &r.Launch)
}

// devAttrCooperativeLaunch is CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH.
const devAttrCooperativeLaunch = 95

func checkLaunchEx(s *Session, c *call, r *protocol.LaunchExReq) error {
	if err := checkCluster(c, r.Cluster); err != nil {
		return err
	}
	return checkLaunch(s, c, &r.Launch)
}

// CUmemAllocationProp enums (cuda.h): allocation types PINNED 1 and
// MANAGED 2; handle types POSIX_FILE_DESCRIPTOR 1, WIN32 2, WIN32_KMT 4,
// FABRIC 8; compression NONE 0, GENERIC 1; usage TILE_POOL 1,
// HW_DECOMPRESS 2.
const (
	allocTypeMax      = 2
	allocHandleTypes  = 0xf
	allocCompressMax  = 1
	allocUsageAllowed = 0x3
)

func checkGranularity(s *Session, c *call, r *protocol.GranularityReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch {
	case r.Option > 1:
		return invalid(c, "granularity option %d (0 minimum, 1 recommended)", r.Option)
	case r.Type == 0 || r.Type > allocTypeMax:
		return invalid(c, "allocation type %d (1 pinned, 2 managed)", r.Type)
	case r.HandleTypes&^allocHandleTypes != 0:
		return invalid(c, "handle types %#x (bits of 0x%x)", r.HandleTypes, allocHandleTypes)
	case r.Compression > allocCompressMax:
		return invalid(c, "compression type %d (0 none, 1 generic)", r.Compression)
	case r.RDMA > 1:
		return invalid(c, "gpuDirectRDMACapable %d (0 or 1)", r.RDMA)
	case r.Usage&^allocUsageAllowed != 0:
		return invalid(c, "usage %#x (bits of 0x%x)", r.Usage, allocUsageAllowed)
	}
	return nil
}

func checkStreamCreate(s *Session, c *call, r *protocol.StreamCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags&^streamNonBlocking != 0 {
		return invalid(c, "stream flags %#x (only CU_STREAM_NON_BLOCKING, 1, exists)", r.Flags)
	}
	// Any priority: the driver clamps it to the context's range
	// (cuStreamCreateWithPriority's documented behaviour).
	return nil
}

// CUevent_flags, CUevent_wait_flags and CUevent_record_flags (cuda.h).
const (
	eventBlockingSync  = 0x1
	eventInterprocess  = 0x4
	eventWaitExternal  = 0x1
	eventRecordExtern  = 0x1
	eventCreateAllowed = eventBlockingSync | eventDisableTiming | eventInterprocess
)

func checkEventCreate(s *Session, c *call, r *protocol.EventCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags&^eventCreateAllowed != 0 {
		return invalid(c, "event flags %#x (BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4)", r.Flags)
	}
	if r.Flags&eventInterprocess != 0 && r.Flags&eventDisableTiming == 0 {
		return invalid(c, "an interprocess event must disable timing (flags %#x)", r.Flags)
	}
	return nil
}

func checkStreamWaitEvent(s *Session, c *call, r *protocol.StreamWaitEventReq) error {
	if r.Flags&^eventWaitExternal != 0 {
		return invalid(c, "wait flags %#x (0, or CU_EVENT_WAIT_EXTERNAL 1)", r.Flags)
	}
	return nil
}

func checkEventRecord(s *Session, c *call, r *protocol.EventRecordReq) error {
	if r.Flags&^eventRecordExtern != 0 {
		return invalid(c, "record flags %#x (0, or CU_EVENT_RECORD_EXTERNAL 1)", r.Flags)
	}
	return nil
}

func checkBeginCapture(s *Session, c *call, r *protocol.BeginCaptureReq) error {
	if r.Mode > 2 {
		return invalid(c, "capture mode %d (0 global, 1 thread-local, 2 relaxed)", r.Mode)
	}
	return nil
}

// CUgraphInstantiate_flags (cuda.h): AUTO_FREE_ON_LAUNCH 1, UPLOAD 2,
// DEVICE_LAUNCH 4, USE_NODE_PRIORITY 8.
const graphInstantiateFlags = 0x1 | 0x2 | 0x4 | 0x8

func checkGraphInstantiate(s *Session, c *call, r *protocol.GraphInstantiateReq) error {
	if r.Flags&^graphInstantiateFlags != 0 {
		return invalid(c, "instantiate flags %#x (AUTO_FREE_ON_LAUNCH 1, UPLOAD 2, DEVICE_LAUNCH 4, USE_NODE_PRIORITY 8)", r.Flags)
	}
	return nil
}

func checkMemAllocAsync(s *Session, c *call, r *protocol.MemAllocAsyncReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags != 0 {
		return invalid(c, "allocation flags %#x (none defined)", r.Flags)
	}
	return checkFitsDevice(s, "OpMemAllocAsync", int(r.Device), r.Size)
}

func checkMemReserve(s *Session, c *call, r *protocol.MemReserveReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch {
	case r.Flags != 0:
		return invalid(c, "reserve flags %#x (none defined)", r.Flags)
	case r.Size == 0:
		return invalid(c, "size 0")
	case r.Alignment&(r.Alignment-1) != 0:
		return invalid(c, "alignment %#x (a power of two, or 0)", r.Alignment)
	}
	return nil
}

func checkMemCreate(s *Session, c *call, r *protocol.MemCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch {
	case r.Flags != 0:
		return invalid(c, "create flags %#x (none defined)", r.Flags)
	case r.Size == 0:
		return invalid(c, "size 0")
	case r.Type != 1:
		return invalid(c, "allocation type %d (1 pinned is served)", r.Type)
	case r.HandleTypes&^allocHandleTypes != 0:
		return invalid(c, "handle types %#x (bits of 0x%x)", r.HandleTypes, allocHandleTypes)
	case r.Compression > allocCompressMax:
		return invalid(c, "compression type %d (0 none, 1 generic)", r.Compression)
	case r.RDMA > 1:
		return invalid(c, "gpuDirectRDMACapable %d (0 or 1)", r.RDMA)
	case r.Usage&^allocUsageAllowed != 0:
		return invalid(c, "usage %#x (bits of 0x%x)", r.Usage, allocUsageAllowed)
	}
	return checkFitsDevice(s, "OpMemCreate", int(r.Device), r.Size)
}

func checkMemPoolCreate(s *Session, c *call, r *protocol.MemPoolCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch {
	case r.Type != 1:
		return invalid(c, "allocation type %d (1 pinned is served)", r.Type)
	case r.HandleTypes != 0:
		return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "pool export handle types %#x: memory of one VM is never shared with another process (create the pool with handleTypes 0)", r.HandleTypes)
	case r.Usage != 0:
		return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "pool usage %#x: only plain pools (usage 0) are served", r.Usage)
	}
	if p := s.props(int(r.Device)); p != nil && p.TotalMem != 0 && r.MaxSize > p.TotalMem {
		return invalid(c, "a pool of at most %d bytes on a device of %d", r.MaxSize, p.TotalMem)
	}
	return nil
}

// checkMemPoolSetAttr: the reuse flags are ints 0 or 1, the release
// threshold any size, the two HIGH counters may only be reset (0), the two
// CURRENT ones are read-only.
func checkMemPoolSetAttr(s *Session, c *call, r *protocol.MemPoolAttrReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch r.Attr {
	case device.PoolReuseFollowEventDeps, device.PoolReuseAllowOpportunistic, device.PoolReuseAllowInternalDeps:
		if r.Value > 1 {
			return invalid(c, "memory pool attribute %d is 0 or 1, not %d", r.Attr, r.Value)
		}
	case device.PoolReleaseThreshold:
	case device.PoolReservedMemHigh, device.PoolUsedMemHigh:
		if r.Value != 0 {
			return invalid(c, "memory pool attribute %d may only be reset to 0, not set to %d", r.Attr, r.Value)
		}
	case device.PoolReservedMemCurrent, device.PoolUsedMemCurrent:
		return invalid(c, "memory pool attribute %d is read-only", r.Attr)
	default:
		return invalid(c, "memory pool attribute %d (1..%d)", r.Attr, device.PoolAttrMax)
	}
	return nil
}

func checkMemPoolGetAttr(s *Session, c *call, r *protocol.MemPoolAttrReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Attr < 1 || r.Attr > device.PoolAttrMax {
		return invalid(c, "memory pool attribute %d (1..%d)", r.Attr, device.PoolAttrMax)
	}
	if r.Value != 0 {
		return invalid(c, "value %d in a get (0)", r.Value)
	}
	return nil
}

func checkMemPoolTrim(s *Session, c *call, r *protocol.MemPoolTrimReq) error {
	return checkDevice(s, c, r.Device)
}

// checkMemPoolAccess: the flags of a set are CUmemAccess_flags (0 none,
// 1 read, 3 read-write), a get sends 0; another device than the pool's
// may not be given access (no peer access).
func checkMemPoolAccess(s *Session, c *call, r *protocol.MemPoolAccessReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if err := checkDevice(s, c, r.Peer); err != nil {
		return err
	}
	if c.f.Opcode == protocol.OpMemPoolGetAccess {
		if r.Flags != 0 {
			return invalid(c, "flags %d in a get (0)", r.Flags)
		}
		return nil
	}
	switch {
	case r.Flags != 0 && r.Flags != 1 && r.Flags != memAccessReadWrite:
		return invalid(c, "access flags %d (0 none, 1 read, 3 read-write)", r.Flags)
	case r.Peer != r.Device && r.Flags != 0:
		return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "access of device %d to a pool of device %d: peer access is not served", r.Peer, r.Device)
	}
	return nil
}

// Stream attributes: the access policy window (1) within the device's
// largest window, a hit ratio in [0, 1] and CUaccessProperty values (0..2);
// the synchronization policy (3) 1..4; the priority (8) any int; the memory
// sync domain map (9) two bytes; the memory sync domain (10) 0 or 1. Other
// ids are launch attributes, not stream ones.
func checkStreamSetAttr(s *Session, c *call, r *protocol.StreamAttrReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	return checkAttrValue(c, false, r.Attr, r.Value, windowLimit(s, int(r.Device)))
}

// windowLimit is device dev's largest access policy window (0: unknown).
func windowLimit(s *Session, dev int) uint64 {
	if p := s.props(dev); p != nil {
		return uint64(p.Attrs[maxAccessPolicyWindowAttr])
	}
	return 0
}

// checkAttrValue checks the value of a stream attribute, or of a kernel
// node's (node: COOPERATIVE is one, the synchronization policy is not);
// limit is the device's largest access policy window (0: not checked).
func checkAttrValue(c *call, node bool, attr uint32, v protocol.StreamAttrValue, limit uint64) error {
	what := "stream"
	if node {
		what = "kernel node"
	}
	if v.Pad0 != 0 || (attr != device.StreamAttrAccessPolicyWindow && v.Window != (protocol.AccessPolicyWindow{})) {
		return invalid(c, "%s attribute %d with bytes set outside its value", what, attr)
	}
	switch attr {
	case device.StreamAttrAccessPolicyWindow:
		w := v.Window
		ratio := math.Float32frombits(w.HitRatio)
		switch {
		case v.Value != 0 || w.Pad0 != 0:
			return invalid(c, "an access policy window with bytes set outside it")
		case !(ratio >= 0 && ratio <= 1):
			return invalid(c, "access policy hit ratio %g (0..1)", ratio)
		case w.HitProp > 2 || w.MissProp > 2:
			return invalid(c, "access properties %d, %d (0 normal, 1 streaming, 2 persisting)", w.HitProp, w.MissProp)
		case limit != 0 && w.Bytes > limit:
			return invalid(c, "an access policy window of %d bytes (at most %d on this device)", w.Bytes, limit)
		case w.Base > math.MaxUint64-w.Bytes:
			return invalid(c, "an access policy window [%#x, +%#x) past the end of the address space", w.Base, w.Bytes)
		}
	case device.StreamAttrSyncPolicy:
		if node {
			return invalid(c, "the synchronization policy (3) is a stream's attribute, not a kernel node's")
		}
		if v.Value < 1 || v.Value > 4 {
			return invalid(c, "synchronization policy %d (1 auto, 2 spin, 3 yield, 4 blocking sync)", v.Value)
		}
	case device.KernelNodeAttrCooperative:
		if !node {
			return invalid(c, "stream attribute %d (1, 3, 8, 9, 10)", attr)
		}
		if v.Value > 1 {
			return invalid(c, "cooperative %d (0 or 1)", v.Value)
		}
	case device.StreamAttrPriority:
	case device.StreamAttrMemSyncDomainMap:
		if !syncDomainMapOK(v.Value) {
			return invalid(c, "memory sync domain map %#x (two bytes, default and remote, each a domain below %d)", v.Value, maxSyncDomains)
		}
	case device.StreamAttrMemSyncDomain:
		if v.Value > 1 {
			return invalid(c, "memory sync domain %d (0 default, 1 remote)", v.Value)
		}
	default:
		return unservedAttr(c, node, attr)
	}
	return nil
}

// maxLaunchAttr bounds the CUlaunchAttributeID values cuda.h defines (13.0:
// up to 20; room for a few more).
const maxLaunchAttr = 31

// unservedAttr answers an attribute outside those served: a kernel node's
// that cuda.h may define is CUDA_ERROR_NOT_SUPPORTED (cluster shapes,
// programmatic launches, ...), anything else CUDA_ERROR_INVALID_VALUE.
func unservedAttr(c *call, node bool, attr uint32) error {
	if node && attr > 0 && attr <= maxLaunchAttr {
		return device.Errorf(c.f.Opcode.String(), device.ErrNotSupported, "kernel node attribute %d is not served on vgpu (1 access policy window, 2 cooperative, 8 priority, 9 and 10 memory sync domains are)", attr)
	}
	if node {
		return invalid(c, "kernel node attribute %d (1, 2, 8, 9, 10)", attr)
	}
	return invalid(c, "stream attribute %d (1, 3, 8, 9, 10)", attr)
}

func checkKernelNodeSetAttr(s *Session, c *call, r *protocol.GraphKernelNodeAttrReq) error {
	if r.Pad0 != 0 {
		return invalid(c, "padding %#x", r.Pad0)
	}
	return checkAttrValue(c, true, r.Attr, r.Value, 0) // the window's limit: the handler's, who knows the device
}

func checkKernelNodeGetAttr(s *Session, c *call, r *protocol.GraphKernelNodeAttrReq) error {
	switch r.Attr {
	case device.StreamAttrAccessPolicyWindow, device.KernelNodeAttrCooperative, device.StreamAttrPriority,
		device.StreamAttrMemSyncDomainMap, device.StreamAttrMemSyncDomain:
	case device.StreamAttrSyncPolicy:
		return invalid(c, "the synchronization policy (3) is a stream's attribute, not a kernel node's")
	default:
		return unservedAttr(c, true, r.Attr)
	}
	if r.Value != (protocol.StreamAttrValue{}) || r.Pad0 != 0 {
		return invalid(c, "a get with a value")
	}
	return nil
}

// maxSyncDomains bounds the domains a memory sync domain map names: the 4
// of Hopper and Blackwell GPUs (earlier ones have 1, and their driver
// refuses more).
const maxSyncDomains = 4

// syncDomainMapOK checks a CUlaunchMemSyncDomainMap packed as default |
// remote<<8.
func syncDomainMapOK(v uint32) bool {
	return v <= 0xffff && v&0xff < maxSyncDomains && v>>8 < maxSyncDomains
}

// maxAccessPolicyWindowAttr is CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE.
const maxAccessPolicyWindowAttr = 109

func checkStreamGetAttr(s *Session, c *call, r *protocol.StreamAttrReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	switch r.Attr {
	case device.StreamAttrAccessPolicyWindow, device.StreamAttrSyncPolicy, device.StreamAttrPriority,
		device.StreamAttrMemSyncDomainMap, device.StreamAttrMemSyncDomain:
	default:
		return invalid(c, "stream attribute %d (1, 3, 8, 9, 10)", r.Attr)
	}
	if r.Value != (protocol.StreamAttrValue{}) {
		return invalid(c, "a get with a value")
	}
	return nil
}

func checkStreamCopyAttr(s *Session, c *call, r *protocol.StreamCopyAttrReq) error {
	return checkDevice(s, c, r.Device)
}

// CUmemAccess_flags: PROT_READWRITE (3) is what is served.
const memAccessReadWrite = 3

func checkMemSetAccess(s *Session, c *call, r *protocol.MemSetAccessReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags != memAccessReadWrite {
		return device.Errorf("OpMemSetAccess", device.ErrNotSupported, "access flags %d: only read-write (3) is served", r.Flags)
	}
	if r.Size == 0 {
		return invalid(c, "size 0")
	}
	return nil
}

func checkGraphCreate(s *Session, c *call, r *protocol.GraphCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	if r.Flags != 0 {
		return invalid(c, "graph flags %#x (none defined)", r.Flags)
	}
	return nil
}

func checkGraphNodes(s *Session, c *call, r *protocol.GraphNodesReq) error {
	if r.Roots > 1 {
		return invalid(c, "roots %d (0 every node, 1 the root nodes)", r.Roots)
	}
	return nil
}

// checkDepsTail checks that a node's tail holds its numDeps dependencies
// and extra more bytes, exactly.
func checkDepsTail[Req any](c *call, numDeps uint32, extra uint64) error {
	if numDeps > protocol.MaxGraphDeps {
		return invalid(c, "%d dependencies (at most %d)", numDeps, protocol.MaxGraphDeps)
	}
	_, t, _ := protocol.Decode[Req](c.f.Payload)
	tail := uint64(len(t))
	if want := uint64(numDeps)*8 + extra; tail != want {
		return invalid(c, "a tail of %d bytes: %d dependencies and %d bytes of parameters take %d", tail, numDeps, extra, want)
	}
	return nil
}

func checkGraphDeps(s *Session, c *call, r *protocol.GraphAddEmptyNodeReq) error {
	return checkDepsTail[protocol.GraphAddEmptyNodeReq](c, r.NumDeps, 0)
}

func checkGraphAddKernelNode(s *Session, c *call, r *protocol.GraphAddKernelNodeReq) error {
	if r.Launch.Stream != 0 {
		return invalid(c, "a kernel node names no stream (got %#x)", r.Launch.Stream)
	}
	if err := checkLaunch(s, c, &r.Launch); err != nil {
		return err
	}
	return checkDepsTail[protocol.GraphAddKernelNodeReq](c, r.NumDeps, uint64(r.Launch.ParamSize))
}

func checkGraphAddMemcpyNode(s *Session, c *call, r *protocol.GraphAddMemcpyNodeReq) error {
	if err := checkGraphCopy(s, c, r.Params()); err != nil {
		return err
	}
	return checkDepsTail[protocol.GraphAddMemcpyNodeReq](c, r.NumDeps, 0)
}

func checkGraphAddMemsetNode(s *Session, c *call, r *protocol.GraphAddMemsetNodeReq) error {
	if r.ElemSize != 1 && r.ElemSize != 2 && r.ElemSize != 4 {
		return invalid(c, "element size %d (want 1, 2 or 4)", r.ElemSize)
	}
	if r.Width == 0 {
		return invalid(c, "a memset node of width 0")
	}
	return checkDepsTail[protocol.GraphAddMemsetNodeReq](c, r.NumDeps, 0)
}

func checkGraphKernelNodeSet(s *Session, c *call, r *protocol.GraphKernelNodeSetReq) error {
	if r.Launch.Stream != 0 {
		return invalid(c, "a kernel node names no stream (got %#x)", r.Launch.Stream)
	}
	if err := checkLaunch(s, c, &r.Launch); err != nil {
		return err
	}
	return checkDepsTail[protocol.GraphKernelNodeSetReq](c, 0, uint64(r.Launch.ParamSize))
}

func checkGraphMemsetNodeSet(s *Session, c *call, r *protocol.GraphMemsetNodeSetReq) error {
	p := &r.Params
	if p.ElemSize != 1 && p.ElemSize != 2 && p.ElemSize != 4 {
		return invalid(c, "element size %d (want 1, 2 or 4)", p.ElemSize)
	}
	if p.Width == 0 {
		return invalid(c, "a memset node of width 0")
	}
	return nil
}

func checkGraphMemcpyNodeSet(s *Session, c *call, r *protocol.GraphMemcpyNodeSetReq) error {
	return checkGraphCopy(s, c, &r.Params)
}

// checkGraphCopy checks a graph memcpy node's copy, as added or set.
func checkGraphCopy(s *Session, c *call, p *protocol.GraphMemcpyParams) error {
	switch p.Dir {
	case protocol.GraphCopyHtoD, protocol.GraphCopyDtoH:
		if p.Host.Kind != protocol.BufRegion {
			return errPageable(c.f.Opcode.String())
		}
		if p.Host.Len == 0 || p.Size != 0 {
			return invalid(c, "a host copy of %d bytes (Host.Len) with Size %d (want 0)", p.Host.Len, p.Size)
		}
		return checkBufRef(s, c, p.Host, protocol.BufRegion)
	case protocol.GraphCopyDtoD:
		if p.Host.Kind != protocol.BufNone || p.Size == 0 {
			return invalid(c, "a device-to-device copy of %d bytes with a host buffer of kind %d", p.Size, p.Host.Kind)
		}
		return nil
	}
	return invalid(c, "copy direction %d (1 host to device, 2 device to host, 3 device to device)", p.Dir)
}

func checkGraphEdges(s *Session, c *call, r *protocol.GraphEdgesReq) error {
	if r.Count > protocol.MaxGraphEdges {
		return invalid(c, "%d edges (at most %d)", r.Count, protocol.MaxGraphEdges)
	}
	return checkDepsTail[protocol.GraphEdgesReq](c, 0, 16*uint64(r.Count))
}

func checkGraphNodeDeps(s *Session, c *call, r *protocol.GraphNodeDepsReq) error {
	if r.Dependents > 1 {
		return invalid(c, "dependents %d (0 the node's dependencies, 1 the nodes that depend on it)", r.Dependents)
	}
	return nil
}

func checkGraphAddEventNode(s *Session, c *call, r *protocol.GraphAddEventNodeReq) error {
	if err := checkEventNodeKind(c, r.Wait); err != nil {
		return err
	}
	return checkDepsTail[protocol.GraphAddEventNodeReq](c, r.NumDeps, 0)
}

func checkGraphEventNode(s *Session, c *call, r *protocol.GraphEventNodeReq) error {
	return checkEventNodeKind(c, r.Wait)
}

// checkEventNodeKind checks an event node's kind: 0 record, 1 wait.
func checkEventNodeKind(c *call, wait uint32) error {
	if wait > 1 {
		return invalid(c, "wait %d (0 an event record node, 1 an event wait node)", wait)
	}
	return nil
}

func checkGraphEventNodeGet(s *Session, c *call, r *protocol.GraphEventNodeReq) error {
	if r.Exec != 0 || r.Event != 0 {
		return invalid(c, "a read of a node's event names no executable graph (%#x) and no event (%#x)", r.Exec, r.Event)
	}
	return checkGraphEventNode(s, c, r)
}

func checkGraphAddChildNode(s *Session, c *call, r *protocol.GraphAddChildNodeReq) error {
	return checkDepsTail[protocol.GraphAddChildNodeReq](c, r.NumDeps, 0)
}

func checkGraphNodeSetEnabled(s *Session, c *call, r *protocol.GraphNodeEnabledReq) error {
	if r.Enabled > 1 {
		return invalid(c, "enabled %d (0 or 1)", r.Enabled)
	}
	return nil
}

func checkGraphNodeGetEnabled(s *Session, c *call, r *protocol.GraphNodeEnabledReq) error {
	if r.Enabled != 0 {
		return invalid(c, "a get with a value (%d)", r.Enabled)
	}
	return nil
}

func checkArrayCreate(s *Session, c *call, r *protocol.ArrayCreateReq) error {
	if err := checkDevice(s, c, r.Device); err != nil {
		return err
	}
	d := device.ArrayDesc{Width: r.Width, Height: r.Height, Depth: r.Depth, Format: r.Format, Channels: r.Channels, Flags: r.Flags}
	return d.Validate(c.f.Opcode.String(), s.props(int(r.Device)))
}

func checkMemcpy3D(s *Session, c *call, r *protocol.BoxCopyReq) error {
	if err := checkCopyFlags(c, r.Flags); err != nil {
		return err
	}
	if m := s.maxDeviceMem(); m != 0 && (r.Width > m || r.Height > m || r.Depth > m) {
		return invalid(c, "a copy of %dx%dx%d: larger than any device (%d bytes)", r.Width, r.Height, r.Depth, m)
	}
	return nil
}

// checkResource checks a resource descriptor's scalar fields; its array
// or memory is the handler's.
func checkResource(c *call, r *protocol.ResourceDesc) error {
	if r.Flags != 0 {
		return invalid(c, "resource flags %#x (must be 0)", r.Flags)
	}
	switch r.Type {
	case protocol.ResourceArray, protocol.ResourceMipmap:
		return nil
	case protocol.ResourceLinear, protocol.ResourcePitch2D:
		d := device.ResourceDesc{Type: r.Type, Format: r.Format, Channels: r.Channels, Width: r.Width, Height: r.Height, Pitch: r.Pitch, Ptr: device.Ptr(r.Ptr)}
		_, err := d.MemorySpan(c.f.Opcode.String())
		return err
	}
	return invalid(c, "resource type %d (0 array, 1 mipmapped array, 2 linear, 3 pitch2D)", r.Type)
}

func checkTexObjectCreate(s *Session, c *call, r *protocol.TexObjectCreateReq) error {
	if err := checkResource(c, &r.Res); err != nil {
		return err
	}
	op := c.f.Opcode.String()
	t := r.Tex
	tex := device.TextureDesc{AddressMode: [3]uint32{t.AddressMode0, t.AddressMode1, t.AddressMode2},
		Filter: t.Filter, Flags: t.Flags, MaxAnisotropy: t.MaxAnisotropy, MipmapFilter: t.MipmapFilter}
	if err := tex.Check(op); err != nil {
		return err
	}
	switch r.HasView {
	case 0:
		return nil
	case 1:
		return device.ViewDesc{Format: r.View.Format}.Check(op)
	}
	return invalid(c, "HasView %d (0 or 1)", r.HasView)
}

func checkSurfObjectCreate(s *Session, c *call, r *protocol.ResourceDesc) error {
	return checkResource(c, r)
}
