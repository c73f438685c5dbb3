package session

import (
	"errors"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// handler executes one request: it decodes c.f's payload, does the work and
// appends the reply payload to c.out. A returned error becomes the reply's
// status (its CUresult, see device.ResultOf).
type handler func(s *Session, c *call) error

// handlers is the dispatch table, one line per opcode. To add a call: add
// the opcode and payloads in protocol/, write the handler below with one of
// the shape helpers, and add its line here. TestHandlersCoverOps checks this
// table against protocol.Ops. An opcode missing here is answered with
// CUDA_ERROR_NOT_SUPPORTED and logged with its number.
var handlers map[protocol.Opcode]handler

func init() {
	handlers = map[protocol.Opcode]handler{
		protocol.OpHello:     reply(hello),
		protocol.OpGoodbye:   do(func(*Session, *call, *protocol.Empty) error { return nil }),
		protocol.OpBatch:     batch,
		protocol.OpPing:      do(func(*Session, *call, *protocol.Empty) error { return nil }),
		protocol.OpSegments:  do(strayContinuation),
		protocol.OpSetOption: do(setOption),
		protocol.OpGetStats:  reply(getStats),

		protocol.OpDeviceGetCount:     reply(deviceGetCount),
		protocol.OpDeviceGetInfo:      reply(deviceGetInfo),
		protocol.OpDriverGetVersion:   reply(driverGetVersion),
		protocol.OpDeviceSynchronize:  onDevice(func(ctx device.Context) error { return ctx.Synchronize() }),
		protocol.OpDeviceReset:        do(deviceReset),
		protocol.OpMemGetInfo:         reply(memGetInfo),
		protocol.OpDeviceSetLimit:     do(deviceSetLimit),
		protocol.OpDeviceGetLimit:     reply(deviceGetLimit),
		protocol.OpDriverGetInfo:      reply(driverGetInfo),
		protocol.OpDeviceGetProcesses: do(deviceGetProcesses),
		protocol.OpDeviceGetMonitor:   reply(deviceGetMonitor),

		protocol.OpMemAlloc:           reply(memAlloc),
		protocol.OpMemFree:            do(memFree),
		protocol.OpMemcpyHtoD:         do(memcpyHtoD),
		protocol.OpMemcpyDtoH:         do(memcpyDtoH),
		protocol.OpMemcpyDtoD:         do(memcpyDtoD),
		protocol.OpMemset:             do(memset),
		protocol.OpGuestRegister:      reply(guestRegister),
		protocol.OpGuestUnregister:    do(guestUnregister),
		protocol.OpMemGetAddressRange: reply(memGetAddressRange),
		protocol.OpHostShare:          do(hostShare),
		protocol.OpHostUnshare:        do(hostUnshare),

		protocol.OpModuleLoad:         reply(moduleLoad),
		protocol.OpModuleUnload:       do(moduleUnload),
		protocol.OpModuleGetFunction:  do(moduleGetFunction),
		protocol.OpModuleGetGlobal:    reply(moduleGetGlobal),
		protocol.OpFuncGetAttributes:  reply(funcGetAttributes),
		protocol.OpFuncSetAttribute:   do(funcSetAttribute),
		protocol.OpOccupancyMaxBlocks: reply(occupancyMaxBlocks),

		protocol.OpLaunchKernel: do(launchKernel),

		protocol.OpStreamCreate:      reply(streamCreate),
		protocol.OpStreamDestroy:     do(streamDestroy),
		protocol.OpStreamSynchronize: onStream(device.Context.StreamSynchronize),
		protocol.OpStreamQuery:       onStream(device.Context.StreamQuery),
		protocol.OpStreamWaitEvent:   do(streamWaitEvent),

		protocol.OpEventCreate:      reply(eventCreate),
		protocol.OpEventDestroy:     do(eventDestroy),
		protocol.OpEventRecord:      do(eventRecord),
		protocol.OpEventSynchronize: onEvent(device.Context.EventSynchronize),
		protocol.OpEventQuery:       onEvent(device.Context.EventQuery),
		protocol.OpEventElapsedTime: reply(eventElapsedTime),

		protocol.OpHostFuncLaunch: do(hostFuncLaunch),
		protocol.OpHostFuncDone:   do(hostFuncDone),
	}
}

// run validates c.f against the opcode table and the session's rights, then
// dispatches it.
func (s *Session) run(c *call) error {
	f := c.f
	if f.Flags&(protocol.FlagReply|protocol.FlagNotify|protocol.FlagOutput) != 0 {
		return device.Errorf("frame", device.ErrInvalidValue, "%v: guests send requests, not replies or notifications", f.Opcode)
	}
	if _, err := protocol.CheckRequest(f); err != nil {
		if errors.Is(err, protocol.ErrUnknownOp) {
			s.stats.unknownOps.Add(1)
			return &device.Error{Op: "dispatch", Result: device.ErrNotSupported, Detail: err.Error()}
		}
		return &device.Error{Op: f.Opcode.String(), Result: device.ErrInvalidValue, Detail: err.Error()}
	}
	if f.NumSegs > 0 && !s.segsOK {
		return s.segsWhy
	}
	h, ok := handlers[f.Opcode]
	if !ok {
		s.stats.unknownOps.Add(1)
		s.guestWarn("no handler for opcode; add one to session.handlers", "opcode", uint16(f.Opcode), "name", f.Opcode)
		return device.Errorf("dispatch", device.ErrNotSupported, "opcode %#04x (%v) is not served by this backend", uint16(f.Opcode), f.Opcode)
	}
	return h(s, c)
}

// decode copies the fixed part of c's payload into a Req and keeps the tail.
func decode[Req any](c *call) (Req, error) {
	req, tail, err := protocol.Decode[Req](c.f.Payload)
	if err != nil {
		return req, &device.Error{Op: c.f.Opcode.String(), Result: device.ErrInvalidValue, Detail: err.Error()}
	}
	c.tail = tail
	return req, nil
}

// reply is the shape "request struct in, reply struct out".
func reply[Req, Rep any](f func(*Session, *call, *Req) (Rep, error)) handler {
	return func(s *Session, c *call) error {
		req, err := decode[Req](c)
		if err != nil {
			return err
		}
		rep, err := f(s, c, &req)
		if err != nil {
			return err
		}
		c.out = protocol.Append(c.out, &rep)
		return nil
	}
}

// do is the shape "request struct in, empty reply" (or a handler that
// writes c.out itself).
func do[Req any](f func(*Session, *call, *Req) error) handler {
	return func(s *Session, c *call) error {
		req, err := decode[Req](c)
		if err != nil {
			return err
		}
		return f(s, c, &req)
	}
}

// onDevice is the shape "DeviceReq in, one context call".
func onDevice(f func(device.Context) error) handler {
	return do(func(s *Session, c *call, r *protocol.DeviceReq) error {
		ctx, err := s.device(r.Device)
		if err != nil {
			return err
		}
		return f(ctx)
	})
}

// onStream is the shape "stream handle in, one context call".
func onStream(f func(device.Context, device.Stream) error) handler {
	return do(func(s *Session, c *call, r *protocol.HandleReq) error {
		ctx, st, err := s.streamAny(r.Handle)
		if err != nil {
			return err
		}
		return f(ctx, st)
	})
}

// onEvent is the shape "event handle in, one context call".
func onEvent(f func(device.Context, device.Event) error) handler {
	return do(func(s *Session, c *call, r *protocol.HandleReq) error {
		e, ok := s.st.events[r.Handle]
		if !ok {
			return device.Errorf(c.f.Opcode.String(), device.ErrInvalidHandle, "event %#x is not this session's", r.Handle)
		}
		return f(s.cfg.Devices[e.dev], e.h)
	})
}

func strayContinuation(s *Session, c *call, _ *protocol.Empty) error {
	return device.Errorf("OpSegments", device.ErrInvalidValue, "request %d has no open segment list", c.f.RequestID)
}

// device returns guest ordinal d's context.
func (s *Session) device(d uint32) (device.Context, error) {
	if int(d) >= len(s.cfg.Devices) || int64(d) < 0 {
		return nil, device.Errorf("device", device.ErrInvalidDevice, "device %d of %d", d, len(s.cfg.Devices))
	}
	return s.cfg.Devices[d], nil
}

// isDefaultStream: 0 (NULL), CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2).
func isDefaultStream(h uint64) bool { return h <= 2 }

// stream resolves a stream handle for work on device dev.
func (s *Session) stream(h uint64, dev int) (device.Stream, error) {
	if isDefaultStream(h) {
		return device.DefaultStream, nil
	}
	o, ok := s.st.streams[h]
	if !ok {
		return 0, device.Errorf("stream", device.ErrInvalidHandle, "stream %#x is not this session's", h)
	}
	if o.dev != dev {
		return 0, device.Errorf("stream", device.ErrInvalidValue, "stream %#x belongs to device %d, the memory to device %d", h, o.dev, dev)
	}
	return o.h, nil
}

// streamAny resolves a stream handle with its device (default streams:
// device 0).
func (s *Session) streamAny(h uint64) (device.Context, device.Stream, error) {
	if isDefaultStream(h) {
		if len(s.cfg.Devices) == 0 {
			return nil, 0, device.Errorf("stream", device.ErrNoDevice, "no devices")
		}
		return s.cfg.Devices[0], device.DefaultStream, nil
	}
	o, ok := s.st.streams[h]
	if !ok {
		return nil, 0, device.Errorf("stream", device.ErrInvalidHandle, "stream %#x is not this session's", h)
	}
	return s.cfg.Devices[o.dev], o.h, nil
}
