package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// CUDA arrays on the sim device: a 2D array written from device memory
// and read back into another allocation keeps the bytes (sub-boxes too); a
// 3D copy in and out; the descriptor is what was created; and every copy
// or descriptor a hostile guest could send is refused before the device
// sees it.
func TestArrays(t *testing.T) { testArrays(t, opts{}) }

func testArrays(t *testing.T, o opts) {
	o.quota = 1 << 20
	e := start(t, o)
	const w, h = 16, 8 // 16 float elements x 8 rows: 64-byte rows
	arr, _ := must[protocol.ArrayCreateReq, protocol.HandleReply](e, protocol.OpArrayCreate, protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: w, Height: h}, nil)
	desc, _ := must[protocol.HandleReq, protocol.ArrayDescReply](e, protocol.OpArrayGetDescriptor, protocol.HandleReq{Handle: arr.Handle}, nil)
	if desc != (protocol.ArrayDescReply{Width: w, Height: h, Format: 0x20, Channels: 1}) {
		t.Fatalf("descriptor %+v", desc)
	}
	// Source: 8 rows of 64 bytes at a pitch of 128.
	const pitch = 128
	src := e.alloc(pitch * h)
	data := make([]byte, pitch*h)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if st := e.htod(src, data); st != 0 {
		t.Fatalf("htod: %v", device.Result(st))
	}
	copy3 := func(r protocol.BoxCopyReq) int32 {
		st, _, _ := do[protocol.BoxCopyReq, protocol.Empty](e, protocol.OpMemcpy3D, r, nil)
		return st
	}
	lin := func(p, pitch, height uint64) protocol.CopySide {
		return protocol.CopySide{Ptr: p, Pitch: pitch, Height: height}
	}
	if st := copy3(protocol.BoxCopyReq{Src: lin(src, pitch, h), Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: h, Depth: 1}); st != 0 {
		t.Fatalf("device to array: %v", device.Result(st))
	}
	dst := e.alloc(64 * h)
	if st := copy3(protocol.BoxCopyReq{Src: protocol.CopySide{Array: arr.Handle}, Dst: lin(dst, 64, h), Width: 64, Height: h, Depth: 1}); st != 0 {
		t.Fatalf("array to device: %v", device.Result(st))
	}
	_, got := e.dtoh(dst, 64*h)
	for y := range h {
		if !bytes.Equal(got[y*64:(y+1)*64], data[y*pitch:y*pitch+64]) {
			t.Fatalf("row %d read back % x, want % x", y, got[y*64:y*64+8], data[y*pitch:y*pitch+8])
		}
	}
	// A sub-box: elements 2..5 of rows 3..4, into the array's corner and out.
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: dst, Count: 64 * h, ElemSize: 1}, nil)
	if st := copy3(protocol.BoxCopyReq{Src: protocol.CopySide{Array: arr.Handle, X: 8, Y: 3}, Dst: lin(dst, 16, 2), Width: 16, Height: 2, Depth: 1}); st != 0 {
		t.Fatalf("sub-box out: %v", device.Result(st))
	}
	_, got = e.dtoh(dst, 32)
	if want := append(append([]byte(nil), data[3*pitch+8:3*pitch+24]...), data[4*pitch+8:4*pitch+24]...); !bytes.Equal(got, want) {
		t.Fatalf("sub-box % x, want % x", got, want)
	}

	// A 3D array (4 x 2 x 3 of u8 x 4 channels: 16-byte rows) in and out.
	a3, _ := must[protocol.ArrayCreateReq, protocol.HandleReply](e, protocol.OpArrayCreate, protocol.ArrayCreateReq{Format: 0x01, Channels: 4, Width: 4, Height: 2, Depth: 3}, nil)
	if st := copy3(protocol.BoxCopyReq{Src: lin(src, 16, 2), Dst: protocol.CopySide{Array: a3.Handle}, Width: 16, Height: 2, Depth: 3}); st != 0 {
		t.Fatalf("3D in: %v", device.Result(st))
	}
	if st := copy3(protocol.BoxCopyReq{Src: protocol.CopySide{Array: a3.Handle, Z: 1}, Dst: lin(dst, 16, 2), Width: 16, Height: 2, Depth: 2}); st != 0 {
		t.Fatalf("3D out: %v", device.Result(st))
	}
	if _, got = e.dtoh(dst, 64); !bytes.Equal(got, data[32:96]) {
		t.Fatalf("3D slices 1-2 % x, want % x", got[:8], data[32:40])
	}

	big := uint64(1) << 62
	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"create, format", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x07, Channels: 1, Width: 4}), device.ErrInvalidValue},
		{"create, 3 channels", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 3, Width: 4}), device.ErrInvalidValue},
		{"create, width 0", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 1}), device.ErrInvalidValue},
		{"create, depth without height", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: 4, Depth: 4}), device.ErrInvalidValue},
		{"create, 3D extents overflowing", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 4, Width: big, Height: big, Depth: big}), device.ErrInvalidValue},
		{"create, over the device's 2D width", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: 1 << 20, Height: 2}), device.ErrInvalidValue},
		{"create, over the VM's cap", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 4, Width: 1024, Height: 1024}), device.ErrOutOfMemory},
		{"create, cubemap", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Format: 0x20, Channels: 1, Width: 4, Height: 4, Depth: 6, Flags: 4}), device.ErrNotSupported},
		{"create, no such device", protocol.OpArrayCreate, protocol.Bytes(&protocol.ArrayCreateReq{Device: 3, Format: 0x20, Channels: 1, Width: 4}), device.ErrInvalidDevice},
		{"descriptor, bad handle", protocol.OpArrayGetDescriptor, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidHandle},
		{"destroy, bad handle", protocol.OpArrayDestroy, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidHandle},
		{"copy, bad array handle", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 64, h), Dst: protocol.CopySide{Array: 0x9999}, Width: 64, Height: 1, Depth: 1}), device.ErrInvalidHandle},
		{"copy, a stream handle as an array", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 64, h), Dst: protocol.CopySide{Array: src}, Width: 64, Height: 1, Depth: 1}), device.ErrInvalidHandle},
		{"copy, past the array's width", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, pitch, h), Dst: protocol.CopySide{Array: arr.Handle, X: 4}, Width: 64, Height: 1, Depth: 1}), device.ErrInvalidValue},
		{"copy, past the array's rows", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, pitch, h), Dst: protocol.CopySide{Array: arr.Handle, Y: 1}, Width: 64, Height: h, Depth: 1}), device.ErrInvalidValue},
		{"copy, depth of a 2D array", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 16, 1), Dst: protocol.CopySide{Array: arr.Handle}, Width: 16, Height: 1, Depth: 2}), device.ErrInvalidValue},
		{"copy, huge offsets", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, pitch, h), Dst: protocol.CopySide{Array: arr.Handle, X: big, Y: big, Z: big}, Width: 4, Height: 1, Depth: 1}), device.ErrInvalidValue},
		{"copy, x not a whole element", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, pitch, h), Dst: protocol.CopySide{Array: arr.Handle, X: 2}, Width: 8, Height: 1, Depth: 1}), device.ErrInvalidValue},
		{"copy, pitch < width", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 32, h), Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: 2, Depth: 1}), device.ErrInvalidValue},
		{"copy, past the allocation", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: protocol.CopySide{Ptr: src, Pitch: pitch, Height: h, Y: 1}, Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: h, Depth: 1}), device.ErrInvalidValue},
		{"copy, not the session's memory", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(0x10, pitch, h), Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: h, Depth: 1}), device.ErrInvalidValue},
		{"copy, overflowing pitch", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, big, h), Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: h, Depth: 1}), device.ErrInvalidValue},
		{"copy, slice height < rows", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 16, 1), Dst: protocol.CopySide{Array: a3.Handle}, Width: 16, Height: 2, Depth: 2}), device.ErrInvalidValue},
		{"copy, bad flags", protocol.OpMemcpy3D, protocol.Bytes(&protocol.BoxCopyReq{Src: lin(src, 64, h), Dst: protocol.CopySide{Array: arr.Handle}, Width: 64, Height: 1, Depth: 1, Flags: 0x80}), device.ErrInvalidValue},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}

	must[protocol.HandleReq, protocol.Empty](e, protocol.OpArrayDestroy, protocol.HandleReq{Handle: arr.Handle}, nil)
	st, _, _ := do[protocol.HandleReq, protocol.ArrayDescReply](e, protocol.OpArrayGetDescriptor, protocol.HandleReq{Handle: arr.Handle}, nil)
	wantStatus(t, "descriptor of a destroyed array", st, device.ErrInvalidHandle)
	if st := copy3(protocol.BoxCopyReq{Src: protocol.CopySide{Array: arr.Handle}, Dst: lin(dst, 64, h), Width: 64, Height: 1, Depth: 1}); device.Result(st) != device.ErrInvalidHandle {
		t.Fatalf("copy from a destroyed array: %v", device.Result(st))
	}
	// The session ends holding a3: released with it.
	if err := e.close(); err != nil {
		t.Fatalf("session end: %v", err)
	}
}
