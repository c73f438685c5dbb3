package session

import (
	"sync/atomic"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Calls that do not end. A guest may launch a valid kernel that runs for
// hours (the field fuzzer's grid of 2^31-1 x 65535 blocks did, on the
// H100: bench/results/2026-11-25-h100-fuzz), and every later call that
// waits for its stream (a synchronous copy, a synchronize, a free the
// driver serialises) then waits as long: the guest gets no answer, and
// the kernel holds the GPU that other guests share. Natively a display
// GPU's watchdog ends such a kernel with CUDA_ERROR_LAUNCH_TIMEOUT; here
// Config.CallTimeout does: once the executor has spent that long on one
// call (module loads excepted: the driver's JIT may take minutes), the
// session answers that call with CUDA_ERROR_LAUNCH_TIMEOUT (702), logs
// why, closes the connection (no later reply can be trusted to come), and
// calls Config.OnCallTimeout, with which a worker process ends itself and
// so the context and the kernel (in-process sessions cannot end a kernel:
// the executor waits for it, holding the session's resources, and the
// log says so).

// ErrLaunchTimeout is CUDA_ERROR_LAUNCH_TIMEOUT.
const ErrLaunchTimeout device.Result = 702

// running is the call the executor is in (the watchdog's view).
type running struct {
	start atomic.Int64 // unix ns; 0 when the executor is idle or in an exempt call
	op    atomic.Uint32
	req   atomic.Uint64
	reply atomic.Bool // the guest waits for an answer
	fired atomic.Bool // the deadline has ended the session
}

// exempt reports calls the deadline does not cover: the driver compiles
// and links modules on the CPU, for minutes on large images, and nothing
// of the guest's can make that wait for ever.
func exempt(op protocol.Opcode) bool {
	return op.Area() == protocol.AreaModule || op == protocol.OpHello
}

// timed reports whether the call deadline covers op.
func (s *Session) timed(op protocol.Opcode) bool { return s.cfg.CallTimeout > 0 && !exempt(op) }

// enterCall and leaveCall bracket one frame's execution.
func (s *Session) enterCall(f *protocol.Frame) {
	if !s.timed(f.Opcode) {
		return
	}
	s.cur.op.Store(uint32(f.Opcode))
	s.cur.req.Store(f.RequestID)
	s.cur.reply.Store(f.Flags&protocol.FlagNoReply == 0)
}

// startCall starts the deadline's clock of the call enterCall took, at
// the executor's start of it (execute: one clock read per frame, not two).
func (s *Session) startCall(f *protocol.Frame, start time.Time) {
	if s.timed(f.Opcode) {
		s.cur.start.Store(start.UnixNano())
	}
}

func (s *Session) leaveCall() { s.cur.start.Store(0) }

// expireCall ends the session if its current call has run past the
// deadline (the watchdog, every tick).
func (s *Session) expireCall(now time.Time) {
	st := s.cur.start.Load()
	if s.cfg.CallTimeout <= 0 || st == 0 || now.UnixNano()-st <= int64(s.cfg.CallTimeout) || !s.cur.fired.CompareAndSwap(false, true) {
		return
	}
	op, req := protocol.Opcode(s.cur.op.Load()), s.cur.req.Load()
	e := &device.Error{Op: op.String(), Result: ErrLaunchTimeout,
		Detail: "the call waited longer than the backend's --call-timeout for the device (a kernel that does not end?); the connection is closed"}
	s.broken.CompareAndSwap(nil, e)
	s.stats.callTimeouts.Add(1)
	s.log.Error("a call has waited for the device past the deadline; answering CUDA_ERROR_LAUNCH_TIMEOUT and closing the connection",
		"op", op, "req", req, "waited", now.Sub(time.Unix(0, st)).Round(time.Millisecond), "timeout", s.cfg.CallTimeout,
		"ends_the_work", s.cfg.OnCallTimeout != nil)
	if s.cur.reply.Load() {
		h := protocol.NewHeader(op, req)
		s.sendForced(encodeFrame(protocol.Reply(&h, int32(ErrLaunchTimeout)), nil))
	}
	s.enqueueReply(nil, true) // hang up once that is written
	if s.cfg.OnCallTimeout != nil {
		s.cfg.OnCallTimeout(e)
	}
}
