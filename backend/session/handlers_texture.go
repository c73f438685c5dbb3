package session

import (
	"math"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Texture and surface objects. The guest gets the driver's value (kernels
// take it by value, so a session handle would not do); the session keeps
// the objects it created by that value and refuses any other. The
// resource's array is resolved through the session's arrays, its memory
// checked inside one of the session's allocations, so the driver only ever
// sees the session's own memory.

type texObj struct {
	dev  int
	res  protocol.ResourceDesc // as the guest gave it, for the GET_*_DESC calls
	tex  protocol.TextureDesc
	view protocol.ViewReply
	surf bool
}

// resource resolves a guest resource to the device's terms and its device.
func (s *Session) resource(op string, r protocol.ResourceDesc) (device.ResourceDesc, int, error) {
	d := device.ResourceDesc{Type: r.Type, Format: r.Format, Channels: r.Channels, Width: r.Width, Height: r.Height, Pitch: r.Pitch}
	switch r.Type {
	case protocol.ResourceArray:
		o, err := s.array(op, r.Array)
		if err != nil {
			return d, 0, err
		}
		d.Array = o.h
		return d, o.dev, nil
	case protocol.ResourceLinear, protocol.ResourcePitch2D:
		d.Ptr = device.Ptr(r.Ptr)
		n, err := d.MemorySpan(op)
		if err != nil {
			return d, 0, err
		}
		m, err := s.st.find(op, r.Ptr, n)
		if err != nil {
			return d, 0, err
		}
		return d, m.dev, nil
	}
	return d, 0, device.Errorf(op, device.ErrNotSupported, "resource type %d: arrays (0), linear (2) and pitched (3) memory are served, mipmapped arrays are not", r.Type)
}

func f32(b uint32) float32 { return math.Float32frombits(b) }

func texObjectCreate(s *Session, c *call, r *protocol.TexObjectCreateReq) (protocol.HandleReply, error) {
	const op = "OpTexObjectCreate"
	res, dev, err := s.resource(op, r.Res)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	t := r.Tex
	tex := device.TextureDesc{AddressMode: [3]uint32{t.AddressMode0, t.AddressMode1, t.AddressMode2},
		Filter: t.Filter, Flags: t.Flags, MaxAnisotropy: t.MaxAnisotropy, MipmapFilter: t.MipmapFilter,
		MipmapBias: f32(t.MipmapBias), MinMipmapClamp: f32(t.MinMipmapClamp), MaxMipmapClamp: f32(t.MaxMipmapClamp),
		Border: [4]float32{f32(t.Border0), f32(t.Border1), f32(t.Border2), f32(t.Border3)}}
	var view *device.ViewDesc
	if r.HasView != 0 {
		v := r.View
		view = &device.ViewDesc{Format: v.Format, Width: v.Width, Height: v.Height, Depth: v.Depth,
			FirstMip: v.FirstMip, LastMip: v.LastMip, FirstLayer: v.FirstLayer, LastLayer: v.LastLayer}
	}
	if err := s.newObject(op, len(s.st.texObjs)); err != nil {
		return protocol.HandleReply{}, err
	}
	o, err := s.cfg.Devices[dev].TexObjectCreate(res, tex, view)
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	s.st.texObjs[uint64(o)] = &texObj{dev: dev, res: r.Res, tex: r.Tex, view: protocol.ViewReply{View: r.View, HasView: r.HasView}}
	return protocol.HandleReply{Handle: uint64(o)}, nil
}

func surfObjectCreate(s *Session, c *call, r *protocol.ResourceDesc) (protocol.HandleReply, error) {
	const op = "OpSurfObjectCreate"
	if r.Type != protocol.ResourceArray {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "a surface's resource is an array (type 0), not type %d", r.Type)
	}
	a, err := s.array(op, r.Array)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if a.desc.Flags&device.ArraySurfaceLDST == 0 {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "array %#x was not created with CUDA_ARRAY3D_SURFACE_LDST", r.Array)
	}
	if err := s.newObject(op, len(s.st.texObjs)); err != nil {
		return protocol.HandleReply{}, err
	}
	o, err := s.cfg.Devices[a.dev].SurfObjectCreate(device.ResourceDesc{Type: device.ResourceArray, Array: a.h})
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	// One table for both kinds: the driver gives each object its own value.
	s.st.texObjs[uint64(o)] = &texObj{dev: a.dev, res: *r, surf: true}
	return protocol.HandleReply{Handle: uint64(o)}, nil
}

