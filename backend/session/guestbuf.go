package session

import (
	"fmt"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/protocol"
)

// region is guest memory registered with OpGuestRegister: long-term pinned
// by the guest driver until OpGuestUnregister.
type region struct {
	size     uint64
	dev      int
	table    *guestmem.Table // reference held while the region lives
	pieces   []engine.Piece
	mapping  []byte     // RegisterMapped: the pieces side by side in one VA range
	devPtr   device.Ptr // RegisterMapped: device address of mapping[0]
	maps     int64      // RegisterMapped: mappings taken of the client's budget
	readOnly bool
	// Graphs (handlers_graphnodes.go): the mapping made for graphs when
	// there is no mapping above, registered with the device, and its
	// mappings of the budget; the graphs, executable graphs and captures
	// using the region; retired: the guest unregistered it while in use,
	// and it goes with its last user. id is its handle.
	view     []byte
	viewMaps int64
	users    int
	retired  bool
	id       uint64
}

// acquire takes the guest memory table for the rest of the call.
func (s *Session) acquire(c *call, op string) (*guestmem.Table, error) {
	if c.table != nil {
		return c.table, nil
	}
	if s.mem == nil {
		return nil, s.segsWhy
	}
	t, err := s.mem.Acquire()
	if err != nil {
		return nil, device.Errorf(op, device.ErrNotReady, "guest memory table: %v", err)
	}
	c.table = t
	return t, nil
}

// checkSegments checks that the frame's segment list describes exactly one
// buffer of n bytes (no wrap-around, no empty segment) and takes the guest
// memory table; translation happens piece by piece (segSource).
func (s *Session) checkSegments(c *call, op string, index uint32, n uint64) (*guestmem.Table, error) {
	if !s.segsOK {
		return nil, s.segsWhy
	}
	if index != 0 {
		return nil, device.Errorf(op, device.ErrInvalidValue, "segment buffer %d: this call takes one buffer (index 0)", index)
	}
	if err := oneBuffer(c.f.Segs, n); err != nil {
		return nil, device.Errorf(op, device.ErrInvalidValue, "%v", err)
	}
	return s.acquire(c, op)
}

// oneBuffer is protocol.SplitSegments for a single buffer, without
// allocating.
func oneBuffer(segs []protocol.Segment, n uint64) error {
	var got uint64
	for i, sg := range segs {
		if sg.Len == 0 || sg.Len > n-got {
			return fmt.Errorf("%w: segment %d (%d bytes) does not fit a %d-byte buffer", protocol.ErrSegmentRange, i, sg.Len, n)
		}
		if sg.GPA+sg.Len < sg.GPA {
			return fmt.Errorf("%w: segment %d wraps around", protocol.ErrSegmentRange, i)
		}
		got += sg.Len
	}
	if got != n {
		return fmt.Errorf("%w: segments hold %d of %d bytes", protocol.ErrSegmentRange, got, n)
	}
	return nil
}

// segSource translates segments into pieces on demand, remembering the
// last region (consecutive segments mostly share one).
type segSource struct {
	op   string
	t    *guestmem.Table
	segs []protocol.Segment
	last *guestmem.Region
}

func (ss *segSource) Count() int { return len(ss.segs) }

func (ss *segSource) Piece(i int) (engine.Piece, error) {
	sg := ss.segs[i]
	if r := ss.last; r != nil && sg.GPA >= uint64(r.GuestPhys) {
		off := sg.GPA - uint64(r.GuestPhys)
		if off < r.Size && sg.Len <= r.Size-off {
			return engine.Piece{Host: r.Host[off : off+sg.Len : off+sg.Len], Region: r, Off: off}, nil
		}
	}
	r, off, err := ss.t.Locate(guestmem.GPA(sg.GPA), sg.Len)
	if err != nil {
		return engine.Piece{}, device.Errorf(ss.op, device.ErrInvalidValue, "segment %d (gpa %#x, %d bytes): %v", i, sg.GPA, sg.Len, err)
	}
	ss.last = r
	return engine.Piece{Host: r.Host[off : off+sg.Len : off+sg.Len], Region: r, Off: off}, nil
}

