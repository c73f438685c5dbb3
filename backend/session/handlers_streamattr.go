package session

import (
	"math"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Stream attributes (cuStreamSetAttribute, cuStreamGetAttribute,
// cuStreamCopyAttributes), forwarded for the session's streams and its
// default streams. An access policy window is a cache hint over device
// addresses: it must lie inside memory of the session's on the stream's
// device.

// streamOf resolves a stream of a request and its device (a default
// stream's is dev).
func (s *Session) streamOf(h uint64, dev uint32) (device.Context, int, device.Stream, error) {
	d := int(dev)
	if o, ok := s.st.streams[h]; ok && !isDefaultStream(h) {
		d = o.dev
	}
	ctx, st, err := s.streamAny(h, d, false)
	return ctx, d, st, err
}

func toStreamAttr(v protocol.StreamAttrValue) device.StreamAttr {
	w := v.Window
	return device.StreamAttr{Value: v.Value, Window: device.AccessPolicyWindow{
		Base: device.Ptr(w.Base), Bytes: w.Bytes, HitRatio: math.Float32frombits(w.HitRatio), HitProp: w.HitProp, MissProp: w.MissProp}}
}

func streamSetAttribute(s *Session, c *call, r *protocol.StreamAttrReq) error {
	const op = "OpStreamSetAttribute"
	ctx, dev, st, err := s.streamOf(r.Stream, r.Device)
	if err != nil {
		return err
	}
	if r.Attr == device.StreamAttrAccessPolicyWindow {
		if err := s.windowMemory(op, r.Value.Window, dev); err != nil {
			return err
		}
	}
	return ctx.StreamSetAttribute(st, int(r.Attr), toStreamAttr(r.Value))
}

// windowMemory checks that an access policy window (of a stream or a
// kernel node of device dev) lies in the session's memory of dev.
func (s *Session) windowMemory(op string, w protocol.AccessPolicyWindow, dev int) error {
	if w.Bytes == 0 {
		return nil
	}
	m, err := s.st.find(op, w.Base, w.Bytes)
	if err != nil {
		return err
	}
	if m.dev != dev {
		return device.Errorf(op, device.ErrInvalidValue, "an access policy window over memory of device %d for device %d", m.dev, dev)
	}
	return nil
}

// fromStreamAttr is an attribute's value as the protocol carries it.
func fromStreamAttr(v device.StreamAttr) protocol.StreamAttrValue {
	w := v.Window
	return protocol.StreamAttrValue{Value: v.Value, Window: protocol.AccessPolicyWindow{
		Base: uint64(w.Base), Bytes: w.Bytes, HitRatio: math.Float32bits(w.HitRatio), HitProp: w.HitProp, MissProp: w.MissProp}}
}

func streamGetAttribute(s *Session, c *call, r *protocol.StreamAttrReq) (protocol.StreamAttrValue, error) {
	ctx, _, st, err := s.streamOf(r.Stream, r.Device)
	if err != nil {
		return protocol.StreamAttrValue{}, err
	}
	v, err := ctx.StreamGetAttribute(st, int(r.Attr))
	if err != nil {
		return protocol.StreamAttrValue{}, err
	}
	return fromStreamAttr(v), nil
}

func streamCopyAttributes(s *Session, c *call, r *protocol.StreamCopyAttrReq) error {
	const op = "OpStreamCopyAttributes"
	ctx, dd, dst, err := s.streamOf(r.Dst, r.Device)
	if err != nil {
		return err
	}
	_, sd, src, err := s.streamOf(r.Src, r.Device)
	if err != nil {
		return err
	}
	if dd != sd {
		return device.Errorf(op, device.ErrInvalidValue, "streams of devices %d and %d: copy attributes between streams of one device", sd, dd)
	}
	return ctx.StreamCopyAttributes(dst, src)
}
