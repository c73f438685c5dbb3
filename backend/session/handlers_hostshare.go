package session

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Host mode shares memory as memfds (OpHostShare): the fd arrives beside
// the frame, the connection maps it at the range the client chose, and
// from then on segments and registrations name it like guest RAM.

// takeFDs returns the fds that arrived since the last call (none on
// transports that cannot carry fds).
func (s *Session) takeFDs() []int {
	if s.fdc == nil {
		return nil
	}
	return s.fdc.TakeFDs()
}

func (s *Session) closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// strayFDs closes fds that came with a frame that takes none.
func (s *Session) strayFDs(h *protocol.Header, fds []int) {
	if len(fds) == 0 {
		return
	}
	s.closeFDs(fds)
	s.stats.strayFDs.Add(uint64(len(fds)))
	s.guestWarn("file descriptors sent with a frame that takes none; closed", "op", h.Opcode, "req", h.RequestID, "fds", len(fds))
}

func hostShare(s *Session, c *call, r *protocol.HostShareReq) error {
	const op = "OpHostShare"
	fds := s.frameFDs
	s.frameFDs = nil
	if s.sharer == nil {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrNotSupported, "this connection cannot share memory (host mode's unix socket only)")
	}
	if len(fds) != 1 {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrInvalidValue, "HOST_SHARE came with %d file descriptors, want exactly 1 (SCM_RIGHTS in the sendmsg of the frame)", len(fds))
	}
	if r.Flags != 0 {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrInvalidValue, "flags %#x (none defined)", r.Flags)
	}
	// A share holds one fd and one mapping of the client's budget until
	// it is unmapped (the hook New registered gives them back).
	if err := s.pool.Take(budget.FDs, 1); err != nil {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrOutOfMemory, "%v", err)
	}
	if err := s.pool.Take(budget.Mappings, 1); err != nil {
		s.pool.Give(budget.FDs, 1)
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrOutOfMemory, "%v", err)
	}
	if err := s.sharer.Share(guestmem.GPA(r.Base), r.Size, fds[0]); err != nil { // owns the fd now
		s.pool.Give(budget.FDs, 1)
		s.pool.Give(budget.Mappings, 1)
		if errors.Is(err, transport.ErrShareLimit) {
			return device.Errorf(op, device.ErrOutOfMemory, "%v", err)
		}
		return device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	return nil
}

func hostUnshare(s *Session, c *call, r *protocol.HostUnshareReq) error {
	const op = "OpHostUnshare"
	if s.sharer == nil {
		return device.Errorf(op, device.ErrNotSupported, "this connection cannot share memory (host mode's unix socket only)")
	}
	if err := s.sharer.Unshare(guestmem.GPA(r.Base)); err != nil {
		return device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	return nil
}

// ringSetup moves a host-mode session onto shared-memory rings
// (OpRingSetup; protocol/ring.go): the connection takes the memfd and
// eventfds, and the reply to this request is the first frame on the
// completion ring.
func ringSetup(s *Session, c *call, r *protocol.RingSetupReq) error {
	const op = "OpRingSetup"
	fds := s.frameFDs
	s.frameFDs = nil
	rc, ok := s.conn.(transport.RingConn)
	if !ok || !rc.RingOK() {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrNotSupported, "this connection cannot move onto shared-memory rings (host mode's unix socket only)")
	}
	if !s.ringOn.Load() {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrNotSupported, "HELLO did not negotiate FeatureShmRing")
	}
	if len(fds) != protocol.RingFDs {
		s.closeFDs(fds)
		return device.Errorf(op, device.ErrInvalidValue, "RING_SETUP came with %d file descriptors, want %d (the memfd and 4 eventfds)", len(fds), protocol.RingFDs)
	}
	if err := rc.StartRing(r.RingBytes, fds); err != nil { // owns the fds now
		return device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	s.log.Debug("session moved onto shared-memory rings", "ring_bytes", r.RingBytes)
	return nil
}

// checkRingSetup checks OpRingSetup's arguments (the fds, memfd and
// eventfds are the handler's and the connection's).
func checkRingSetup(s *Session, c *call, r *protocol.RingSetupReq) error {
	if r.Flags != 0 {
		return invalid(c, "ring flags %#x (none defined)", r.Flags)
	}
	if err := shmring.CheckSize(r.RingBytes); err != nil {
		return invalid(c, "%v", err)
	}
	return nil
}