// segmentPieces translates the whole segment list at once (registrations
// and module images, which need every piece up front).
func (s *Session) segmentPieces(c *call, op string, index uint32, n uint64) ([]engine.Piece, error) {
	t, err := s.checkSegments(c, op, index, n)
	if err != nil {
		return nil, err
	}
	ss := segSource{op: op, t: t, segs: c.f.Segs}
	for i := range c.f.Segs {
		p, err := ss.Piece(i)
		if err != nil {
			return nil, err
		}
		c.pieces = append(c.pieces, p)
	}
	return c.pieces, nil
}

// guestSource resolves a segment or region BufRef into a piece source.
// pinned reports memory that stays valid after the reply (a registered
// region), so an async copy need not finish before the reply.
func (s *Session) guestSource(c *call, op string, ref protocol.BufRef) (engine.Source, bool, error) {
	if ref.Kind == protocol.BufSegments {
		t, err := s.checkSegments(c, op, ref.Index, ref.Len)
		if err != nil {
			return nil, false, err
		}
		c.src = segSource{op: op, t: t, segs: c.f.Segs}
		return &c.src, false, nil
	}
	ps, pinned, err := s.guestPieces(c, op, ref)
	return engine.Pieces(ps), pinned, err
}

// guestPieces resolves a segment or region BufRef into translated pieces;
// pinned as for guestSource.
func (s *Session) guestPieces(c *call, op string, ref protocol.BufRef) ([]engine.Piece, bool, error) {
	switch ref.Kind {
	case protocol.BufSegments:
		ps, err := s.segmentPieces(c, op, ref.Index, ref.Len)
		return ps, false, err
	case protocol.BufRegion:
		rg, ok := s.st.regions[ref.Region]
		if !ok {
			return nil, false, device.Errorf(op, device.ErrInvalidHandle, "region %#x is not this session's", ref.Region)
		}
		if ref.Offset > rg.size || ref.Len > rg.size-ref.Offset {
			return nil, false, device.Errorf(op, device.ErrInvalidValue, "[%d, +%d) outside region %#x of %d bytes", ref.Offset, ref.Len, ref.Region, rg.size)
		}
		if rg.mapping != nil {
			c.pieces = append(c.pieces, engine.Piece{Host: rg.mapping[ref.Offset : ref.Offset+ref.Len], Dev: rg.devPtr + device.Ptr(ref.Offset)})
			return c.pieces, true, nil
		}
		off, end := ref.Offset, ref.Offset+ref.Len
		var at uint64
		for _, p := range rg.pieces {
			pl := uint64(len(p.Host))
			if at+pl > off && at < end {
				lo := max(off, at) - at
				hi := min(end, at+pl) - at
				c.pieces = append(c.pieces, engine.Piece{Host: p.Host[lo:hi:hi], Region: p.Region, Off: p.Off + lo})
			}
			at += pl
		}
		// The guest keeps a region pinned until it unregisters it, and the
		// region holds its memory table: copies may outlive the reply.
		return c.pieces, true, nil
	}
	return nil, false, device.Errorf(op, device.ErrInvalidValue, "buffer kind %d here (want segments or a region)", ref.Kind)
}

// gatherImage copies a guest buffer into one Go slice (module images).
func (s *Session) gatherImage(c *call, op string, ref protocol.BufRef) ([]byte, error) {
	switch ref.Kind {
	case protocol.BufInline:
		b, err := protocol.InlineBytes(c.tail, ref)
		if err != nil {
			return nil, device.Errorf(op, device.ErrInvalidValue, "%v", err)
		}
		return append([]byte(nil), b...), nil
	case protocol.BufSegments, protocol.BufRegion:
		ps, _, err := s.guestPieces(c, op, ref)
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, ref.Len)
		for _, p := range ps {
			out = append(out, p.Host...)
		}
		return out, nil
	}
	return nil, device.Errorf(op, device.ErrInvalidValue, "buffer kind %d", ref.Kind)
}

