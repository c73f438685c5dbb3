package session

import (
	"time"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Guest host functions (cuLaunchHostFunc, cudaStreamAddCallback): the
// stream that reaches one notifies the guest and waits for its
// HOST_FUNC_DONE. The wait is bounded: once the stream has waited
// Config.HostFuncTimeout, the host function counts as failed, the stream
// goes on, and the guest is told CUDA_ERROR_TIMEOUT (909, "the wait
// operation has timed out") as a deferred error naming the
// HOST_FUNC_LAUNCH request (NOTIFY_ERROR; the library returns it from its
// next call). A late HOST_FUNC_DONE then gets CUDA_ERROR_INVALID_HANDLE:
// nothing is pending under that id. A guest that never answers therefore
// holds its stream (and, on the real driver, the context's callback
// thread, which every stream of the process shares) for at most the
// timeout.

// ErrTimeout is CUDA_ERROR_TIMEOUT.
const ErrTimeout device.Result = 909

type hostFunc struct {
	done    chan int32 // the guest's status, or ErrTimeout
	reqID   uint64     // the HOST_FUNC_LAUNCH request
	started int64      // unix ns when the stream reached it; 0 before (under hfMu)
}

// hostFuncLaunch enqueues a guest host function: when the stream reaches
// it, the guest is notified and the stream waits for OpHostFuncDone, the
// deadline, or the end of the session.
func hostFuncLaunch(s *Session, c *call, r *protocol.HostFuncReq) error {
	const op = "OpHostFuncLaunch"
	ctx, st, err := s.streamAny(r.Stream, 0, true)
	if err != nil {
		return err
	}
	if err := s.refuseCaptured(op, ctx, st, "a host function"); err != nil {
		return err
	}
	id := r.CallbackID
	hf := &hostFunc{done: make(chan int32, 1), reqID: c.f.RequestID}
	s.hfMu.Lock()
	if _, dup := s.hostFuncs[id]; dup {
		s.hfMu.Unlock()
		return device.Errorf(op, device.ErrInvalidValue, "callback id %d is already pending", id)
	}
	if err := s.pool.Take(budget.HostFuncs, 1); err != nil {
		s.hfMu.Unlock()
		return device.Errorf(op, device.ErrOutOfMemory, "too many host functions pending: %v", err)
	}
	s.hostFuncs[id] = hf
	s.hfMu.Unlock()
	stream := r.Stream
	err = ctx.LaunchHostFunc(st, func() {
		s.flushOutput(0) // the driver prints before a stream callback runs
		s.hfMu.Lock()
		hf.started = time.Now().UnixNano()
		s.hfMu.Unlock()
		s.hfRunning.Add(1)
		s.wakeReader() // its HOST_FUNC_DONE may be behind frames the reader would not read
		n := protocol.HostFuncNotify{CallbackID: id, Stream: stream}
		s.notify(protocol.OpNotifyHostFunc, protocol.Bytes(&n), true)
		select {
		case <-hf.done:
		case <-s.closing:
		}
		s.hfRunning.Add(-1)
		s.endHostFunc(id, hf)
	})
	if err != nil {
		s.endHostFunc(id, hf)
	}
	return err
}

func (s *Session) endHostFunc(id uint64, hf *hostFunc) {
	s.hfMu.Lock()
	if s.hostFuncs[id] == hf {
		delete(s.hostFuncs, id)
	}
	s.hfMu.Unlock()
	s.pool.Give(budget.HostFuncs, 1)
}

func hostFuncDone(s *Session, c *call, r *protocol.HostFuncDoneReq) error {
	s.hfMu.Lock()
	hf, ok := s.hostFuncs[r.CallbackID]
	s.hfMu.Unlock()
	if !ok {
		return device.Errorf("OpHostFuncDone", device.ErrInvalidHandle, "no host function %d is pending (finished, timed out or never launched)", r.CallbackID)
	}
	select {
	case hf.done <- r.Status:
		return nil
	default:
		return device.Errorf("OpHostFuncDone", device.ErrInvalidValue, "host function %d was already reported done", r.CallbackID)
	}
}

// expireHostFuncs ends the waits that have run past the deadline.
func (s *Session) expireHostFuncs(now time.Time) {
	limit := now.Add(-s.cfg.HostFuncTimeout).UnixNano()
	var late []*hostFunc
	var ids []uint64
	s.hfMu.Lock()
	for id, hf := range s.hostFuncs {
		if hf.started != 0 && hf.started < limit {
			late = append(late, hf)
			ids = append(ids, id)
		}
	}
	s.hfMu.Unlock()
	for i, hf := range late {
		select {
		case hf.done <- int32(ErrTimeout):
		default:
			continue // the guest answered just now
		}
		s.stats.hostFuncTimeouts.Add(1)
		s.guestWarn("host function not answered in time; its stream goes on and the guest gets CUDA_ERROR_TIMEOUT",
			"callback", ids[i], "req", hf.reqID, "timeout", s.cfg.HostFuncTimeout)
		s.stats.deferred.Add(1)
		n := protocol.ErrorNotify{RequestID: hf.reqID, Error: int32(ErrTimeout), Opcode: uint16(protocol.OpHostFuncLaunch)}
		s.notify(protocol.OpNotifyError, protocol.Bytes(&n), true)
	}
}

// watchdog enforces the session's deadlines: a frame that stopped half-way
// ends the connection; host functions past their deadline are ended.
func (s *Session) watchdog() {
	tick := min(s.cfg.FrameTimeout, s.cfg.HostFuncTimeout) / 4
	if s.cfg.CallTimeout > 0 {
		tick = min(tick, s.cfg.CallTimeout/4)
	}
	tick = min(max(tick, time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case now := <-t.C:
			if st := s.frameStart.Load(); st != 0 && now.UnixNano()-st > int64(s.cfg.FrameTimeout) {
				s.stats.frameTimeouts.Add(1)
				s.guestWarn("a frame did not arrive whole in time; closing the connection", "timeout", s.cfg.FrameTimeout)
				s.frameStart.Store(0)
				_ = s.conn.Close()
			}
			s.expireHostFuncs(now)
			s.expireCall(now)
		}
	}
}
