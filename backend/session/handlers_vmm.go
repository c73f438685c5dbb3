package session

import (
	"sort"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// The virtual-memory API: address ranges the guest reserves, physical
// memory it creates, mappings of the one into the other. All three are the
// session's: a reservation by its base, physical memory by a session
// handle, a mapping by its base. Physical memory counts against the VM's
// memory cap from MEM_CREATE until it is released and unmapped (the driver
// frees it then); reservations are bounded by vaFactor times the largest
// device's memory. A mapped range becomes memory the session's copies and
// memsets may touch once MEM_SET_ACCESS made it accessible (adjacent
// accessible mappings make one range, so a copy may span them), and stops
// being so at MEM_UNMAP. Mappings only of physical memory of the
// reservation's device, accessed by that device (no peer access).

// vaFactor bounds a session's reserved address space: this many times the
// largest device's memory (PyTorch's expandable segments reserve about the
// device's memory once).
const vaFactor = 8

type reserveObj struct {
	dev  int
	size uint64
}

type physObj struct {
	dev      int
	h        device.MemHandle
	size     uint64
	maps     int
	released bool
}

type mappingObj struct {
	base, size uint64
	phys       *physObj
	access     bool
}

func memAddressReserve(s *Session, c *call, r *protocol.MemReserveReq) (protocol.PtrReply, error) {
	const op = "OpMemAddressReserve"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.PtrReply{}, err
	}
	if m := s.maxDeviceMem(); m != 0 && (r.Size > vaFactor*m || s.st.reservedBytes > vaFactor*m-r.Size) {
		return protocol.PtrReply{}, device.Errorf(op, device.ErrOutOfMemory, "%d more bytes of address space: this session may reserve %d in all (%d reserved)", r.Size, vaFactor*m, s.st.reservedBytes)
	}
	if err := s.newObject(op, len(s.st.reserves)); err != nil {
		return protocol.PtrReply{}, err
	}
	p, err := ctx.MemAddressReserve(r.Size, r.Alignment)
	if err != nil {
		s.dropObject()
		return protocol.PtrReply{}, err
	}
	s.st.reserves[uint64(p)] = &reserveObj{dev: int(r.Device), size: r.Size}
	s.st.reservedBytes += r.Size
	return protocol.PtrReply{Ptr: uint64(p)}, nil
}

// mappingsIn returns the session's mappings that overlap [p, p+n), by
// base, and whether each lies wholly inside.
func (s *Session) mappingsIn(p, n uint64) (inside, cut []*mappingObj) {
	for _, m := range s.st.maps {
		if m.base < p+n && m.base+m.size > p {
			if m.base >= p && m.base+m.size <= p+n {
				inside = append(inside, m)
			} else {
				cut = append(cut, m)
			}
		}
	}
	sort.Slice(inside, func(i, j int) bool { return inside[i].base < inside[j].base })
	return inside, cut
}

func memAddressFree(s *Session, c *call, r *protocol.MemRangeReq) error {
	const op = "OpMemAddressFree"
	o, ok := s.st.reserves[r.Ptr]
	if !ok || o.size != r.Size {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not one of this session's reservations (free a whole reservation)", r.Ptr, r.Size)
	}
	if in, cut := s.mappingsIn(r.Ptr, r.Size); len(in)+len(cut) > 0 {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) still has %d mapping(s): unmap them first", r.Ptr, r.Size, len(in)+len(cut))
	}
	if err := s.cfg.Devices[o.dev].MemAddressFree(device.Ptr(r.Ptr), r.Size); err != nil {
		return err
	}
	delete(s.st.reserves, r.Ptr)
	s.st.reservedBytes -= o.size
	s.dropObject()
	return nil
}

