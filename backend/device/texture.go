package device

// Texture and surface objects: a resource (an array, or linear or pitched
// device memory), how a texture samples it, and an optional view.

// TexObject and SurfObject are the driver's CUtexObject and CUsurfObject.
type (
	TexObject  uint64
	SurfObject uint64
)

// Resource types (CUresourcetype).
const (
	ResourceArray   = 0
	ResourceLinear  = 2
	ResourcePitch2D = 3
)

// ResourceDesc is a CUDA_RESOURCE_DESC: Array (Type ResourceArray), or
// device memory at Ptr of Format x Channels elements, Width bytes
// (ResourceLinear) or Width x Height elements in rows Pitch bytes apart
// (ResourcePitch2D).
type ResourceDesc struct {
	Type             uint32
	Array            Array
	Ptr              Ptr
	Format, Channels uint32
	Width, Height    uint64
	Pitch            uint64
}

// TextureDesc is a CUDA_TEXTURE_DESC.
type TextureDesc struct {
	AddressMode                                [3]uint32
	Filter, Flags, MaxAnisotropy, MipmapFilter uint32
	MipmapBias, MinMipmapClamp, MaxMipmapClamp float32
	Border                                     [4]float32
}

// ViewDesc is a CUDA_RESOURCE_VIEW_DESC.
type ViewDesc struct {
	Format                                   uint32
	Width, Height, Depth                     uint64
	FirstMip, LastMip, FirstLayer, LastLayer uint32
}

// Texture flags (CU_TRSF_*) and limits.
const (
	TexReadAsInteger    = 0x01
	TexNormalizedCoords = 0x02
	TexSRGB             = 0x10
	TexDisableTrilinear = 0x20
	TexSeamlessCubemap  = 0x40
	texFlagsKnown       = TexReadAsInteger | TexNormalizedCoords | TexSRGB | TexDisableTrilinear | TexSeamlessCubemap
	maxAddressMode      = 3  // CU_TR_ADDRESS_MODE_BORDER
	maxFilter           = 1  // CU_TR_FILTER_MODE_LINEAR
	maxAnisotropy       = 16 // the driver clamps to [1, 16]
	maxViewFormat       = 0x22
)

// Check validates the scalar fields of a texture descriptor.
func (t TextureDesc) Check(op string) error {
	for i, m := range t.AddressMode {
		if m > maxAddressMode {
			return Errorf(op, ErrInvalidValue, "address mode %d of dimension %d (0 wrap, 1 clamp, 2 mirror, 3 border)", m, i)
		}
	}
	if t.Filter > maxFilter || t.MipmapFilter > maxFilter {
		return Errorf(op, ErrInvalidValue, "filter modes %d, %d (0 point, 1 linear)", t.Filter, t.MipmapFilter)
	}
	if t.Flags&^texFlagsKnown != 0 {
		return Errorf(op, ErrInvalidValue, "texture flags %#x (CU_TRSF_* bits of %#x)", t.Flags, texFlagsKnown)
	}
	if t.MaxAnisotropy > maxAnisotropy {
		return Errorf(op, ErrInvalidValue, "max anisotropy %d (at most %d)", t.MaxAnisotropy, maxAnisotropy)
	}
	return nil
}

// Check validates a view's format (the driver checks it against the
// resource).
func (v ViewDesc) Check(op string) error {
	if v.Format > maxViewFormat {
		return Errorf(op, ErrInvalidValue, "resource view format %#x (0 none .. %#x)", v.Format, maxViewFormat)
	}
	return nil
}

// MemorySpan returns the bytes [Ptr, Ptr+n) of device memory a linear or
// pitched resource covers, checking its format, width against pitch and
// overflow.
func (r ResourceDesc) MemorySpan(op string) (n uint64, err error) {
	es := ArrayDesc{Format: r.Format, Channels: r.Channels}.ElemSize()
	if es == 0 {
		return 0, Errorf(op, ErrInvalidValue, "resource format %#x with %d channels", r.Format, r.Channels)
	}
	switch r.Type {
	case ResourceLinear:
		if r.Width == 0 || r.Width%es != 0 {
			return 0, Errorf(op, ErrInvalidValue, "linear resource of %d bytes (a positive multiple of its %d-byte element)", r.Width, es)
		}
		return r.Width, nil
	case ResourcePitch2D:
		s := CopySide{Ptr: r.Ptr, Pitch: r.Pitch}
		if r.Width > 1<<32 || r.Height > 1<<32 {
			return 0, Errorf(op, ErrInvalidValue, "pitched resource of %dx%d elements", r.Width, r.Height)
		}
		_, n, err := s.LinearSpan(op, r.Width*es, r.Height, 1)
		if err == nil && r.Pitch < r.Width*es {
			err = Errorf(op, ErrInvalidValue, "pitch %d < a row of %d elements of %d bytes", r.Pitch, r.Width, es)
		}
		return n, err
	}
	return 0, Errorf(op, ErrInvalidValue, "resource type %d is not memory", r.Type)
}
