package session

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/protocol"
)

// A guest's rings in its RAM (OpRingSetupGuest; protocol/ring.go): the
// session takes frames from the request ring besides its stream, through
// Submit, and answers them on the completion ring. The pages are named by
// the frame's segments, which only the guest kernel can send; each page is
// checked to lie in guest RAM and read through the backend's mapping of
// it, page by page (the pages need not be contiguous, in the guest or
// here). The guest memory table is held until the rings end, so a memory
// table QEMU replaces meanwhile stays mapped. A ring that breaks the rules
// (a position out of range, a frame header that is not valid) ends the
// rings, and the session tells the guest (NOTIFY_RING_BELL with
// RingBellBroken): vgpu.ko then fails the process's waits on them, so it
// gets errors rather than waiting for replies that never come, and its
// file's teardown is answered as usual (vgpu.ko frees the pages).
type guestRing struct {
	s    *Session
	ep   *shmring.Endpoint
	done chan struct{} // closed when the ring's reader has returned
}

// guestRings is the session's one ring pair (nil: none).
type guestRings struct {
	mu sync.Mutex
	g  *guestRing
}

func (gr *guestRings) get() *guestRing {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return gr.g
}

// ringSetupGuest maps the pages of a guest's rings and starts reading the
// request ring.
func ringSetupGuest(s *Session, c *call, r *protocol.RingSetupReq) error {
	const op = "OpRingSetupGuest"
	if !s.segsOK {
		return s.segsWhy
	}
	if s.fdc != nil {
		return device.Errorf(op, device.ErrNotSupported, "host mode's rings are RING_SETUP's (a memfd), not guest pages")
	}
	if !s.ringOn.Load() {
		return device.Errorf(op, device.ErrNotSupported, "HELLO did not negotiate FeatureShmRing")
	}
	n := protocol.RingHeaderSize + 2*r.RingBytes
	if err := oneBuffer(c.f.Segs, n); err != nil {
		return device.Errorf(op, device.ErrInvalidValue, "the ring pages: %v", err)
	}
	for i, sg := range c.f.Segs {
		if sg.GPA%protocol.RingPageSize != 0 || sg.Len%protocol.RingPageSize != 0 {
			return device.Errorf(op, device.ErrInvalidValue, "ring segment %d (gpa %#x, %d bytes) is not whole %d-byte pages", i, sg.GPA, sg.Len, protocol.RingPageSize)
		}
	}
	s.gring.mu.Lock()
	defer s.gring.mu.Unlock()
	if s.gring.g != nil {
		return device.Errorf(op, device.ErrIllegalState, "this session has rings already (RING_TEARDOWN ends them)")
	}
	if s.mem == nil {
		return s.segsWhy
	}
	t, err := s.mem.Acquire() // held until the rings end
	if err != nil {
		return device.Errorf(op, device.ErrNotReady, "guest memory table: %v", err)
	}
	pages, err := ringPages(t, c.f.Segs)
	if err != nil {
		t.Release()
		return device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	k := r.RingBytes / protocol.RingPageSize
	pg := shmring.GuestPages{Header: pages[0], Req: pages[1 : 1+k], Comp: pages[1+k:]}
	g := &guestRing{s: s, done: make(chan struct{})}
	ep, err := shmring.NewGuestServer(pg, r.RingBytes, s.ringPeer, t.Release, shmring.Options{Spin: s.cfg.RingSpin})
	if err != nil {
		t.Release()
		return device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	g.ep = ep
	s.gring.g = g
	go g.serve()
	s.log.Debug("guest rings started", "ring_bytes", r.RingBytes, "segments", len(c.f.Segs))
	return nil
}

// ringPages turns whole-page segments into the host bytes of each page,
// each checked to lie in guest RAM.
func ringPages(t *guestmem.Table, segs []protocol.Segment) ([][]byte, error) {
	var pages [][]byte
	for i, sg := range segs {
		for off := uint64(0); off < sg.Len; off += protocol.RingPageSize {
			b, err := t.Slice(guestmem.GPA(sg.GPA+off), protocol.RingPageSize)
			if err != nil {
				return nil, fmt.Errorf("ring segment %d (gpa %#x): %w", i, sg.GPA+off, err)
			}
			pages = append(pages, b[:protocol.RingPageSize:protocol.RingPageSize])
		}
	}
	return pages, nil
}

// ringPeer rings the library's doorbell: a notification on the stream,
// which vgpu.ko turns into a wake-up.
func (s *Session) ringPeer(b shmring.Bell) {
	n := protocol.RingBellNotify{Bell: uint32(b)}
	s.notify(protocol.OpNotifyRingBell, protocol.Bytes(&n), true)
}

// ringBell is a doorbell from the guest (OpRingBell). It runs on the
// stream's reader (see readLoop), never behind a call.
func ringBell(s *Session, c *call, r *protocol.RingBellReq) error {
	g := s.gring.get()
	if g == nil {
		return device.Errorf("OpRingBell", device.ErrIllegalState, "this session has no guest rings")
	}
	g.ep.Kick(shmring.Bell(r.Bell))
	return nil
}

func checkRingBell(s *Session, c *call, r *protocol.RingBellReq) error {
	if r.Bell != protocol.RingBellRequests && r.Bell != protocol.RingBellSpace {
		return invalid(c, "doorbell %d (RingBellRequests 0 or RingBellSpace 1)", r.Bell)
	}
	if r.Pad != 0 {
		return invalid(c, "padding %#x is not zero", r.Pad)
	}
	return nil
}

// ringTeardown ends the guest's rings: when it answers, the backend
// touches their pages no more (vgpu.ko frees them then).
func ringTeardown(s *Session, c *call, _ *protocol.Empty) error {
	s.endGuestRings()
	return nil
}

// endGuestRings stops the rings and releases their pages (idempotent). It
// may run while the ring's reader waits for a call it submitted; that
// call's reply then finds the ring closed, which ends the connection.
func (s *Session) endGuestRings() {
	s.gring.mu.Lock()
	g := s.gring.g
	s.gring.g = nil
	s.gring.mu.Unlock()
	if g != nil {
		_ = g.ep.Close()
	}
}

// WriteReply answers a ring frame on the completion ring, waiting for room
// at most the frame timeout.
func (g *guestRing) WriteReply(b []byte) error {
	g.ep.SetWriteDeadline(time.Now().Add(g.s.cfg.FrameTimeout))
	_, err := g.ep.Write(b)
	return err
}

// serve reads frames from the request ring and submits them until the
// ring ends or breaks.
func (g *guestRing) serve() {
	defer close(g.done)
	s := g.s
	err := g.readFrames()
	if err != nil && !errors.Is(err, ErrSessionOver) && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.guestWarn("the guest broke its rings; they end, the stream goes on", "err", err)
		s.stats.badFrames.Add(1)
		s.gring.mu.Lock()
		mine := s.gring.g == g
		if mine {
			s.gring.g = nil
		}
		s.gring.mu.Unlock()
		if mine {
			_ = g.ep.Close()
			n := protocol.RingBellNotify{Bell: protocol.RingBellBroken}
			s.notify(protocol.OpNotifyRingBell, protocol.Bytes(&n), true)
		}
	}
}

func (g *guestRing) readFrames() error {
	s := g.s
	var hb [protocol.HeaderSize]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(g.ep, hb[:]); err != nil {
			return err
		}
		h, err := protocol.DecodeHeader(hb[:], s.lim)
		if err != nil {
			// Answered when its request id can be trusted (Submit does);
			// the process wrote it, and its library never would.
			_ = s.Submit(hb[:], g)
			return fmt.Errorf("guest ring: frame %v (request %d): %w", h.Opcode, h.RequestID, err)
		}
		n := int(h.FrameLen())
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		copy(buf, hb[:])
		if _, err := io.ReadFull(g.ep, buf[protocol.HeaderSize:]); err != nil {
			return err
		}
		if err := s.Submit(buf, g); err != nil && (errors.Is(err, ErrSessionOver) || errors.Is(err, protocol.ErrMagic)) {
			return err
		}
		g.ep.NoteTaken(g.ep.ReadPos())
	}
}
