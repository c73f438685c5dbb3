package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Features this backend offers (FeatureSegments only where segments are
// accepted).
const baseFeatures = protocol.FeatureBatch | protocol.FeatureBatchSync | protocol.FeatureHostFunc | protocol.FeatureInline | protocol.FeatureModuleHash

func hello(s *Session, c *call, r *protocol.HelloReq) (protocol.HelloReply, error) {
	offer := baseFeatures
	switch {
	case s.sharer != nil: // host mode: segments name memory shared with OpHostShare
		offer |= protocol.FeatureHostShare
	case s.segsOK:
		offer |= protocol.FeatureSegments
	}
	if s.cfg.Output != nil {
		offer |= protocol.FeatureDeviceOutput
	}
	if rc, ok := s.conn.(transport.RingConn); ok && rc.RingOK() {
		offer |= protocol.FeatureShmRing
	} else if s.fdc == nil && s.segsOK && s.mem != nil && !s.cfg.NoGuestRings {
		offer |= protocol.FeatureShmRing // rings in guest RAM (OpRingSetupGuest)
	}
	rep := protocol.HelloReply{
		Major: uint16(protocol.Major), Minor: uint16(protocol.Minor),
		DeviceCount: uint32(len(s.cfg.Devices)),
		Features:    r.Features & offer,
		MaxPayload:  s.lim.MaxPayload, MaxSegments: s.lim.MaxSegments,
		MaxBatch:  s.cfg.MaxBatch,
		SessionID: s.cfg.ID,
	}
	s.outputOn.Store(rep.Features&protocol.FeatureDeviceOutput != 0)
	s.ringOn.Store(rep.Features&protocol.FeatureShmRing != 0)
	protocol.SetString(rep.BackendVersion[:], s.cfg.BackendVersion)
	protocol.SetString(rep.DeviceKind[:], s.cfg.DeviceKind)
	s.proc.setPID(r.PID, r.Role)
	s.helloed.Store(true)
	s.log.Debug("hello", "client", protocol.GetString(r.ClientVersion[:]), "pid", r.PID, "role", r.Role, "features", rep.Features)
	return rep, nil
}

func deviceGetCount(s *Session, c *call, _ *protocol.Empty) (protocol.DeviceCountReply, error) {
	return protocol.DeviceCountReply{Count: uint32(len(s.cfg.Devices))}, nil
}

func deviceGetInfo(s *Session, c *call, r *protocol.DeviceReq) (protocol.DeviceInfo, error) {
	var info protocol.DeviceInfo
	ctx, err := s.device(r.Device)
	if err != nil {
		return info, err
	}
	p, err := ctx.Properties()
	if err != nil {
		return info, err
	}
	protocol.SetString(info.Name[:], p.Name)
	info.UUID = p.UUID
	info.LUID = p.LUID
	info.LUIDNodeMask = p.LUIDNodeMask
	info.TotalMem = p.TotalMem
	if q := s.cfg.Quota; q != nil && q.Limit != 0 && q.Limit < info.TotalMem {
		info.TotalMem = q.Limit
	}
	copy(info.Attrs[:], p.Attrs[:])
	for _, a := range unservedAttrs {
		info.Attrs[a] = 0
	}
	info.ComputeMode = uint32(p.Attrs[20])
	info.DriverVersion = s.cfg.DriverVersion
	info.RuntimeVersion = s.cfg.DriverVersion
	return info, nil
}

// unservedAttrs are the device attributes (CUdevice_attribute) that
// advertise a driver feature vgpu does not serve: the guest is told 0, the
// answer of a device without it, so that libraries take their other path
// instead of failing on the first call of the family. The families vgpu
// serves report the host's value: the virtual-memory API (102) and memory
// pools (115); their export handle types are not served (memory of one VM
// is never shared with another process), so those attributes read 0 (a
// cuMemCreate that asks for them anyway, as NCCL's does, gets memory that
// cannot be exported).
var unservedAttrs = []int{
	96,  // COOPERATIVE_MULTI_DEVICE_LAUNCH: cuLaunchCooperativeKernelMultiDevice (cooperative launches on one device, 95, are served)
	103, // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (virtual-memory handles)
	104, // HANDLE_TYPE_WIN32_HANDLE_SUPPORTED
	105, // HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED
	110, // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: no RDMA into a VM's memory
	119, // MEMPOOL_SUPPORTED_HANDLE_TYPES: a pool's export handle types (bits), none
	// Managed memory is not served (docs/ARCHITECTURE.md, "Managed
	// memory"): cuMemAllocManaged answers CUDA_ERROR_NOT_SUPPORTED, and the
	// guest sees a device without it, so runtimes and libraries take their
	// cudaMalloc paths.
	83,  // MANAGED_MEMORY
	88,  // PAGEABLE_MEMORY_ACCESS: the GPU cannot read a guest's pageable memory
	89,  // CONCURRENT_MANAGED_ACCESS
	100, // PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
	101, // DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
}

func driverGetVersion(s *Session, c *call, _ *protocol.Empty) (protocol.VersionReply, error) {
	return protocol.VersionReply{Version: s.cfg.DriverVersion}, nil
}

func driverGetInfo(s *Session, c *call, _ *protocol.Empty) (protocol.DriverInfoReply, error) {
	var rep protocol.DriverInfoReply
	protocol.SetString(rep.DriverVersion[:], s.cfg.DriverRelease)
	return rep, nil
}

// deviceGetProcesses lists this VM's processes on the device (the VM's
// ProcessTable, with the VM's other workers' entries where there are
// workers: never another VM's), at most protocol.MaxProcesses.
func deviceGetProcesses(s *Session, c *call, r *protocol.DeviceReq) error {
	if _, err := s.device(r.Device); err != nil {
		return err
	}
	list := s.procs.List(int(r.Device))
	rep := protocol.ProcessListReply{Total: uint32(len(list))}
	if len(list) > protocol.MaxProcesses {
		list = list[:protocol.MaxProcesses]
	}
	rep.Count = uint32(len(list))
	c.out = protocol.Append(c.out, &rep)
	for i := range list {
		c.out = protocol.Append(c.out, &list[i])
	}
	return nil
}

// deviceGetMonitor passes on the device's live readings: the physical
// GPU's, shared with whoever else uses it (docs/NVML.md says what a
// VM learns from them).
func deviceGetMonitor(s *Session, c *call, r *protocol.DeviceReq) (protocol.DeviceMonitor, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.DeviceMonitor{}, err
	}
	m, err := ctx.Monitor()
	if err != nil {
		return protocol.DeviceMonitor{}, err
	}
	return protocol.DeviceMonitor{
		Valid: uint32(m.Has), GPUUtil: m.GPUUtil, MemUtil: m.MemUtil, TemperatureC: m.TemperatureC,
		PowerMilliwatts: m.PowerMilliwatts, PowerLimitMilliwatts: m.PowerLimitMilliwatts,
		FanPercent: m.FanPercent, Pstate: m.Pstate, Clocks: m.Clocks, MaxClocks: m.MaxClocks,
	}, nil
}