func memCreate(s *Session, c *call, r *protocol.MemCreateReq) (protocol.HandleReply, error) {
	const op = "OpMemCreate"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject(op, len(s.st.phys)); err != nil {
		return protocol.HandleReply{}, err
	}
	if !s.cfg.Quota.Reserve(r.Size) {
		s.dropObject()
		return protocol.HandleReply{}, device.Errorf(op, device.ErrOutOfMemory, "%d bytes would exceed this VM's device memory cap of %d bytes (%d in use)", r.Size, s.cfg.Quota.Limit, s.cfg.Quota.Used())
	}
	// Requested export handle types (NCCL always asks for POSIX file
	// descriptors) are accepted and not passed on: the host's memory is
	// created unexportable, and exporting it is not served (memory of one
	// VM is never shared with another process).
	prop := device.AllocProp{Type: r.Type, Compression: r.Compression, RDMA: r.RDMA, Usage: r.Usage}
	h, err := ctx.MemCreate(r.Size, prop)
	if err != nil {
		s.cfg.Quota.Release(r.Size)
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.phys[id] = &physObj{dev: int(r.Device), h: h, size: r.Size}
	s.proc.charge(int(r.Device), r.Size)
	return protocol.HandleReply{Handle: id}, nil
}

// physGone ends the accounting of released physical memory once its last
// mapping is gone (the driver frees it then).
func (s *Session) physGone(o *physObj) {
	if !o.released || o.maps > 0 {
		return
	}
	s.cfg.Quota.Release(o.size)
	s.dropObject()
	s.proc.uncharge(o.dev, o.size)
}

func memRelease(s *Session, c *call, r *protocol.HandleReq) error {
	o, ok := s.st.phys[r.Handle]
	if !ok {
		return device.Errorf("OpMemRelease", device.ErrInvalidValue, "physical memory %#x is not this session's", r.Handle)
	}
	if err := s.cfg.Devices[o.dev].MemRelease(o.h); err != nil {
		return err
	}
	delete(s.st.phys, r.Handle)
	o.released = true
	s.physGone(o)
	return nil
}

func memMap(s *Session, c *call, r *protocol.MemMapReq) error {
	const op = "OpMemMap"
	o, ok := s.st.phys[r.Handle]
	if !ok {
		return device.Errorf(op, device.ErrInvalidValue, "physical memory %#x is not this session's", r.Handle)
	}
	if r.Size == 0 || r.Offset > o.size || r.Size > o.size-r.Offset {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) of %#x bytes of physical memory", r.Offset, r.Size, o.size)
	}
	var res *reserveObj
	for base, v := range s.st.reserves {
		if r.Ptr >= base && r.Size <= v.size && r.Ptr-base <= v.size-r.Size {
			res = v
			break
		}
	}
	if res == nil {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not inside one of this session's reservations", r.Ptr, r.Size)
	}
	if res.dev != o.dev {
		return device.Errorf(op, device.ErrNotSupported, "memory of device %d in a range reserved through device %d: map into a range reserved on the same device", o.dev, res.dev)
	}
	if in, cut := s.mappingsIn(r.Ptr, r.Size); len(in)+len(cut) > 0 {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is already mapped", r.Ptr, r.Size)
	}
	if err := s.newObject(op, len(s.st.maps)); err != nil {
		return err
	}
	if err := s.cfg.Devices[o.dev].MemMap(device.Ptr(r.Ptr), r.Size, r.Offset, o.h); err != nil {
		s.dropObject()
		return err
	}
	s.st.maps[r.Ptr] = &mappingObj{base: r.Ptr, size: r.Size, phys: o}
	o.maps++
	return nil
}

func memUnmap(s *Session, c *call, r *protocol.MemRangeReq) error {
	const op = "OpMemUnmap"
	in, cut := s.mappingsIn(r.Ptr, r.Size)
	if len(cut) > 0 {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) cuts the mapping at %#x: unmap whole mappings", r.Ptr, r.Size, cut[0].base)
	}
	if len(in) == 0 {
		return device.Errorf(op, device.ErrInvalidValue, "nothing of this session's is mapped in [%#x, +%#x)", r.Ptr, r.Size)
	}
	// The driver unmaps the range in one call: every mapping in it goes.
	if err := s.cfg.Devices[in[0].phys.dev].MemUnmap(device.Ptr(r.Ptr), r.Size); err != nil {
		return err
	}
	for _, m := range in {
		s.dropMapping(m)
	}
	return nil
}

