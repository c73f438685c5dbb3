package cuda

import (
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate).

// resourceDesc is CUDA_RESOURCE_DESC (cuda.h, 144 bytes): the type, a
// 128-byte union (array handle; or pointer, format, channels, then the
// linear size or the pitched width, height and pitch), flags.
type resourceDesc struct {
	typ      uint32
	_        uint32
	handle   uint64 // hArray or devPtr
	format   uint32
	channels uint32
	width    uint64 // linear: sizeInBytes
	height   uint64
	pitch    uint64
	_        [128 - 40]byte
	flags    uint32
	_        uint32
}

// textureDesc is CUDA_TEXTURE_DESC (cuda.h, 104 bytes).
type textureDesc struct {
	addressMode    [3]uint32
	filter         uint32
	flags          uint32
	maxAnisotropy  uint32
	mipmapFilter   uint32
	mipmapBias     float32
	minMipmapClamp float32
	maxMipmapClamp float32
	border         [4]float32
	_              [12]int32
}

// viewDesc is CUDA_RESOURCE_VIEW_DESC (cuda.h, 112 bytes).
type viewDesc struct {
	format                                   uint32
	_                                        uint32
	width, height, depth                     uint64
	firstMip, lastMip, firstLayer, lastLayer uint32
	_                                        [16]uint32
}

var (
	_ [144 - unsafe.Sizeof(resourceDesc{})]byte
	_ [unsafe.Sizeof(resourceDesc{}) - 144]byte
	_ [104 - unsafe.Sizeof(textureDesc{})]byte
	_ [unsafe.Sizeof(textureDesc{}) - 104]byte
	_ [112 - unsafe.Sizeof(viewDesc{})]byte
	_ [unsafe.Sizeof(viewDesc{}) - 112]byte
)

func toResource(r device.ResourceDesc) resourceDesc {
	d := resourceDesc{typ: r.Type, format: r.Format, channels: r.Channels, width: r.Width, height: r.Height, pitch: r.Pitch}
	if r.Type == device.ResourceArray {
		d.handle = uint64(r.Array)
		d.format, d.channels, d.width, d.height, d.pitch = 0, 0, 0, 0, 0
	} else {
		d.handle = uint64(r.Ptr)
	}
	return d
}

func (c *Context) TexObjectCreate(r device.ResourceDesc, t device.TextureDesc, v *device.ViewDesc) (device.TexObject, error) {
	res := toResource(r)
	tex := textureDesc{addressMode: t.AddressMode, filter: t.Filter, flags: t.Flags, maxAnisotropy: t.MaxAnisotropy,
		mipmapFilter: t.MipmapFilter, mipmapBias: t.MipmapBias, minMipmapClamp: t.MinMipmapClamp,
		maxMipmapClamp: t.MaxMipmapClamp, border: t.Border}
	var view *viewDesc
	if v != nil {
		view = &viewDesc{format: v.Format, width: v.Width, height: v.Height, depth: v.Depth,
			firstMip: v.FirstMip, lastMip: v.LastMip, firstLayer: v.FirstLayer, lastLayer: v.LastLayer}
	}
	var o uint64
	err := c.call("cuTexObjectCreate", func() int32 { return c.l.cuTexObjectCreate(&o, &res, &tex, view) })
	return device.TexObject(o), err
}

func (c *Context) TexObjectDestroy(o device.TexObject) error {
	return c.call("cuTexObjectDestroy", func() int32 { return c.l.cuTexObjectDestroy(uint64(o)) })
}

func (c *Context) SurfObjectCreate(r device.ResourceDesc) (device.SurfObject, error) {
	res := toResource(r)
	var o uint64
	err := c.call("cuSurfObjectCreate", func() int32 { return c.l.cuSurfObjectCreate(&o, &res) })
	return device.SurfObject(o), err
}

func (c *Context) SurfObjectDestroy(o device.SurfObject) error {
	return c.call("cuSurfObjectDestroy", func() int32 { return c.l.cuSurfObjectDestroy(uint64(o)) })
}