// deviceReset frees everything this session holds on the device; only a
// session that owns its context alone resets the context itself.
func deviceReset(s *Session, c *call, r *protocol.DeviceReq) error {
	ctx, err := s.device(r.Device)
	if err != nil {
		return err
	}
	if err := s.syncDevice(int(r.Device)); err != nil {
		return err
	}
	s.releaseAll(int(r.Device))
	s.cfg.LimitTable.drop(s.cfg.Devices, s, int(r.Device))
	if s.cfg.ExclusiveContext {
		return ctx.Reset()
	}
	return nil
}

// deviceSynchronize waits for the session's work on a device (the whole
// context only when the session owns it).
func deviceSynchronize(s *Session, c *call, r *protocol.DeviceReq) error {
	if _, err := s.device(r.Device); err != nil {
		return err
	}
	return s.syncDevice(int(r.Device))
}

func memGetInfo(s *Session, c *call, r *protocol.DeviceReq) (protocol.MemInfoReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.MemInfoReply{}, err
	}
	free, total, err := ctx.MemGetInfo()
	if err != nil {
		return protocol.MemInfoReply{}, err
	}
	if q := s.cfg.Quota; q != nil && q.Limit != 0 {
		free, total = min(free, q.Available()), min(total, q.Limit)
	}
	return protocol.MemInfoReply{Free: free, Total: total}, nil
}

