package cuda

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Stream attributes (cuStreamSetAttribute, ...). CUstreamAttrValue is the
// 64-byte CUlaunchAttributeValue union; the access policy window is a
// CUaccessPolicyWindow at its start (base_ptr, num_bytes, hitRatio,
// hitProp, missProp), the integer attributes an int (the memory sync
// domain map two bytes: default, remote).

type attrValue [64]byte

func encodeStreamAttr(attr int, v device.StreamAttr) attrValue {
	var b attrValue
	switch attr {
	case device.StreamAttrAccessPolicyWindow:
		w := v.Window
		binary.LittleEndian.PutUint64(b[0:], uint64(w.Base))
		binary.LittleEndian.PutUint64(b[8:], w.Bytes)
		binary.LittleEndian.PutUint32(b[16:], math.Float32bits(w.HitRatio))
		binary.LittleEndian.PutUint32(b[20:], w.HitProp)
		binary.LittleEndian.PutUint32(b[24:], w.MissProp)
	case device.StreamAttrMemSyncDomainMap:
		b[0], b[1] = byte(v.Value), byte(v.Value>>8)
	default:
		binary.LittleEndian.PutUint32(b[0:], v.Value)
	}
	return b
}

func decodeStreamAttr(attr int, b *attrValue) device.StreamAttr {
	switch attr {
	case device.StreamAttrAccessPolicyWindow:
		return device.StreamAttr{Window: device.AccessPolicyWindow{
			Base:     device.Ptr(binary.LittleEndian.Uint64(b[0:])),
			Bytes:    binary.LittleEndian.Uint64(b[8:]),
			HitRatio: math.Float32frombits(binary.LittleEndian.Uint32(b[16:])),
			HitProp:  binary.LittleEndian.Uint32(b[20:]),
			MissProp: binary.LittleEndian.Uint32(b[24:]),
		}}
	case device.StreamAttrMemSyncDomainMap:
		return device.StreamAttr{Value: uint32(b[0]) | uint32(b[1])<<8}
	}
	return device.StreamAttr{Value: binary.LittleEndian.Uint32(b[0:])}
}

func (c *Context) StreamSetAttribute(s device.Stream, attr int, v device.StreamAttr) error {
	b := encodeStreamAttr(attr, v)
	return c.call("cuStreamSetAttribute", func() int32 {
		return c.l.cuStreamSetAttribute(uintptr(s), int32(attr), unsafe.Pointer(&b))
	})
}

func (c *Context) StreamGetAttribute(s device.Stream, attr int) (device.StreamAttr, error) {
	var b attrValue
	err := c.call("cuStreamGetAttribute", func() int32 {
		return c.l.cuStreamGetAttribute(uintptr(s), int32(attr), unsafe.Pointer(&b))
	})
	if err != nil {
		return device.StreamAttr{}, err
	}
	return decodeStreamAttr(attr, &b), nil
}

func (c *Context) StreamCopyAttributes(dst, src device.Stream) error {
	return c.call("cuStreamCopyAttributes", func() int32 { return c.l.cuStreamCopyAttributes(uintptr(dst), uintptr(src)) })
}

// Kernel node attributes: the same union, the same layouts (COOPERATIVE an
// int).

func (c *Context) GraphKernelNodeSetAttribute(n device.GraphNode, attr int, v device.StreamAttr) error {
	b := encodeStreamAttr(attr, v)
	return c.call("cuGraphKernelNodeSetAttribute", func() int32 {
		return c.l.cuGraphKernelNodeSetAttribute(uintptr(n), int32(attr), unsafe.Pointer(&b))
	})
}

func (c *Context) GraphKernelNodeGetAttribute(n device.GraphNode, attr int) (device.StreamAttr, error) {
	var b attrValue
	err := c.call("cuGraphKernelNodeGetAttribute", func() int32 {
		return c.l.cuGraphKernelNodeGetAttribute(uintptr(n), int32(attr), unsafe.Pointer(&b))
	})
	if err != nil {
		return device.StreamAttr{}, err
	}
	return decodeStreamAttr(attr, &b), nil
}

func (c *Context) GraphKernelNodeCopyAttributes(dst, src device.GraphNode) error {
	return c.call("cuGraphKernelNodeCopyAttributes", func() int32 { return c.l.cuGraphKernelNodeCopyAttributes(uintptr(dst), uintptr(src)) })
}
