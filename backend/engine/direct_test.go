package engine

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// A run of guest pages that are physically contiguous across a registration
// chunk's end must be copied as one DMA per chunk: CUDA refuses a host
// range that leaves its registration (CUDA_ERROR_INVALID_VALUE; the sim
// device does the same). In a guest with more than a chunk of RAM, a
// pageable buffer whose pages straddle the boundary met this.
func TestDirectRunAcrossChunks(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	c, err := drv.Context(0)
	if err != nil {
		t.Fatal(err)
	}
	directRunAcrossChunks(t, c)
}

// directRunAcrossChunks is TestDirectRunAcrossChunks on device c (the sim
// here, the GPU in TestGPUDirectRunAcrossChunks).
func directRunAcrossChunks(t *testing.T, c device.Context) {
	const page = 4096
	// A region of a chunk and two pages; only the pages the copy touches
	// get memory.
	size := ChunkSize + 2*page
	host, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot map %d bytes: %v", size, err)
	}
	defer unix.Munmap(host)
	r := &guestmem.Region{GuestPhys: 1 << 20, Size: uint64(size), FD: -1, Host: host}
	reg := NewRegistry()
	defer reg.Close()
	e := New(Direct, reg)
	defer e.Close()

	// Three pieces: the last page of chunk 0 less 100 bytes, the first
	// page of chunk 1, and 300 bytes of the next: one run across the end.
	lo := uint64(ChunkSize - 3*page/4)
	pieces := func(b []byte) Pieces {
		return Pieces{
			{Host: b[lo:ChunkSize], Region: r, Off: lo},
			{Host: b[ChunkSize : ChunkSize+page], Region: r, Off: ChunkSize},
			{Host: b[ChunkSize+page : ChunkSize+page+300], Region: r, Off: ChunkSize + page},
		}
	}
	total := uint64(ChunkSize + page + 300 - lo)
	want := make([]byte, total)
	for i := range want {
		want[i] = byte(i*7 + 3)
	}
	copy(host[lo:], want)
	dev, err := c.MemAlloc(total)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(dev)
	if k, err := e.Copy(c, HtoD, dev, total, pieces(host), device.DefaultStream); err != nil || k != Direct {
		t.Fatalf("HtoD across the chunk end: engine %v, %v", k, err)
	}
	if err := c.StreamSynchronize(device.DefaultStream); err != nil { // the DMA reads host until then
		t.Fatal(err)
	}
	clear(host[lo : lo+total])
	if k, err := e.Copy(c, DtoH, dev, total, pieces(host), device.DefaultStream); err != nil || k != Direct {
		t.Fatalf("DtoH across the chunk end: engine %v, %v", k, err)
	}
	if err := c.StreamSynchronize(device.DefaultStream); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(host[lo:lo+total], want) {
		t.Fatal("the round trip across the chunk end changed the bytes")
	}
	if n := len(*reg.chunks.Load()); n != 2 {
		t.Errorf("%d chunks registered, want 2", n)
	}
}
