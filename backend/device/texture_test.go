package device

import "testing"

// A texture's memory resource: the bytes it covers, and the descriptors
// refused before the driver sees them.
func TestResourceMemorySpan(t *testing.T) {
	lin := ResourceDesc{Type: ResourceLinear, Format: 0x20, Channels: 2, Width: 4096}
	if n, err := lin.MemorySpan("test"); err != nil || n != 4096 {
		t.Fatalf("linear: %d, %v", n, err)
	}
	pitched := ResourceDesc{Type: ResourcePitch2D, Format: 0x20, Channels: 4, Width: 16, Height: 8, Pitch: 512}
	if n, err := pitched.MemorySpan("test"); err != nil || n != 7*512+256 {
		t.Fatalf("pitched: %d, %v", n, err)
	}
	for _, tc := range []struct {
		name string
		r    ResourceDesc
	}{
		{"linear, not whole elements", ResourceDesc{Type: ResourceLinear, Format: 0x20, Channels: 2, Width: 4100}},
		{"linear, empty", ResourceDesc{Type: ResourceLinear, Format: 0x20, Channels: 1}},
		{"bad format", ResourceDesc{Type: ResourceLinear, Format: 0x33, Channels: 1, Width: 64}},
		{"pitch < row", ResourceDesc{Type: ResourcePitch2D, Format: 0x20, Channels: 4, Width: 64, Height: 2, Pitch: 512}},
		{"one row, pitch < row", ResourceDesc{Type: ResourcePitch2D, Format: 0x20, Channels: 4, Width: 64, Height: 1, Pitch: 512}},
		{"rows overflow", ResourceDesc{Type: ResourcePitch2D, Format: 0x20, Channels: 1, Width: 4, Height: 1 << 32, Pitch: 1 << 40}},
		{"huge width", ResourceDesc{Type: ResourcePitch2D, Format: 0x20, Channels: 4, Width: 1 << 62, Height: 1, Pitch: 1 << 63}},
		{"an array", ResourceDesc{Type: ResourceArray, Format: 0x20, Channels: 1}},
	} {
		if _, err := tc.r.MemorySpan("test"); result(err) != ErrInvalidValue {
			t.Errorf("%s: %v, want invalid value", tc.name, err)
		}
	}
	if err := (TextureDesc{AddressMode: [3]uint32{0, 1, 3}, Filter: 1, Flags: TexNormalizedCoords, MaxAnisotropy: 16}).Check("test"); err != nil {
		t.Fatalf("a valid texture: %v", err)
	}
	for _, td := range []TextureDesc{{AddressMode: [3]uint32{4}}, {Filter: 2}, {MipmapFilter: 2}, {Flags: 0x80}, {MaxAnisotropy: 17}} {
		if result(td.Check("test")) != ErrInvalidValue {
			t.Errorf("texture %+v accepted", td)
		}
	}
}
