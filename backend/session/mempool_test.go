package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Stream-ordered allocations are the session's like MEM_ALLOC's: usable,
// capped, freed in stream order (by MEM_FREE_ASYNC or MEM_FREE), and what
// is not the session's is refused.
func TestMemAllocAsync(t *testing.T) { testMemAllocAsync(t, opts{}) }

func testMemAllocAsync(t *testing.T, o opts) {
	o.quota = 1 << 20
	e := start(t, o)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	s := strm.Handle
	a, _ := must[protocol.MemAllocAsyncReq, protocol.PtrReply](e, protocol.OpMemAllocAsync, protocol.MemAllocAsyncReq{Size: 4096, Stream: s}, nil)
	b, _ := must[protocol.MemAllocAsyncReq, protocol.PtrReply](e, protocol.OpMemAllocAsync, protocol.MemAllocAsyncReq{Size: 4096}, nil) // default stream
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: a.Ptr, Count: 4096, ElemSize: 1, Value: 0x5a, Stream: s, Flags: protocol.CopyAsync}, nil)
	must[protocol.MemcpyDtoDReq, protocol.Empty](e, protocol.OpMemcpyDtoD, protocol.MemcpyDtoDReq{Dst: b.Ptr, Src: a.Ptr, Size: 4096, Stream: s, Flags: protocol.CopyAsync}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
	if _, got := e.dtoh(b.Ptr, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 4096)) {
		t.Fatalf("copy through async allocations: % x", got[:8])
	}
	rng, _ := must[protocol.PtrReq, protocol.AddressRangeReply](e, protocol.OpMemGetAddressRange, protocol.PtrReq{Ptr: a.Ptr + 100}, nil)
	if rng.Base != a.Ptr || rng.Size != 4096 {
		t.Fatalf("address range %+v", rng)
	}

	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"over the VM's cap", protocol.OpMemAllocAsync, protocol.Bytes(&protocol.MemAllocAsyncReq{Size: 1 << 20, Stream: s}), device.ErrOutOfMemory},
		{"size 0", protocol.OpMemAllocAsync, protocol.Bytes(&protocol.MemAllocAsyncReq{Stream: s}), device.ErrInvalidValue},
		{"flags", protocol.OpMemAllocAsync, protocol.Bytes(&protocol.MemAllocAsyncReq{Size: 64, Flags: 1}), device.ErrInvalidValue},
		{"no such device", protocol.OpMemAllocAsync, protocol.Bytes(&protocol.MemAllocAsyncReq{Size: 64, Device: 3}), device.ErrInvalidDevice},
		{"a foreign stream", protocol.OpMemAllocAsync, protocol.Bytes(&protocol.MemAllocAsyncReq{Size: 64, Stream: 0x9999}), device.ErrInvalidHandle},
		{"free inside an allocation", protocol.OpMemFreeAsync, protocol.Bytes(&protocol.MemFreeAsyncReq{Ptr: a.Ptr + 8, Stream: s}), device.ErrInvalidValue},
		{"free a foreign pointer", protocol.OpMemFreeAsync, protocol.Bytes(&protocol.MemFreeAsyncReq{Ptr: 0x1000, Stream: s}), device.ErrInvalidValue},
		{"free on a foreign stream", protocol.OpMemFreeAsync, protocol.Bytes(&protocol.MemFreeAsyncReq{Ptr: a.Ptr, Stream: 0x9999}), device.ErrInvalidHandle},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}

	// Not in a capture: the graph would own memory the session tracks.
	// Each refusal invalidates its capture.
	q := e.alloc(64)
	wantCaptureInvalidated(t, e, s, q, "alloc in capture", func() int32 {
		st, _, _ := do[protocol.MemAllocAsyncReq, protocol.PtrReply](e, protocol.OpMemAllocAsync, protocol.MemAllocAsyncReq{Size: 64, Stream: s}, nil)
		return st
	}, device.ErrCaptureUnsupported)
	wantCaptureInvalidated(t, e, s, q, "free in capture", func() int32 {
		st, _, _ := do[protocol.MemFreeAsyncReq, protocol.Empty](e, protocol.OpMemFreeAsync, protocol.MemFreeAsyncReq{Ptr: a.Ptr, Stream: s}, nil)
		return st
	}, device.ErrCaptureUnsupported)
	must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: q}, nil)

	must[protocol.MemFreeAsyncReq, protocol.Empty](e, protocol.OpMemFreeAsync, protocol.MemFreeAsyncReq{Ptr: a.Ptr, Stream: s}, nil)
	must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: b.Ptr}, nil)
	if st, _ := e.dtoh(a.Ptr, 8); device.Result(st) != device.ErrInvalidValue {
		t.Fatalf("a copy from freed memory: %v", device.Result(st))
	}
	// The cap counts them no more.
	c, _ := must[protocol.MemAllocAsyncReq, protocol.PtrReply](e, protocol.OpMemAllocAsync, protocol.MemAllocAsyncReq{Size: 1 << 20, Stream: s}, nil)
	must[protocol.MemFreeAsyncReq, protocol.Empty](e, protocol.OpMemFreeAsync, protocol.MemFreeAsyncReq{Ptr: c.Ptr, Stream: s}, nil)
	e.ping()
}
