package session

import (
	"errors"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// handler executes one request: it decodes c.f's payload, does the work and
// appends the reply payload to c.out. A returned error becomes the reply's
// status (its CUresult, see device.ResultOf).
type handler func(s *Session, c *call) error

// handlers is the dispatch table: opcode → handler. It is generated
// (dispatch_gen.go) from the call registry, protocol/registry.go, whose
// rows name each opcode's handler and validator; to add a call see
// docs/ADDING_A_CALL.md. An opcode missing here is answered with
// CUDA_ERROR_NOT_SUPPORTED and logged with its number.
var handlers map[protocol.Opcode]handler

// noop is the handler of calls whose answer is the reply itself (PING,
// GOODBYE).
func noop(*Session, *call, *protocol.Empty) error { return nil }

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
	if f.Opcode != protocol.OpHello && !s.helloed.Load() {
		return errNoHello
	}
	if f.NumSegs > 0 && !s.segsOK {
		return s.segsWhy
	}
	if err := s.validate(c); err != nil {
		return err
	}
	if s.cfg.Trace && !c.batch {
		c.validated = time.Now().UnixNano()
	}
	h, ok := handlers[f.Opcode]
	if !ok {
		s.stats.unknownOps.Add(1)
		s.guestWarn("no handler for opcode; give its row in protocol/registry.go a Handler", "opcode", uint16(f.Opcode), "name", f.Opcode)
		return device.Errorf("dispatch", device.ErrNotSupported, "opcode %#04x (%v) is not served by this backend", uint16(f.Opcode), f.Opcode)
	}
	if f.Opcode == protocol.OpHostFuncDone || f.Opcode == protocol.OpRingBell {
		// Run beside the executor (readLoop): they touch no stream, nor
		// the state the executor owns.
		return h(s, c)
	}
	s.st.touched = nil
	err := h(s, c)
	if o := s.st.touched; o != nil {
		s.st.touched = nil
		if err != nil {
			s.captureFailed(o, f.Opcode, err) // handlers_graph.go
		}
	}
	return err
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

// onStream is the shape "stream handle in, one context call"; join says
// the call waits for the stream (the legacy default stream's ordering is
// applied first, see defstream.go).
func onStream(f func(device.Context, device.Stream) error, join bool) handler {
	return do(func(s *Session, c *call, r *protocol.HandleReq) error {
		s.noteStream(r.Handle) // synchronizing or querying a capturing stream fails and invalidates its capture
		ctx, st, err := s.streamAny(r.Handle, 0, join)
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

// errNoHello answers every call before the guest's HELLO.
var errNoHello = device.Errorf("session", device.ErrNotInitialized, "no HELLO yet: a session starts with HELLO")

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
