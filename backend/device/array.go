package device

import (
	"math/bits"
)

// CUDA arrays: opaque device memory laid out by the driver, which programs
// reach only through copies (Memcpy3D), textures and surfaces. The
// descriptor and copy checks here are the one definition the session's
// validators and the sim device both use.

// Array is a CUDA array (CUarray) of a context.
type Array uint64

// ArrayDesc is a CUDA_ARRAY3D_DESCRIPTOR: Width x Height x Depth elements
// of Channels channels of Format (CUarray_format); Height 0 is a 1D array,
// Depth 0 a 1D or 2D one.
type ArrayDesc struct {
	Width, Height, Depth uint64
	Format               uint32
	Channels             uint32
	Flags                uint32
}

// Array formats (CUarray_format) and their bytes per channel.
var arrayFormatBytes = map[uint32]uint64{
	0x01: 1, 0x02: 2, 0x03: 4, // unsigned int 8, 16, 32
	0x08: 1, 0x09: 2, 0x0a: 4, // signed int 8, 16, 32
	0x10: 2, 0x20: 4, // half, float
}

// ElemSize is the bytes of one element of an array of this descriptor,
// 0 when the format or channel count is not one CUDA defines for
// ordinary arrays (1, 2 or 4 channels of the formats above).
func (d ArrayDesc) ElemSize() uint64 {
	b := arrayFormatBytes[d.Format]
	switch d.Channels {
	case 1, 2, 4:
		return b * uint64(d.Channels)
	}
	return 0
}

// Extent returns an array's width in bytes, its rows per slice and its
// slices (a 1D array has one row, a 2D array one slice).
func (d ArrayDesc) Extent() (rowBytes, rows, slices uint64) {
	return d.Width * d.ElemSize(), max(d.Height, 1), max(d.Depth, 1)
}

// CopySide is one side of a Memcpy3D: Array when it is not 0, else
// linear device memory at Ptr in rows of Pitch bytes and slices of Height
// rows. X counts bytes, Y rows, Z slices.
type CopySide struct {
	Ptr                    Ptr
	Array                  Array
	X, Y, Z, Pitch, Height uint64
}

// Copy3D is a copy of Width bytes x Height rows x Depth slices.
type Copy3D struct {
	Src, Dst             CopySide
	Width, Height, Depth uint64
}

// Array flags (CUDA_ARRAY3D_*) served: layered, surface load/store and
// texture gather. Cubemaps, depth textures, sparse and deferred-mapping
// arrays are not.
const (
	ArrayLayered       = 0x01
	ArraySurfaceLDST   = 0x02
	ArrayTextureGather = 0x08
	arrayFlagsServed   = ArrayLayered | ArraySurfaceLDST | ArrayTextureGather
)

// Device attributes (cuda.h) that bound array extents.
const (
	attrTex1DWidth        = 21
	attrTex2DWidth        = 22
	attrTex2DHeight       = 23
	attrTex3DWidth        = 24
	attrTex3DHeight       = 25
	attrTex3DDepth        = 26
	attrTex2DLayeredW     = 27
	attrTex2DLayeredH     = 28
	attrTex2DLayeredCount = 29
	attrTex1DLayeredW     = 42
	attrTex1DLayeredCount = 43
)

