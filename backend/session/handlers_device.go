package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Features this backend offers (FeatureSegments only where segments are
// accepted).
const baseFeatures = protocol.FeatureBatch | protocol.FeatureHostFunc | protocol.FeatureInline | protocol.FeatureModuleHash

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
	rep := protocol.HelloReply{
		Major: uint16(protocol.Major), Minor: uint16(protocol.Minor),
		DeviceCount: uint32(len(s.cfg.Devices)),
		Features:    r.Features & offer,
		MaxPayload:  s.lim.MaxPayload, MaxSegments: s.lim.MaxSegments,
		MaxBatch:  s.cfg.MaxBatch,
		SessionID: s.cfg.ID,
	}
	s.outputOn.Store(rep.Features&protocol.FeatureDeviceOutput != 0)
	protocol.SetString(rep.BackendVersion[:], s.cfg.BackendVersion)
	protocol.SetString(rep.DeviceKind[:], s.cfg.DeviceKind)
	s.proc.setPID(r.PID, r.Role)
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
	info.ComputeMode = uint32(p.Attrs[20])
	info.DriverVersion = s.cfg.DriverVersion
	info.RuntimeVersion = s.cfg.DriverVersion
	return info, nil
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
	if err := ctx.Synchronize(); err != nil {
		return err
	}
	s.releaseAll(int(r.Device))
	if s.cfg.ExclusiveContext {
		return ctx.Reset()
	}
	return nil
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

func deviceSetLimit(s *Session, c *call, r *protocol.LimitReq) error {
	ctx, err := s.device(r.Device)
	if err != nil {
		return err
	}
	return ctx.SetLimit(int(r.Limit), r.Value)
}

func deviceGetLimit(s *Session, c *call, r *protocol.LimitReq) (protocol.LimitReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.LimitReply{}, err
	}
	v, err := ctx.GetLimit(int(r.Limit))
	return protocol.LimitReply{Value: v}, err
}

func streamCreate(s *Session, c *call, r *protocol.StreamCreateReq) (protocol.HandleReply, error) {
	if err := room("OpStreamCreate", len(s.st.streams)); err != nil {
		return protocol.HandleReply{}, err
	}
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := ctx.StreamCreate(r.Flags, r.Priority)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.streams[id] = &streamObj{dev: int(r.Device), h: h}
	s.proc.touch(int(r.Device))
	return protocol.HandleReply{Handle: id}, nil
}

func streamDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	o, ok := s.st.streams[r.Handle]
	if !ok {
		return device.Errorf("OpStreamDestroy", device.ErrInvalidHandle, "stream %#x is not this session's", r.Handle)
	}
	delete(s.st.streams, r.Handle)
	return s.cfg.Devices[o.dev].StreamDestroy(o.h)
}

func streamWaitEvent(s *Session, c *call, r *protocol.StreamWaitEventReq) error {
	e, ok := s.st.events[r.Event]
	if !ok {
		return device.Errorf("OpStreamWaitEvent", device.ErrInvalidHandle, "event %#x is not this session's", r.Event)
	}
	ctx, st, err := s.streamAny(r.Stream)
	if err != nil {
		return err
	}
	if isDefaultStream(r.Stream) {
		ctx = s.cfg.Devices[e.dev]
	}
	return ctx.StreamWaitEvent(st, e.h, r.Flags)
}

func eventCreate(s *Session, c *call, r *protocol.EventCreateReq) (protocol.HandleReply, error) {
	if err := room("OpEventCreate", len(s.st.events)); err != nil {
		return protocol.HandleReply{}, err
	}
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := ctx.EventCreate(r.Flags)
	if err != nil {
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
	return s.cfg.Devices[e.dev].EventDestroy(e.h)
}

func eventRecord(s *Session, c *call, r *protocol.EventRecordReq) error {
	e, ok := s.st.events[r.Event]
	if !ok {
		return device.Errorf("OpEventRecord", device.ErrInvalidHandle, "event %#x is not this session's", r.Event)
	}
	st, err := s.stream(r.Stream, e.dev)
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

// hostFuncLaunch enqueues a guest host function: when the stream reaches
// it, the guest is notified and the stream waits for OpHostFuncDone (or the
// end of the session).
func hostFuncLaunch(s *Session, c *call, r *protocol.HostFuncReq) error {
	ctx, st, err := s.streamAny(r.Stream)
	if err != nil {
		return err
	}
	id := r.CallbackID
	ch := make(chan int32, 1)
	s.hfMu.Lock()
	if err := room("OpHostFuncLaunch", len(s.hostFuncs)); err != nil {
		s.hfMu.Unlock()
		return err
	}
	if _, dup := s.hostFuncs[id]; dup {
		s.hfMu.Unlock()
		return device.Errorf("OpHostFuncLaunch", device.ErrInvalidValue, "callback id %d is already pending", id)
	}
	s.hostFuncs[id] = ch
	s.hfMu.Unlock()
	stream := r.Stream
	err = ctx.LaunchHostFunc(st, func() {
		s.flushOutput(0) // the driver prints before a stream callback runs
		n := protocol.HostFuncNotify{CallbackID: id, Stream: stream}
		s.notify(protocol.OpNotifyHostFunc, protocol.Bytes(&n))
		select {
		case <-ch:
		case <-s.closing:
		}
		s.hfMu.Lock()
		delete(s.hostFuncs, id)
		s.hfMu.Unlock()
	})
	if err != nil {
		s.hfMu.Lock()
		delete(s.hostFuncs, id)
		s.hfMu.Unlock()
	}
	return err
}

func hostFuncDone(s *Session, c *call, r *protocol.HostFuncDoneReq) error {
	s.hfMu.Lock()
	ch, ok := s.hostFuncs[r.CallbackID]
	s.hfMu.Unlock()
	if !ok {
		return device.Errorf("OpHostFuncDone", device.ErrInvalidHandle, "no host function %d is pending", r.CallbackID)
	}
	select {
	case ch <- r.Status:
		return nil
	default:
		return device.Errorf("OpHostFuncDone", device.ErrInvalidValue, "host function %d was already reported done", r.CallbackID)
	}
}