// deviceSetLimit sets a limit for this session (limits.go).
func deviceSetLimit(s *Session, c *call, r *protocol.LimitReq) error {
	if _, err := s.device(r.Device); err != nil {
		return err
	}
	return deviceSetLimitShared(s, int(r.Device), r.Limit, r.Value)
}

func deviceGetLimit(s *Session, c *call, r *protocol.LimitReq) (protocol.LimitReply, error) {
	if _, err := s.device(r.Device); err != nil {
		return protocol.LimitReply{}, err
	}
	v, err := deviceGetLimitShared(s, int(r.Device), r.Limit)
	return protocol.LimitReply{Value: v}, err
}

func streamCreate(s *Session, c *call, r *protocol.StreamCreateReq) (protocol.HandleReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject("OpStreamCreate", len(s.st.streams)); err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := ctx.StreamCreate(s.deviceStreamFlags(r.Flags), r.Priority)
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.streams[id] = &streamObj{dev: int(r.Device), h: h, blocking: r.Flags&streamNonBlocking == 0}
	s.proc.touch(int(r.Device))
	return protocol.HandleReply{Handle: id}, nil
}

func streamDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	o, ok := s.st.streams[r.Handle]
	if !ok {
		return device.Errorf("OpStreamDestroy", device.ErrInvalidHandle, "stream %#x is not this session's", r.Handle)
	}
	delete(s.st.streams, r.Handle)
	s.dropObject()
	return s.dropStream(o)
}

func streamWaitEvent(s *Session, c *call, r *protocol.StreamWaitEventReq) error {
	e, ok := s.st.events[r.Event]
	if !ok {
		return device.Errorf("OpStreamWaitEvent", device.ErrInvalidHandle, "event %#x is not this session's", r.Event)
	}
	ctx, st, err := s.streamAny(r.Stream, e.dev, true)
	if err != nil {
		return err
	}
	if r.Flags&eventWaitExternal != 0 && s.st.captures > 0 {
		s.st.externalWaits++ // captured as a wait node, maybe: held at the end of the capture
	}
	return ctx.StreamWaitEvent(st, e.h, r.Flags)
}

func eventCreate(s *Session, c *call, r *protocol.EventCreateReq) (protocol.HandleReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject("OpEventCreate", len(s.st.events)); err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := ctx.EventCreate(r.Flags)
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.events[id] = &eventObj{dev: int(r.Device), h: h}
	s.proc.touch(int(r.Device))
	return protocol.HandleReply{Handle: id}, nil
}

func eventDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	e, ok := s.st.events[r.Handle]
	if !ok {
		return device.Errorf("OpEventDestroy", device.ErrInvalidHandle, "event %#x is not this session's", r.Handle)
	}
	delete(s.st.events, r.Handle)
	s.dropObject()
	if e.users > 0 { // a graph's node records or waits for it: kept for the graph
		e.retired = true
		return nil
	}
	return s.cfg.Devices[e.dev].EventDestroy(e.h)
}

func eventRecord(s *Session, c *call, r *protocol.EventRecordReq) error {
	e, ok := s.st.events[r.Event]
	if !ok {
		return device.Errorf("OpEventRecord", device.ErrInvalidHandle, "event %#x is not this session's", r.Event)
	}
	st, err := s.stream(r.Stream, e.dev, true)
	if err != nil {
		return err
	}
	return s.cfg.Devices[e.dev].EventRecord(e.h, st)
}

func eventElapsedTime(s *Session, c *call, r *protocol.ElapsedTimeReq) (protocol.ElapsedTimeReply, error) {
	a, ok := s.st.events[r.Start]
	b, ok2 := s.st.events[r.End]
	if !ok || !ok2 {
		return protocol.ElapsedTimeReply{}, device.Errorf("OpEventElapsedTime", device.ErrInvalidHandle, "events %#x, %#x: not both this session's", r.Start, r.End)
	}
	if a.dev != b.dev {
		return protocol.ElapsedTimeReply{}, device.Errorf("OpEventElapsedTime", device.ErrInvalidValue, "events of different devices")
	}
	ms, err := s.cfg.Devices[a.dev].EventElapsed(a.h, b.h)
	return protocol.ElapsedTimeReply{Milliseconds: ms}, err
}