// Validate checks a descriptor against what CUDA allows and the device's
// limits (its texture extents), so that a bad one is refused before the
// driver sees it.
func (d ArrayDesc) Validate(op string, p *Properties) error {
	if d.ElemSize() == 0 {
		return Errorf(op, ErrInvalidValue, "array format %#x with %d channels (formats 0x01-0x03, 0x08-0x0a, 0x10, 0x20; 1, 2 or 4 channels)", d.Format, d.Channels)
	}
	if d.Flags&^arrayFlagsServed != 0 {
		return Errorf(op, ErrNotSupported, "array flags %#x: only LAYERED (1), SURFACE_LDST (2) and TEXTURE_GATHER (8) are served", d.Flags)
	}
	if d.Width == 0 || (d.Height == 0 && d.Depth != 0 && d.Flags&ArrayLayered == 0) {
		return Errorf(op, ErrInvalidValue, "array extent %dx%dx%d (width > 0; a 3D array needs a height)", d.Width, d.Height, d.Depth)
	}
	if d.Flags&ArrayLayered != 0 && d.Depth == 0 {
		return Errorf(op, ErrInvalidValue, "a layered array needs Depth layers (got 0)")
	}
	lim := func(a int) uint64 {
		if p == nil || p.Attrs[a] <= 0 {
			return 1 << 16 // the smallest of CUDA's limits
		}
		return uint64(p.Attrs[a])
	}
	var maxW, maxH, maxD uint64
	switch {
	case d.Flags&ArrayLayered != 0 && d.Height == 0:
		maxW, maxH, maxD = lim(attrTex1DLayeredW), 0, lim(attrTex1DLayeredCount)
	case d.Flags&ArrayLayered != 0:
		maxW, maxH, maxD = lim(attrTex2DLayeredW), lim(attrTex2DLayeredH), lim(attrTex2DLayeredCount)
	case d.Depth != 0:
		maxW, maxH, maxD = lim(attrTex3DWidth), lim(attrTex3DHeight), lim(attrTex3DDepth)
	case d.Height != 0:
		maxW, maxH = lim(attrTex2DWidth), lim(attrTex2DHeight)
	default:
		maxW = lim(attrTex1DWidth)
	}
	if d.Width > maxW || d.Height > maxH || d.Depth > maxD {
		return Errorf(op, ErrInvalidValue, "array extent %dx%dx%d exceeds the device's %dx%dx%d for this kind of array", d.Width, d.Height, d.Depth, maxW, maxH, maxD)
	}
	return nil
}

// LinearSpan returns the bytes [lo, lo+n) of linear memory that a copy of
// width x height x depth touches on side s (not an array), or an error when
// the pitch is smaller than the width, the slice height smaller than the
// rows, or the range overflows.
func (s CopySide) LinearSpan(op string, width, height, depth uint64) (lo, n uint64, err error) {
	if s.Pitch < width && (height > 1 || depth > 1) {
		return 0, 0, Errorf(op, ErrInvalidValue, "pitch %d < width of %d bytes", s.Pitch, width)
	}
	if depth > 1 && s.Height < s.Y+height {
		return 0, 0, Errorf(op, ErrInvalidValue, "slice height %d < %d rows from row %d", s.Height, height, s.Y)
	}
	if width == 0 || height == 0 || depth == 0 {
		return 0, 0, Errorf(op, ErrInvalidValue, "copy of %dx%dx%d", width, height, depth)
	}
	var of bool
	mul := func(a, b uint64) uint64 {
		hi, lo := bits.Mul64(a, b)
		of = of || hi != 0
		return lo
	}
	add := func(a, b uint64) uint64 {
		r, c := bits.Add64(a, b, 0)
		of = of || c != 0
		return r
	}
	slice := mul(s.Pitch, s.Height)
	start := add(add(s.X, mul(s.Y, s.Pitch)), mul(s.Z, slice))
	span := add(add(mul(depth-1, slice), mul(height-1, s.Pitch)), width)
	lo = add(uint64(s.Ptr), start)
	add(lo, span)
	if of {
		return 0, 0, Errorf(op, ErrInvalidValue, "copy of %dx%dx%d at (%d, %d, %d), pitch %d, slice height %d overflows", width, height, depth, s.X, s.Y, s.Z, s.Pitch, s.Height)
	}
	return lo, span, nil
}

// CheckArray checks that a box of width bytes x height rows x depth slices
// at side s's offset lies inside an array of descriptor d.
func (s CopySide) CheckArray(op string, d ArrayDesc, width, height, depth uint64) error {
	rb, rows, slices := d.Extent()
	es := d.ElemSize()
	if width == 0 || height == 0 || depth == 0 {
		return Errorf(op, ErrInvalidValue, "copy of %dx%dx%d", width, height, depth)
	}
	if s.X > rb || width > rb-s.X || s.Y > rows || height > rows-s.Y || s.Z > slices || depth > slices-s.Z {
		return Errorf(op, ErrInvalidValue, "box %dx%dx%d at (%d, %d, %d) runs outside the array's %dx%dx%d bytes x rows x slices", width, height, depth, s.X, s.Y, s.Z, rb, rows, slices)
	}
	if es != 0 && (s.X%es != 0 || width%es != 0) {
		return Errorf(op, ErrInvalidValue, "x offset %d and width %d must be multiples of the array's %d-byte element", s.X, width, es)
	}
	return nil
}
