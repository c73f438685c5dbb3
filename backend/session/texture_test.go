package session_test

import (
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Texture and surface objects over an array, linear and pitched memory:
// created, their resource read back as given, destroyed; resources that are
// not the session's, malformed descriptors and foreign objects are refused.
func TestTextureObjects(t *testing.T) { testTextureObjects(t, opts{}) }

func testTextureObjects(t *testing.T, o opts) {
	e := start(t, o)
	arr, _ := must[protocol.ArrayCreateReq, protocol.HandleReply](e, protocol.OpArrayCreate, protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: 64, Height: 64, Flags: 2}, nil)
	plain, _ := must[protocol.ArrayCreateReq, protocol.HandleReply](e, protocol.OpArrayCreate, protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: 64, Height: 64}, nil)
	mem := e.alloc(64 << 10)
	clamp := protocol.TextureDesc{AddressMode0: 1, AddressMode1: 1, Filter: 1, Flags: 2}
	create := func(r protocol.ResourceDesc) uint64 {
		t.Helper()
		h, _ := must[protocol.TexObjectCreateReq, protocol.HandleReply](e, protocol.OpTexObjectCreate, protocol.TexObjectCreateReq{Res: r, Tex: clamp}, nil)
		if h.Handle == 0 {
			t.Fatal("texture object 0")
		}
		return h.Handle
	}
	onArray := protocol.ResourceDesc{Type: protocol.ResourceArray, Array: arr.Handle}
	linear := protocol.ResourceDesc{Type: protocol.ResourceLinear, Ptr: mem, Format: 0x20, Channels: 1, Width: 4096}
	pitched := protocol.ResourceDesc{Type: protocol.ResourcePitch2D, Ptr: mem, Format: 0x20, Channels: 4, Width: 16, Height: 64, Pitch: 512}
	ta, tl, tp := create(onArray), create(linear), create(pitched)
	if got, _ := must[protocol.HandleReq, protocol.ResourceDesc](e, protocol.OpTexObjectGetResourceDesc, protocol.HandleReq{Handle: tp}, nil); got != pitched {
		t.Fatalf("resource of the pitched texture %+v, want %+v", got, pitched)
	}
	// A view of the array as float.
	v, _ := must[protocol.TexObjectCreateReq, protocol.HandleReply](e, protocol.OpTexObjectCreate, protocol.TexObjectCreateReq{Res: onArray, Tex: clamp,
		HasView: 1, View: protocol.ViewDesc{Format: 0x16, Width: 64, Height: 64}}, nil)
	if got, _ := must[protocol.HandleReq, protocol.ViewReply](e, protocol.OpTexObjectGetViewDesc, protocol.HandleReq{Handle: v.Handle}, nil); got.HasView != 1 || got.View.Format != 0x16 || got.View.Width != 64 {
		t.Fatalf("view %+v", got)
	}
	if got, _ := must[protocol.HandleReq, protocol.ViewReply](e, protocol.OpTexObjectGetViewDesc, protocol.HandleReq{Handle: ta}, nil); got.HasView != 0 {
		t.Fatalf("view of a texture made without one %+v", got)
	}
	if got, _ := must[protocol.HandleReq, protocol.TextureDesc](e, protocol.OpTexObjectGetTextureDesc, protocol.HandleReq{Handle: tl}, nil); got != clamp {
		t.Fatalf("texture descriptor %+v, want %+v", got, clamp)
	}
	surf, _ := must[protocol.ResourceDesc, protocol.HandleReply](e, protocol.OpSurfObjectCreate, onArray, nil)
	if got, _ := must[protocol.HandleReq, protocol.ResourceDesc](e, protocol.OpSurfObjectGetResourceDesc, protocol.HandleReq{Handle: surf.Handle}, nil); got != onArray {
		t.Fatalf("surface resource %+v", got)
	}

	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"texture, foreign array", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceArray, Array: 0x9999}, Tex: clamp}), device.ErrInvalidHandle},
		{"texture, memory not the session's", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceLinear, Ptr: 0x1000, Format: 0x20, Channels: 1, Width: 64}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, linear past the allocation", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceLinear, Ptr: mem + 4, Format: 0x20, Channels: 1, Width: 64 << 10}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, pitch < width", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourcePitch2D, Ptr: mem, Format: 0x20, Channels: 4, Width: 64, Height: 4, Pitch: 512}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, pitched rows overflowing", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourcePitch2D, Ptr: mem, Format: 0x20, Channels: 1, Width: 4, Height: 1 << 31, Pitch: 1 << 40}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, bad format", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceLinear, Ptr: mem, Format: 0x55, Channels: 1, Width: 64}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, mipmapped", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceMipmap, Array: arr.Handle}, Tex: clamp}), device.ErrNotSupported},
		{"texture, resource type", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: 9}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, resource flags", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: protocol.ResourceDesc{Type: protocol.ResourceArray, Array: arr.Handle, Flags: 1}, Tex: clamp}), device.ErrInvalidValue},
		{"texture, address mode", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: onArray, Tex: protocol.TextureDesc{AddressMode1: 7}}), device.ErrInvalidValue},
		{"texture, flags", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: onArray, Tex: protocol.TextureDesc{Flags: 0x100}}), device.ErrInvalidValue},
		{"texture, view format", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: onArray, Tex: clamp, HasView: 1, View: protocol.ViewDesc{Format: 0x99}}), device.ErrInvalidValue},
		{"texture, HasView", protocol.OpTexObjectCreate, protocol.Bytes(&protocol.TexObjectCreateReq{Res: onArray, Tex: clamp, HasView: 2}), device.ErrInvalidValue},
		{"surface, not an array", protocol.OpSurfObjectCreate, protocol.Bytes(&linear), device.ErrInvalidValue},
		{"surface, array without SURFACE_LDST", protocol.OpSurfObjectCreate, protocol.Bytes(&protocol.ResourceDesc{Type: protocol.ResourceArray, Array: plain.Handle}), device.ErrInvalidValue},
		{"surface, foreign array", protocol.OpSurfObjectCreate, protocol.Bytes(&protocol.ResourceDesc{Type: protocol.ResourceArray, Array: 0x9999}), device.ErrInvalidHandle},
		{"destroy a foreign texture", protocol.OpTexObjectDestroy, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidValue},
		{"destroy a surface as a texture", protocol.OpTexObjectDestroy, protocol.Bytes(&protocol.HandleReq{Handle: surf.Handle}), device.ErrInvalidValue},
		{"destroy a texture as a surface", protocol.OpSurfObjectDestroy, protocol.Bytes(&protocol.HandleReq{Handle: ta}), device.ErrInvalidValue},
		{"resource of a foreign texture", protocol.OpTexObjectGetResourceDesc, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidValue},
		{"descriptor of a foreign texture", protocol.OpTexObjectGetTextureDesc, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidValue},
		{"view of a surface", protocol.OpTexObjectGetViewDesc, protocol.Bytes(&protocol.HandleReq{Handle: surf.Handle}), device.ErrInvalidValue},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}
	for _, h := range []uint64{ta, tl, v.Handle} {
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpTexObjectDestroy, protocol.HandleReq{Handle: h}, nil)
	}
	st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpTexObjectDestroy, protocol.HandleReq{Handle: ta}, nil)
	wantStatus(t, "destroy twice", st, device.ErrInvalidValue)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpSurfObjectDestroy, protocol.HandleReq{Handle: surf.Handle}, nil)
	// The session ends holding tp (and its arrays): released with it.
	if err := e.close(); err != nil {
		t.Fatalf("session end: %v", err)
	}
}
