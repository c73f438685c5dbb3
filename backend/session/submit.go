package session

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// ReplySink takes the replies to frames that reached the session on
// another path than its stream (a shared-memory request ring): "handle
// this frame, write its reply here".
type ReplySink interface {
	// WriteReply delivers one encoded reply frame (header, padded
	// payload; see protocol.ParseFrame). b is valid only during the call:
	// copy what is kept. It is called on the session's executing goroutine,
	// one reply at a time, in request order; it may wait for room (the
	// ring's own backpressure) but should not wait unboundedly. An error
	// ends the session's connection.
	WriteReply(b []byte) error
}

// ErrSessionOver: Submit was called on a session that is not serving.
var ErrSessionOver = errors.New("session: the session has ended (or Serve has not started)")

// Submit hands the session one request frame that arrived on another path
// than its stream; its reply goes to sink (never nil) instead of the
// stream. Notifications (host functions, deferred errors, device output)
// still travel on the stream. frame is copied before Submit returns, so
// it may live in memory the guest can still write.
//
// The frame joins the stream's frames in arrival order: it runs at once on
// the caller's goroutine when nothing of the session is queued or
// executing (the caller then waits for it, including its reply), else it
// is queued for the executor and Submit returns. Call Submit only while
// Serve runs, from one goroutine per sink (replies to one sink are in
// request order only if its frames are).
//
// A submitted frame may not carry guest-physical segments (FlagSegments,
// FlagMoreSegments, OpSegments): the path it came on is written by a
// process, and segments come only on the stream, from the guest kernel
// (or a host-mode client naming its own shares). It is answered with
// CUDA_ERROR_INVALID_VALUE.
//
// A frame whose header is invalid is answered on sink with
// CUDA_ERROR_INVALID_VALUE when its request id can be trusted; the error
// returned says what was wrong. A frame whose length disagrees with its
// header, or whose magic or version is wrong, is not answered: the path it
// came on is broken, and the caller should stop using it.
func (s *Session) Submit(frame []byte, sink ReplySink) error {
	if sink == nil {
		return errors.New("session: Submit needs a reply sink")
	}
	s.eq.mu.Lock()
	closed := s.eq.closed
	s.eq.mu.Unlock()
	if closed {
		return ErrSessionOver
	}
	recv := time.Now()
	h, err := protocol.DecodeHeader(frame, s.lim)
	if err != nil {
		s.stats.badFrames.Add(1)
		if errors.Is(err, protocol.ErrMagic) || errors.Is(err, protocol.ErrVersion) || errors.Is(err, protocol.ErrShort) {
			return fmt.Errorf("session: submitted frame: %w", err)
		}
		s.replyOn(sink, encodeFrame(protocol.Reply(&h, int32(device.ErrInvalidValue)), nil))
		return fmt.Errorf("session: submitted frame (request %d): %w", h.RequestID, err)
	}
	n := h.FrameLen()
	if uint64(len(frame)) != n {
		s.stats.badFrames.Add(1)
		return fmt.Errorf("session: submitted frame %v (request %d) is %d bytes, its header says %d", h.Opcode, h.RequestID, len(frame), n)
	}
	if h.Flags&(protocol.FlagSegments|protocol.FlagMoreSegments) != 0 || h.Opcode == protocol.OpSegments {
		s.stats.badFrames.Add(1)
		if h.Flags&protocol.FlagNoReply != 0 {
			s.notifyError(h.RequestID, h.Opcode, device.ErrInvalidValue)
		} else {
			s.replyOn(sink, encodeFrame(protocol.Reply(&h, int32(device.ErrInvalidValue)), nil))
		}
		return fmt.Errorf("session: submitted frame %v (request %d) carries segments, which only the stream may", h.Opcode, h.RequestID)
	}
	in := newInFrame()
	in.buf = getBuf(int(n))
	copy(*in.buf, frame)
	in.f, _, err = protocol.ParseFrame(*in.buf, s.lim)
	if err != nil { // cannot happen: the copy is the checked header's length
		in.free()
		return fmt.Errorf("session: submitted frame: %w", err)
	}
	in.recv, in.size, in.sink = recv, int64(n), sink
	if s.cfg.Trace {
		in.first, in.read = recv.UnixNano(), time.Now().UnixNano()
	}
	if in.f.Opcode == protocol.OpHostFuncDone && in.f.NumSegs == 0 {
		s.hostFuncDoneNow(&in.f, recv, sink)
		in.free()
		return nil
	}
	if !s.dispatch(in) {
		return fmt.Errorf("%w: %w", ErrSessionOver, net.ErrClosed)
	}
	return nil
}
