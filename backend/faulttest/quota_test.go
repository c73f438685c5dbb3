package faulttest_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/protocol"
)

// TestQuota: with a per-VM cap (--mem-limit), a VM that asks for more gets
// CUDA_ERROR_OUT_OF_MEMORY (2) -- at once, or once its sessions together
// reach the cap -- while another VM allocates its own full cap, copies and
// frees concurrently; MemGetInfo shows each VM its own cap; a VM's usage
// returns to 0 when its sessions end.
func TestQuota(t *testing.T) {
	const limit = 64 << 20
	b := newBackend(t, limit)
	a1, a2 := b.connect("a", 1000, nil), b.connect("a", 1001, nil)
	vb := b.connect("b", 1000, nil)

	alloc := func(g *guest, n uint64) (uint64, device.Result) {
		f := g.call(protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Size: n}), nil)
		if f.Status != 0 {
			return 0, device.Result(f.Status)
		}
		rep, _, _ := protocol.Decode[protocol.PtrReply](f.Payload)
		return rep.Ptr, 0
	}
	if _, st := alloc(a1, limit+1); st != device.ErrOutOfMemory {
		t.Fatalf("one allocation over the cap: %v, want CUDA_ERROR_OUT_OF_MEMORY", st)
	}
	if _, st := alloc(a1, 1<<62); st != device.ErrOutOfMemory {
		t.Fatalf("2^62 bytes: %v", st)
	}
	p, st := alloc(a1, 40<<20)
	if st != 0 {
		t.Fatal(st)
	}
	if _, st := alloc(a2, 40<<20); st != device.ErrOutOfMemory {
		t.Fatalf("VM a's second session past the VM's cap: %v, want CUDA_ERROR_OUT_OF_MEMORY", st)
	}
	mi := mustOK(t, "meminfo", a2.call(protocol.OpMemGetInfo, protocol.Bytes(&protocol.DeviceReq{}), nil))
	info, _, _ := protocol.Decode[protocol.MemInfoReply](mi.Payload)
	if info.Total != limit || info.Free != limit-40<<20 {
		t.Fatalf("VM a's MemGetInfo %+v; want its cap and what is left of it", info)
	}

	// While a hammers its cap, b uses all of its own.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			if _, st := alloc(a2, 32<<20); st != device.ErrOutOfMemory {
				t.Errorf("a over its cap, try %d: %v", i, st)
				return
			}
		}
	}()
	for i := 0; i < 20; i++ {
		q, st := alloc(vb, limit)
		if st != 0 {
			t.Fatalf("VM b's full cap while a is over its own: %v", st)
		}
		data := pattern(uint64(i), 1<<16)
		if s := vb.htod(q+limit-1<<16, data); s != 0 {
			t.Fatal(device.Result(s))
		}
		if !bytes.Equal(vb.dtoh(q+limit-1<<16, 1<<16), data) {
			t.Fatal("VM b's data corrupted")
		}
		mustOK(t, "free", vb.call(protocol.OpMemFree, protocol.Bytes(&protocol.PtrReq{Ptr: q}), nil))
	}
	wg.Wait()

	// a frees: its cap is whole again; when its sessions end it holds nothing.
	mustOK(t, "free", a1.call(protocol.OpMemFree, protocol.Bytes(&protocol.PtrReq{Ptr: p}), nil))
	if _, st := alloc(a2, limit); st != 0 {
		t.Fatalf("a's full cap after freeing: %v", st)
	}
	a1.close()
	a2.close()
	vb.close()
	testwait.For(t, 10*time.Second, "device memory back to zero", func() bool { m, n := b.devMem(); return m == 0 && n == 0 })
	if vms := b.srv.Status().VMs; len(vms) != 0 {
		t.Fatalf("VMs left: %+v", vms)
	}
}