func (s *Session) texObject(op string, h uint64, surf bool) (*texObj, error) {
	o, ok := s.st.texObjs[h]
	if !ok || o.surf != surf {
		kind := "texture"
		if surf {
			kind = "surface"
		}
		return nil, device.Errorf(op, device.ErrInvalidValue, "%#x is not one of this session's %s objects", h, kind)
	}
	return o, nil
}

func texObjectDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	o, err := s.texObject("OpTexObjectDestroy", r.Handle, false)
	if err != nil {
		return err
	}
	if err := s.cfg.Devices[o.dev].TexObjectDestroy(device.TexObject(r.Handle)); err != nil {
		return err
	}
	delete(s.st.texObjs, r.Handle)
	s.dropObject()
	return nil
}

func surfObjectDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	o, err := s.texObject("OpSurfObjectDestroy", r.Handle, true)
	if err != nil {
		return err
	}
	if err := s.cfg.Devices[o.dev].SurfObjectDestroy(device.SurfObject(r.Handle)); err != nil {
		return err
	}
	delete(s.st.texObjs, r.Handle)
	s.dropObject()
	return nil
}

func texObjectGetResourceDesc(s *Session, c *call, r *protocol.HandleReq) (protocol.ResourceDesc, error) {
	o, err := s.texObject("OpTexObjectGetResourceDesc", r.Handle, false)
	if err != nil {
		return protocol.ResourceDesc{}, err
	}
	return o.res, nil
}

func texObjectGetTextureDesc(s *Session, c *call, r *protocol.HandleReq) (protocol.TextureDesc, error) {
	o, err := s.texObject("OpTexObjectGetTextureDesc", r.Handle, false)
	if err != nil {
		return protocol.TextureDesc{}, err
	}
	return o.tex, nil
}

// texObjectGetViewDesc answers the view the object was made with; HasView 0
// (and a zero view, CU_RES_VIEW_FORMAT_NONE) when it was made without one.
func texObjectGetViewDesc(s *Session, c *call, r *protocol.HandleReq) (protocol.ViewReply, error) {
	o, err := s.texObject("OpTexObjectGetViewDesc", r.Handle, false)
	if err != nil {
		return protocol.ViewReply{}, err
	}
	return o.view, nil
}

func surfObjectGetResourceDesc(s *Session, c *call, r *protocol.HandleReq) (protocol.ResourceDesc, error) {
	o, err := s.texObject("OpSurfObjectGetResourceDesc", r.Handle, true)
	if err != nil {
		return protocol.ResourceDesc{}, err
	}
	return o.res, nil
}

// releaseTexObjects destroys the session's texture and surface objects on
// the devices match picks (before their arrays).
func (s *Session) releaseTexObjects(match func(int) bool) {
	for h, o := range s.st.texObjs {
		if !match(o.dev) {
			continue
		}
		var err error
		if o.surf {
			err = s.cfg.Devices[o.dev].SurfObjectDestroy(device.SurfObject(h))
		} else {
			err = s.cfg.Devices[o.dev].TexObjectDestroy(device.TexObject(h))
		}
		if err != nil {
			s.log.Warn("destroying a texture or surface object at session end failed", "object", h, "err", err)
		}
		delete(s.st.texObjs, h)
		s.dropObject()
	}
}
