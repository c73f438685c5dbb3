package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

const gran = 2 << 20 // the sim's (and the H100's) allocation granularity

// The virtual-memory API: reserve, create, map, set access, copy across
// adjacent mappings, two mappings of one memory see the same bytes, unmap
// and free; what is not the session's or not whole is refused.
func TestVirtualMemory(t *testing.T) { testVirtualMemory(t, opts{}) }

func testVirtualMemory(t *testing.T, o opts) {
	o.quota = 8 * gran
	e := start(t, o)
	res, _ := must[protocol.MemReserveReq, protocol.PtrReply](e, protocol.OpMemAddressReserve, protocol.MemReserveReq{Size: 4 * gran}, nil)
	va := res.Ptr
	create := func() uint64 {
		h, _ := must[protocol.MemCreateReq, protocol.HandleReply](e, protocol.OpMemCreate, protocol.MemCreateReq{Type: 1, Size: gran}, nil)
		return h.Handle
	}
	h1, h2 := create(), create()
	must[protocol.MemMapReq, protocol.Empty](e, protocol.OpMemMap, protocol.MemMapReq{Ptr: va, Size: gran, Handle: h1}, nil)
	must[protocol.MemMapReq, protocol.Empty](e, protocol.OpMemMap, protocol.MemMapReq{Ptr: va + gran, Size: gran, Handle: h2}, nil)
	// Mapped but not accessible yet: not the session's memory.
	st, _, _ := do[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: va, Count: 16, ElemSize: 1, Value: 1}, nil)
	wantStatus(t, "memset before set-access", st, device.ErrInvalidValue)
	must[protocol.MemSetAccessReq, protocol.Empty](e, protocol.OpMemSetAccess, protocol.MemSetAccessReq{Ptr: va, Size: 2 * gran, Flags: 3}, nil)

	// Adjacent accessible mappings are one range of the session's (a copy
	// may span them on a GPU; the sim copies within one mapping).
	rng, _ := must[protocol.PtrReq, protocol.AddressRangeReply](e, protocol.OpMemGetAddressRange, protocol.PtrReq{Ptr: va + gran + 5}, nil)
	if rng.Base != va || rng.Size != 2*gran {
		t.Fatalf("range of two adjacent mappings: %+v", rng)
	}
	data := bytes.Repeat([]byte{0xc3}, 8192)
	if st := e.htod(va+gran-8192, data); st != 0 {
		t.Fatalf("htod into a mapping: %v", device.Result(st))
	}
	if st := e.htod(va+gran, data); st != 0 {
		t.Fatalf("htod into the next mapping: %v", device.Result(st))
	}
	// h1 again, further on: the same bytes.
	must[protocol.MemMapReq, protocol.Empty](e, protocol.OpMemMap, protocol.MemMapReq{Ptr: va + 3*gran, Size: gran, Handle: h1}, nil)
	must[protocol.MemSetAccessReq, protocol.Empty](e, protocol.OpMemSetAccess, protocol.MemSetAccessReq{Ptr: va + 3*gran, Size: gran, Flags: 3}, nil)
	if _, got := e.dtoh(va+4*gran-8192, 4096); !bytes.Equal(got, data[:4096]) {
		t.Fatalf("the second mapping of h1: % x", got[:8])
	}

	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"reserve, flags", protocol.OpMemAddressReserve, protocol.Bytes(&protocol.MemReserveReq{Size: gran, Flags: 1}), device.ErrInvalidValue},
		{"reserve, alignment", protocol.OpMemAddressReserve, protocol.Bytes(&protocol.MemReserveReq{Size: gran, Alignment: 3 << 20}), device.ErrInvalidValue},
		{"reserve, beyond the session's address space", protocol.OpMemAddressReserve, protocol.Bytes(&protocol.MemReserveReq{Size: 1 << 50}), device.ErrOutOfMemory},
		{"create, over the VM's cap", protocol.OpMemCreate, protocol.Bytes(&protocol.MemCreateReq{Type: 1, Size: 8 * gran}), device.ErrOutOfMemory},
		{"create, handle type 0x10", protocol.OpMemCreate, protocol.Bytes(&protocol.MemCreateReq{Type: 1, Size: gran, HandleTypes: 0x10}), device.ErrInvalidValue},
		{"create, managed", protocol.OpMemCreate, protocol.Bytes(&protocol.MemCreateReq{Type: 2, Size: gran}), device.ErrInvalidValue},
		{"create, no such device", protocol.OpMemCreate, protocol.Bytes(&protocol.MemCreateReq{Type: 1, Size: gran, Device: 5}), device.ErrInvalidDevice},
		{"map over a mapping", protocol.OpMemMap, protocol.Bytes(&protocol.MemMapReq{Ptr: va, Size: gran, Handle: h2}), device.ErrInvalidValue},
		{"map outside a reservation", protocol.OpMemMap, protocol.Bytes(&protocol.MemMapReq{Ptr: va + 4*gran, Size: gran, Handle: h2}), device.ErrInvalidValue},
		{"map past the memory's end", protocol.OpMemMap, protocol.Bytes(&protocol.MemMapReq{Ptr: va + 2*gran, Size: gran, Offset: gran, Handle: h2}), device.ErrInvalidValue},
		{"map a foreign handle", protocol.OpMemMap, protocol.Bytes(&protocol.MemMapReq{Ptr: va + 2*gran, Size: gran, Handle: 0x9999}), device.ErrInvalidValue},
		{"access, read-only", protocol.OpMemSetAccess, protocol.Bytes(&protocol.MemSetAccessReq{Ptr: va, Size: gran, Flags: 1}), device.ErrNotSupported},
		{"access, a hole", protocol.OpMemSetAccess, protocol.Bytes(&protocol.MemSetAccessReq{Ptr: va, Size: 3 * gran, Flags: 3}), device.ErrInvalidValue},
		{"unmap half a mapping", protocol.OpMemUnmap, protocol.Bytes(&protocol.MemRangeReq{Ptr: va, Size: gran / 2}), device.ErrInvalidValue},
		{"unmap nothing", protocol.OpMemUnmap, protocol.Bytes(&protocol.MemRangeReq{Ptr: va + 2*gran, Size: gran}), device.ErrInvalidValue},
		{"free a reservation with mappings", protocol.OpMemAddressFree, protocol.Bytes(&protocol.MemRangeReq{Ptr: va, Size: 4 * gran}), device.ErrInvalidValue},
		{"free part of a reservation", protocol.OpMemAddressFree, protocol.Bytes(&protocol.MemRangeReq{Ptr: va, Size: gran}), device.ErrInvalidValue},
		{"cuMemFree of a mapping", protocol.OpMemFree, protocol.Bytes(&protocol.PtrReq{Ptr: va}), device.ErrInvalidValue},
		{"release a foreign handle", protocol.OpMemRelease, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidValue},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}
	// Export handle types asked for (NCCL asks for POSIX file
	// descriptors): the memory is made, never exportable.
	hx, _ := must[protocol.MemCreateReq, protocol.HandleReply](e, protocol.OpMemCreate, protocol.MemCreateReq{Type: 1, Size: gran, HandleTypes: 1}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpMemRelease, protocol.HandleReq{Handle: hx.Handle}, nil)

	// Released while mapped: still usable until unmapped.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpMemRelease, protocol.HandleReq{Handle: h1}, nil)
	if _, got := e.dtoh(va, 16); len(got) != 16 {
		t.Fatal("a released, mapped memory is unreadable")
	}
	st, _, _ = do[protocol.MemMapReq, protocol.Empty](e, protocol.OpMemMap, protocol.MemMapReq{Ptr: va + 2*gran, Size: gran, Handle: h1}, nil)
	wantStatus(t, "map a released handle", st, device.ErrInvalidValue)
	// Unmapping the first mapping leaves the second accessible.
	must[protocol.MemRangeReq, protocol.Empty](e, protocol.OpMemUnmap, protocol.MemRangeReq{Ptr: va, Size: gran}, nil)
	if st, _ := e.dtoh(va, 16); device.Result(st) != device.ErrInvalidValue {
		t.Fatalf("dtoh of an unmapped range: %v", device.Result(st))
	}
	if st, got := e.dtoh(va+gran, 4096); st != 0 || !bytes.Equal(got, data[:4096]) {
		t.Fatalf("dtoh of the mapping beside it: %v % x", device.Result(st), got[:8])
	}
	rng, _ = must[protocol.PtrReq, protocol.AddressRangeReply](e, protocol.OpMemGetAddressRange, protocol.PtrReq{Ptr: va + gran}, nil)
	if rng.Base != va+gran || rng.Size != gran {
		t.Fatalf("range after unmapping its neighbour: %+v", rng)
	}
	must[protocol.MemRangeReq, protocol.Empty](e, protocol.OpMemUnmap, protocol.MemRangeReq{Ptr: va + gran, Size: 3 * gran}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpMemRelease, protocol.HandleReq{Handle: h2}, nil)
	must[protocol.MemRangeReq, protocol.Empty](e, protocol.OpMemAddressFree, protocol.MemRangeReq{Ptr: va, Size: 4 * gran}, nil)
	// Everything released: the cap is whole again.
	h3, _ := must[protocol.MemCreateReq, protocol.HandleReply](e, protocol.OpMemCreate, protocol.MemCreateReq{Type: 1, Size: 8 * gran}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpMemRelease, protocol.HandleReq{Handle: h3.Handle}, nil)
	e.ping()
}

// A session that ends holding reservations, memory and mappings ends
// cleanly.
func TestVirtualMemoryReleasedAtEnd(t *testing.T) { testVirtualMemoryReleased(t, opts{}) }

func testVirtualMemoryReleased(t *testing.T, o opts) {
	e := start(t, o)
	res, _ := must[protocol.MemReserveReq, protocol.PtrReply](e, protocol.OpMemAddressReserve, protocol.MemReserveReq{Size: 2 * gran}, nil)
	h, _ := must[protocol.MemCreateReq, protocol.HandleReply](e, protocol.OpMemCreate, protocol.MemCreateReq{Type: 1, Size: gran}, nil)
	must[protocol.MemMapReq, protocol.Empty](e, protocol.OpMemMap, protocol.MemMapReq{Ptr: res.Ptr, Size: gran, Handle: h.Handle}, nil)
	must[protocol.MemSetAccessReq, protocol.Empty](e, protocol.OpMemSetAccess, protocol.MemSetAccessReq{Ptr: res.Ptr, Size: gran, Flags: 3}, nil)
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: res.Ptr, Count: gran, ElemSize: 1, Value: 9}, nil)
	if err := e.close(); err != nil {
		t.Fatalf("session end: %v", err)
	}
}
