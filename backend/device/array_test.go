package device

import (
	"errors"
	"testing"
)

func result(err error) Result {
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	if err == nil {
		return 0
	}
	return ErrUnknown
}

// Array descriptors: what CUDA allows, against the device's limits.
func TestArrayDescValidate(t *testing.T) {
	p := &Properties{}
	p.Attrs[attrTex1DWidth], p.Attrs[attrTex2DWidth], p.Attrs[attrTex2DHeight] = 131072, 131072, 65536
	p.Attrs[attrTex3DWidth], p.Attrs[attrTex3DHeight], p.Attrs[attrTex3DDepth] = 16384, 16384, 16384
	p.Attrs[attrTex2DLayeredW], p.Attrs[attrTex2DLayeredH], p.Attrs[attrTex2DLayeredCount] = 32768, 32768, 2048
	p.Attrs[attrTex1DLayeredW], p.Attrs[attrTex1DLayeredCount] = 32768, 2048
	for _, tc := range []struct {
		name string
		d    ArrayDesc
		want Result
	}{
		{"1D", ArrayDesc{Width: 131072, Format: 0x20, Channels: 1}, 0},
		{"2D, 4 x half", ArrayDesc{Width: 64, Height: 64, Format: 0x10, Channels: 4}, 0},
		{"3D", ArrayDesc{Width: 16384, Height: 2, Depth: 16384, Format: 0x01, Channels: 2}, 0},
		{"layered 1D", ArrayDesc{Width: 64, Depth: 8, Format: 0x20, Channels: 1, Flags: ArrayLayered}, 0},
		{"surface", ArrayDesc{Width: 64, Height: 64, Format: 0x20, Channels: 1, Flags: ArraySurfaceLDST}, 0},
		{"1D too wide", ArrayDesc{Width: 131073, Format: 0x20, Channels: 1}, ErrInvalidValue},
		{"3D too deep", ArrayDesc{Width: 4, Height: 4, Depth: 16385, Format: 0x20, Channels: 1}, ErrInvalidValue},
		{"layered without layers", ArrayDesc{Width: 4, Height: 4, Format: 0x20, Channels: 1, Flags: ArrayLayered}, ErrInvalidValue},
		{"3 channels", ArrayDesc{Width: 4, Format: 0x20, Channels: 3}, ErrInvalidValue},
		{"unknown format", ArrayDesc{Width: 4, Format: 0x04, Channels: 1}, ErrInvalidValue},
		{"width 0", ArrayDesc{Format: 0x20, Channels: 1}, ErrInvalidValue},
		{"cubemap", ArrayDesc{Width: 4, Height: 4, Depth: 6, Format: 0x20, Channels: 1, Flags: 4}, ErrNotSupported},
		{"huge", ArrayDesc{Width: 1 << 62, Height: 1 << 62, Depth: 1 << 62, Format: 0x20, Channels: 4}, ErrInvalidValue},
	} {
		if got := result(tc.d.Validate("test", p)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A copy's box against linear memory: the bytes it spans, and every way
// the arithmetic could leave them.
func TestLinearSpan(t *testing.T) {
	s := CopySide{Ptr: 0x1000, X: 8, Y: 1, Z: 1, Pitch: 128, Height: 4}
	lo, n, err := s.LinearSpan("test", 64, 3, 2)
	// start: 8 + 1*128 + 1*128*4 = 648; span: 1*512 + 2*128 + 64 = 832
	if err != nil || lo != 0x1000+648 || n != 832 {
		t.Fatalf("span [%#x, +%d), %v", lo, n, err)
	}
	for _, tc := range []struct {
		name    string
		s       CopySide
		w, h, d uint64
	}{
		{"pitch < width", CopySide{Pitch: 16}, 32, 2, 1},
		{"slice height < rows", CopySide{Pitch: 64, Height: 2, Y: 1}, 32, 2, 2},
		{"pitch overflows", CopySide{Pitch: 1 << 63, Height: 4}, 32, 3, 1},
		{"offset overflows", CopySide{Ptr: 1 << 63, X: 1 << 63, Pitch: 64}, 32, 1, 1},
		{"slices overflow", CopySide{Pitch: 1 << 40, Height: 1 << 30}, 32, 1, 1 << 10},
		{"empty", CopySide{Pitch: 64}, 0, 1, 1},
	} {
		if _, _, err := tc.s.LinearSpan("test", tc.w, tc.h, tc.d); result(err) != ErrInvalidValue {
			t.Errorf("%s: %v, want invalid value", tc.name, err)
		}
	}
}

// A copy's box against an array: inside, and each way out.
func TestCheckArray(t *testing.T) {
	d := ArrayDesc{Width: 16, Height: 8, Depth: 4, Format: 0x20, Channels: 1} // 64-byte rows
	if err := (CopySide{X: 16, Y: 2, Z: 1}).CheckArray("test", d, 48, 6, 3); err != nil {
		t.Fatalf("a box that fits: %v", err)
	}
	for _, tc := range []struct {
		name    string
		s       CopySide
		w, h, z uint64
	}{
		{"past the row", CopySide{X: 20}, 48, 1, 1},
		{"past the rows", CopySide{Y: 7}, 4, 2, 1},
		{"past the slices", CopySide{Z: 4}, 4, 1, 1},
		{"huge offsets", CopySide{X: 1 << 63, Y: 1 << 63, Z: 1 << 63}, 4, 1, 1},
		{"not whole elements", CopySide{X: 2}, 4, 1, 1},
		{"odd width", CopySide{}, 6, 1, 1},
	} {
		if err := tc.s.CheckArray("test", d, tc.w, tc.h, tc.z); result(err) != ErrInvalidValue {
			t.Errorf("%s: %v, want invalid value", tc.name, err)
		}
	}
}
