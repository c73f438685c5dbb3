package session

import (
	"github.com/vgpu-project/vgpu/protocol"
)

// Device output. A worker process that serves one guest process captures
// what the driver prints on its fd 1 and 2 (device printf, assert
// messages; Config.Output). Before the reply of every call, and before a
// host function runs, the session sends what was printed so far as
// OpNotifyOutput frames, the last marked OutputFinal, and sets FlagOutput
// on the reply: the guest library writes them to the program's own
// stdout/stderr before the call returns, which is where a native program
// sees them (the driver prints at synchronising calls). A library that did
// not ask for it (FeatureDeviceOutput) gets nothing; the lines go to the
// backend's log, rate-limited.

// flushOutput sends the device output printed so far and reports whether
// it sent any. reqID != 0: the flush precedes the reply to request reqID
// (which the caller marks FlagOutput when this returns true): its frames
// carry that id and the last has OutputFinal, so a guest that reads them on
// another path than the reply knows which reply waits for them. A flush
// before a host function has neither (no reply follows it).
func (s *Session) flushOutput(reqID uint64) bool {
	if s.cfg.Output == nil {
		return false
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.outputOn.Load() {
		s.cfg.Output.Drain(func(stream uint32, b []byte) {
			s.guestWarn("device output (the guest library did not ask for it)", "stream", stream, "text", string(b))
		})
		return false
	}
	var last []byte // the last frame of the flush is sent when the next is known
	sent := s.cfg.Output.Drain(func(stream uint32, b []byte) {
		for len(b) > 0 {
			n := min(len(b), protocol.MaxOutputChunk)
			if last != nil {
				s.sendOutput(reqID, last, false)
			}
			p := protocol.OutputNotify{Stream: stream, Len: uint32(n)}
			last = append(protocol.Bytes(&p), b[:n]...)
			b = b[n:]
		}
	})
	if last == nil {
		return false
	}
	s.sendOutput(reqID, last, reqID != 0)
	return sent
}

// sendOutput sends one OpNotifyOutput (payload: OutputNotify and the bytes).
func (s *Session) sendOutput(reqID uint64, payload []byte, final bool) {
	if final {
		payload[4] = byte(protocol.OutputFinal) // OutputNotify.Flags, little-endian
	}
	h := protocol.NewHeader(protocol.OpNotifyOutput, reqID)
	h.Flags = protocol.FlagNotify
	s.sendFrame(h, payload)
}
