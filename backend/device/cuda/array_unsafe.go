package cuda

import (
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// CUDA arrays and 3D copies between them and device memory
// (cuArray3DCreate, cuArrayDestroy, cuMemcpy3D).

// array3DDesc is CUDA_ARRAY3D_DESCRIPTOR (cuda.h, 40 bytes).
type array3DDesc struct {
	width, height, depth uint64
	format, channels     uint32
	flags                uint32
	_                    uint32
}

// memcpy3D is CUDA_MEMCPY3D (cuda.h, 200 bytes).
type memcpy3D struct {
	srcX, srcY, srcZ, srcLOD uint64
	srcType                  uint32
	_                        uint32
	srcHost                  uintptr
	srcDevice                uint64
	srcArray                 uint64
	reserved0                uintptr
	srcPitch, srcHeight      uint64
	dstX, dstY, dstZ, dstLOD uint64
	dstType                  uint32
	_                        uint32
	dstHost                  uintptr
	dstDevice                uint64
	dstArray                 uint64
	reserved1                uintptr
	dstPitch, dstHeight      uint64
	width, height, depth     uint64
}

// CUmemorytype values (cuda.h).
const (
	memTypeDevice = 2
	memTypeArray  = 3
)

var (
	_ [40 - unsafe.Sizeof(array3DDesc{})]byte
	_ [unsafe.Sizeof(array3DDesc{}) - 40]byte
	_ [200 - unsafe.Sizeof(memcpy3D{})]byte
	_ [unsafe.Sizeof(memcpy3D{}) - 200]byte
)

func (c *Context) ArrayCreate(d device.ArrayDesc) (device.Array, error) {
	desc := array3DDesc{width: d.Width, height: d.Height, depth: d.Depth, format: d.Format, channels: d.Channels, flags: d.Flags}
	var h uint64
	err := c.call("cuArray3DCreate", func() int32 { return c.l.cuArray3DCreate(&h, &desc) })
	return device.Array(h), err
}

func (c *Context) ArrayDestroy(a device.Array) error {
	return c.call("cuArrayDestroy", func() int32 { return c.l.cuArrayDestroy(uint64(a)) })
}

func (c *Context) Memcpy3D(p device.Copy3D, s device.Stream, async bool) error {
	m := memcpy3D{width: p.Width, height: p.Height, depth: p.Depth,
		srcX: p.Src.X, srcY: p.Src.Y, srcZ: p.Src.Z, srcPitch: p.Src.Pitch, srcHeight: p.Src.Height,
		dstX: p.Dst.X, dstY: p.Dst.Y, dstZ: p.Dst.Z, dstPitch: p.Dst.Pitch, dstHeight: p.Dst.Height}
	m.srcType, m.srcDevice, m.srcArray = side3D(p.Src)
	m.dstType, m.dstDevice, m.dstArray = side3D(p.Dst)
	if async {
		return c.call("cuMemcpy3DAsync", func() int32 { return c.l.cuMemcpy3DAsync(&m, uintptr(s)) })
	}
	return c.call("cuMemcpy3D", func() int32 { return c.l.cuMemcpy3D(&m) })
}

func side3D(s device.CopySide) (typ uint32, dev, arr uint64) {
	if s.Array != 0 {
		return memTypeArray, 0, uint64(s.Array)
	}
	return memTypeDevice, uint64(s.Ptr), 0
}