// dropMapping forgets mapping m (already unmapped on the device).
func (s *Session) dropMapping(m *mappingObj) {
	if m.access {
		s.st.removeVMM(m.base, m.size)
	}
	delete(s.st.maps, m.base)
	s.dropObject()
	m.phys.maps--
	s.physGone(m.phys)
}

func memSetAccess(s *Session, c *call, r *protocol.MemSetAccessReq) error {
	const op = "OpMemSetAccess"
	in, cut := s.mappingsIn(r.Ptr, r.Size)
	if len(cut) > 0 || len(in) == 0 {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not whole mappings of this session", r.Ptr, r.Size)
	}
	at := r.Ptr
	for _, m := range in {
		if m.base != at {
			return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not mapped throughout (nothing at %#x)", r.Ptr, r.Size, at)
		}
		if m.phys.dev != int(r.Device) {
			return device.Errorf(op, device.ErrNotSupported, "device %d's access to memory of device %d (no peer access)", r.Device, m.phys.dev)
		}
		at += m.size
	}
	if at != r.Ptr+r.Size {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not mapped throughout (nothing at %#x)", r.Ptr, r.Size, at)
	}
	if err := s.cfg.Devices[r.Device].MemSetAccess(device.Ptr(r.Ptr), r.Size); err != nil {
		return err
	}
	for _, m := range in {
		if !m.access {
			m.access = true
			if err := s.st.addVMM(m.base, m.size, m.phys.dev); err != nil {
				return err
			}
		}
	}
	return nil
}

// addVMM makes [base, base+size) memory the session may touch, merged with
// accessible mappings right beside it.
func (st *state) addVMM(base, size uint64, dev int) error {
	if err := st.add(memRange{base: base, size: size, dev: dev, kind: kindVMM}); err != nil {
		return err
	}
	i := sort.Search(len(st.ranges), func(i int) bool { return st.ranges[i].base >= base })
	if i+1 < len(st.ranges) {
		if n := st.ranges[i+1]; n.kind == kindVMM && n.dev == dev && n.base == base+size {
			st.ranges[i].size += n.size
			st.ranges = append(st.ranges[:i+1], st.ranges[i+2:]...)
		}
	}
	if i > 0 {
		if p := st.ranges[i-1]; p.kind == kindVMM && p.dev == dev && p.base+p.size == base {
			st.ranges[i-1].size += st.ranges[i].size
			st.ranges = append(st.ranges[:i], st.ranges[i+1:]...)
		}
	}
	return nil
}

// removeVMM takes [base, base+size) out of the accessible range holding
// it, splitting it.
func (st *state) removeVMM(base, size uint64) {
	i := sort.Search(len(st.ranges), func(i int) bool { return st.ranges[i].base+st.ranges[i].size > base })
	if i == len(st.ranges) || st.ranges[i].kind != kindVMM || st.ranges[i].base > base {
		return
	}
	r := st.ranges[i]
	var pieces []memRange
	if r.base < base {
		pieces = append(pieces, memRange{base: r.base, size: base - r.base, dev: r.dev, kind: kindVMM})
	}
	if end := base + size; end < r.base+r.size {
		pieces = append(pieces, memRange{base: end, size: r.base + r.size - end, dev: r.dev, kind: kindVMM})
	}
	st.ranges = append(st.ranges[:i], append(pieces, st.ranges[i+1:]...)...)
}

// releaseVMM unmaps, releases and frees what the session holds of the
// virtual-memory API on the devices match accepts.
func (s *Session) releaseVMM(match func(int) bool) {
	st := &s.st
	for _, m := range st.maps {
		if match(m.phys.dev) {
			_ = s.cfg.Devices[m.phys.dev].MemUnmap(device.Ptr(m.base), m.size)
			s.dropMapping(m)
		}
	}
	for id, o := range st.phys {
		if match(o.dev) {
			_ = s.cfg.Devices[o.dev].MemRelease(o.h)
			delete(st.phys, id)
			o.released = true
			s.physGone(o)
		}
	}
	for base, o := range st.reserves {
		if match(o.dev) {
			_ = s.cfg.Devices[o.dev].MemAddressFree(device.Ptr(base), o.size)
			delete(st.reserves, base)
			st.reservedBytes -= o.size
			s.dropObject()
		}
	}
}
