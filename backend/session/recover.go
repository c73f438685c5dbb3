package session

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// The recover boundary. A panic while serving a guest (a bug in a handler,
// a device, a codec) must end that session's work, never the process: with
// `--isolate none` the process serves every VM. A caught panic is logged
// with its stack, counted (Stats.Panics, vgpu_session_panics_total), and
// leaves the session broken: the request that hit it and every later one
// fail with CUDA_ERROR_UNKNOWN, like a context after a sticky error, and
// OnStickyError retires a worker process. A crash inside the driver itself
// (a signal in C code) cannot be recovered here; only the process boundary
// contains that (docs/RELIABILITY.md).

// guardedRun runs one call behind the boundary.
func (s *Session) guardedRun(c *call) (err error) {
	if b := s.broken.Load(); b != nil {
		return b
	}
	defer func() {
		if r := recover(); r != nil {
			err = s.breakOnPanic(c.f.Opcode.String(), r)
		}
	}()
	return s.run(c)
}

// guardedHandleFrame runs the executor's frame handling (segment-list
// assembly included) behind the boundary; a frame that panicked outside
// a call still gets its answer.
func (s *Session) guardedHandleFrame(f *protocol.Frame, recv time.Time) {
	s.enterCall(f)
	defer s.leaveCall()
	defer func() {
		if r := recover(); r != nil {
			err := s.breakOnPanic(f.Opcode.String(), r)
			if f.Flags&protocol.FlagNoReply == 0 {
				h := protocol.Reply(&f.Header, int32(device.ResultOf(err)))
				s.replyOn(s.c.sink, encodeFrame(h, nil))
			}
		}
	}()
	s.handleFrame(f, recv)
}

// guardedReadLoop runs the reader behind the boundary: a panic there ends
// the connection (the stream can no longer be trusted).
func (s *Session) guardedReadLoop() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.breakOnPanic("read", r)
		}
	}()
	return s.readLoop()
}

// breakOnPanic records a caught panic and marks the session broken.
func (s *Session) breakOnPanic(where string, r any) error {
	s.stats.panics.Add(1)
	e := &device.Error{Op: "session", Result: device.ErrUnknown,
		Detail: fmt.Sprintf("internal error while serving %s (%v): this session's work has stopped; the guest process must restart its CUDA work", where, r)}
	first := s.broken.CompareAndSwap(nil, e)
	s.log.Error("panic caught at the session boundary; session broken", "where", where, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	if first && s.cfg.OnStickyError != nil {
		s.cfg.OnStickyError(e)
	}
	if !first {
		return s.broken.Load()
	}
	return e
}
