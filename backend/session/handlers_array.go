package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// CUDA arrays and 3D copies. An array is the session's by a session handle
// (never the driver's CUarray); its bytes count against the VM's memory cap
// from ARRAY_CREATE to ARRAY_DESTROY. A 3D copy names an array of the
// session or linear device memory the session holds on each side, both on
// one device, and the whole box must lie inside both: nothing reaches the
// driver that could touch memory the session does not own. Host sides do
// not come here: the library stages them through device memory with the
// ordinary copies, which read and write guest memory.

type arrayObj struct {
	dev   int
	h     device.Array
	desc  device.ArrayDesc
	bytes uint64
}

// arrayBytes is an upper bound of the device memory an array takes (the
// driver may pad; the cap counts the elements).
func arrayBytes(d device.ArrayDesc) uint64 {
	rb, rows, slices := d.Extent()
	return rb * rows * slices
}

func arrayCreate(s *Session, c *call, r *protocol.ArrayCreateReq) (protocol.HandleReply, error) {
	const op = "OpArrayCreate"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	d := device.ArrayDesc{Width: r.Width, Height: r.Height, Depth: r.Depth, Format: r.Format, Channels: r.Channels, Flags: r.Flags}
	if err := d.Validate(op, s.props(int(r.Device))); err != nil {
		return protocol.HandleReply{}, err
	}
	n := arrayBytes(d)
	if err := s.newObject(op, len(s.st.arrays)); err != nil {
		return protocol.HandleReply{}, err
	}
	if !s.cfg.Quota.Reserve(n) {
		s.dropObject()
		return protocol.HandleReply{}, device.Errorf(op, device.ErrOutOfMemory, "an array of %d bytes would exceed this VM's device memory cap of %d bytes (%d in use)", n, s.cfg.Quota.Limit, s.cfg.Quota.Used())
	}
	h, err := ctx.ArrayCreate(d)
	if err != nil {
		s.cfg.Quota.Release(n)
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.arrays[id] = &arrayObj{dev: int(r.Device), h: h, desc: d, bytes: n}
	return protocol.HandleReply{Handle: id}, nil
}

func (s *Session) array(op string, h uint64) (*arrayObj, error) {
	o, ok := s.st.arrays[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "array %#x is not this session's (destroyed, foreign or never created)", h)
	}
	return o, nil
}

func arrayDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	o, err := s.array("OpArrayDestroy", r.Handle)
	if err != nil {
		return err
	}
	if err := s.cfg.Devices[o.dev].ArrayDestroy(o.h); err != nil {
		return err
	}
	s.dropArray(r.Handle, o)
	return nil
}

func (s *Session) dropArray(id uint64, o *arrayObj) {
	delete(s.st.arrays, id)
	s.cfg.Quota.Release(o.bytes)
	s.dropObject()
}

// releaseArrays destroys the session's arrays on the devices match picks.
func (s *Session) releaseArrays(match func(int) bool) {
	for id, o := range s.st.arrays {
		if match(o.dev) {
			if err := s.cfg.Devices[o.dev].ArrayDestroy(o.h); err != nil {
				s.log.Warn("destroying an array at session end failed", "array", id, "err", err)
			}
			s.dropArray(id, o)
		}
	}
}

func arrayGetDescriptor(s *Session, c *call, r *protocol.HandleReq) (protocol.ArrayDescReply, error) {
	o, err := s.array("OpArrayGetDescriptor", r.Handle)
	if err != nil {
		return protocol.ArrayDescReply{}, err
	}
	d := o.desc
	return protocol.ArrayDescReply{Width: d.Width, Height: d.Height, Depth: d.Depth, Format: d.Format, Channels: d.Channels, Flags: d.Flags}, nil
}

// copySide resolves one side of a 3D copy to the device's terms and the
// device it is on, checking that the box lies inside the array or inside
// one of the session's allocations.
func (s *Session) copySide(op string, p protocol.CopySide, w, h, d uint64) (device.CopySide, int, error) {
	out := device.CopySide{X: p.X, Y: p.Y, Z: p.Z}
	if p.Array != 0 {
		o, err := s.array(op, p.Array)
		if err != nil {
			return out, 0, err
		}
		if err := out.CheckArray(op, o.desc, w, h, d); err != nil {
			return out, 0, err
		}
		out.Array = o.h
		return out, o.dev, nil
	}
	out.Ptr, out.Pitch, out.Height = device.Ptr(p.Ptr), p.Pitch, p.Height
	lo, n, err := out.LinearSpan(op, w, h, d)
	if err != nil {
		return out, 0, err
	}
	m, err := s.st.find(op, lo, n)
	if err != nil {
		return out, 0, err
	}
	return out, m.dev, nil
}

func memcpy3D(s *Session, c *call, r *protocol.BoxCopyReq) error {
	const op = "OpMemcpy3D"
	if r.Width == 0 || r.Height == 0 || r.Depth == 0 {
		return nil
	}
	src, sdev, err := s.copySide(op, r.Src, r.Width, r.Height, r.Depth)
	if err != nil {
		return err
	}
	dst, ddev, err := s.copySide(op, r.Dst, r.Width, r.Height, r.Depth)
	if err != nil {
		return err
	}
	if sdev != ddev {
		return device.Errorf(op, device.ErrNotSupported, "copies between devices (%d to %d) are not supported yet", sdev, ddev)
	}
	st, err := s.stream(r.Stream, sdev, true)
	if err != nil {
		return err
	}
	ctx := s.cfg.Devices[sdev]
	p := device.Copy3D{Src: src, Dst: dst, Width: r.Width, Height: r.Height, Depth: r.Depth}
	return ordered(ctx, st, r.Flags&protocol.CopyAsync != 0, func(async bool) error {
		return ctx.Memcpy3D(p, st, async)
	})
}