func guestRegister(s *Session, c *call, r *protocol.GuestRegisterReq) (protocol.GuestRegisterReply, error) {
	const op = "OpGuestRegister"
	if err := room(op, len(s.st.regions)); err != nil {
		return protocol.GuestRegisterReply{}, err
	}
	if r.Size == 0 || c.f.NumSegs == 0 {
		return protocol.GuestRegisterReply{}, device.Errorf(op, device.ErrInvalidValue, "registration without segments")
	}
	if r.Flags&^(protocol.RegisterMapped|protocol.RegisterReadOnly) != 0 {
		return protocol.GuestRegisterReply{}, device.Errorf(op, device.ErrInvalidValue, "flags %#x", r.Flags)
	}
	ps, err := s.segmentPieces(c, op, 0, r.Size)
	if err != nil {
		return protocol.GuestRegisterReply{}, err
	}
	if err := s.newObject(op, len(s.st.regions)); err != nil {
		return protocol.GuestRegisterReply{}, err
	}
	if err := c.table.Retain(); err != nil {
		s.dropObject()
		return protocol.GuestRegisterReply{}, device.Errorf(op, device.ErrNotReady, "guest memory table: %v", err)
	}
	id := s.st.handle()
	rg := &region{size: r.Size, table: c.table, pieces: append([]engine.Piece(nil), ps...), readOnly: r.Flags&protocol.RegisterReadOnly != 0, id: id}
	fail := func(err error) (protocol.GuestRegisterReply, error) {
		s.pool.Give(budget.Mappings, rg.maps)
		rg.table.Release()
		s.dropObject()
		return protocol.GuestRegisterReply{}, err
	}
	if r.Flags&protocol.RegisterMapped != 0 {
		if len(s.cfg.Devices) == 0 {
			return fail(device.Errorf(op, device.ErrNoDevice, "no devices"))
		}
		// One mapping per run of the memfd the pieces cover (the kernel
		// merges adjacent ones; the process has vm.max_map_count):
		// counted before any is made.
		n := mappingRuns(rg.pieces)
		if err := s.pool.Take(budget.Mappings, n); err != nil {
			return fail(device.Errorf(op, device.ErrOutOfMemory, "mapping %d pieces (%d runs): %v", len(rg.pieces), n, err))
		}
		rg.maps = n
		m, err := mapPieces(rg.pieces)
		if err != nil {
			return fail(err)
		}
		p, err := s.cfg.Devices[0].HostRegister(m, rg.readOnly)
		if err != nil {
			unmap(m)
			return fail(err)
		}
		rg.mapping, rg.devPtr = m, p
		if err := s.st.add(memRange{base: uint64(p), size: r.Size, dev: 0, kind: kindMapped, owner: id}); err != nil {
			_ = s.cfg.Devices[0].HostUnregister(m)
			unmap(m)
			return fail(err)
		}
	}
	s.st.regions[id] = rg
	return protocol.GuestRegisterReply{Region: id, DevPtr: uint64(rg.devPtr)}, nil
}

func guestUnregister(s *Session, c *call, r *protocol.HandleReq) error {
	rg, ok := s.st.regions[r.Handle]
	if !ok {
		return device.Errorf("OpGuestUnregister", device.ErrInvalidHandle, "region %#x is not this session's", r.Handle)
	}
	if rg.users > 0 {
		// A graph holds it: gone for the guest now, its memory with the
		// last graph (which no longer launches).
		rg.retired = true
		delete(s.st.regions, r.Handle)
		return nil
	}
	s.dropRegion(r.Handle, rg)
	return nil
}

// mappingRuns counts the mappings mapPieces makes of ps: pieces that
// continue the previous one in the same fd (same region, next offset) share
// its mapping.
func mappingRuns(ps []engine.Piece) int64 {
	var n int64
	for i, p := range ps {
		if i == 0 || p.Region != ps[i-1].Region || p.Off != ps[i-1].Off+uint64(len(ps[i-1].Host)) {
			n++
		}
	}
	return n
}

// dropRegion waits for the device, then unregisters and unmaps a region.
func (s *Session) dropRegion(id uint64, rg *region) {
	if rg.mapping != nil {
		ctx := s.cfg.Devices[rg.dev]
		_ = s.syncDevice(rg.dev) // kernels of this session may still read it
		if err := ctx.HostUnregister(rg.mapping); err != nil {
			s.log.Warn("unregistering a guest region failed", "region", id, "err", err)
		}
		s.st.remove(uint64(rg.devPtr))
		unmap(rg.mapping)
	}
	if rg.view != nil {
		_ = s.syncDevice(rg.dev) // a graph's copy may still use it
		if err := s.cfg.Devices[rg.dev].HostUnregister(rg.view); err != nil {
			s.log.Warn("unregistering a guest region's graph mapping failed", "region", id, "err", err)
		}
		unmap(rg.view)
		s.pool.Give(budget.Mappings, rg.viewMaps)
	}
	s.pool.Give(budget.Mappings, rg.maps)
	rg.table.Release()
	delete(s.st.regions, id)
	s.dropObject()
}
