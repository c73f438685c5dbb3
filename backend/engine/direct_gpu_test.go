//go:build gpu

package engine

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/cuda"
)

// TestGPUDirectRunAcrossChunks checks on the GPU the rule the sim device
// models (a copy's host range may not leave the registration it starts in:
// two neighbouring registrations, a copy over their boundary, must be
// CUDA_ERROR_INVALID_VALUE), then runs TestDirectRunAcrossChunks's copies
// there: a run of guest pages across a 1 GiB registration chunk's end.
func TestGPUDirectRunAcrossChunks(t *testing.T) {
	drv, err := cuda.Open(nil)
	if err != nil {
		t.Fatalf("no GPU for a gpu-tagged test: %v", err)
	}
	c, err := drv.Context(0)
	if err != nil {
		t.Fatal(err)
	}
	const half = 2 << 20
	host, err := unix.Mmap(-1, 0, 2*half, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(host)
	for _, b := range [][]byte{host[:half], host[half:]} {
		if _, err := c.HostRegister(b, false); err != nil {
			t.Fatal(err)
		}
		defer c.HostUnregister(b)
	}
	dev, err := c.MemAlloc(2 * half)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(dev)
	across := host[half-4096 : half+4096]
	err = c.MemcpyHtoD(dev, across, device.DefaultStream, true)
	if err == nil {
		err = c.StreamSynchronize(device.DefaultStream)
	}
	if r := device.ResultOf(err); r != device.ErrInvalidValue {
		t.Errorf("an async copy over two registrations: %v (%v); the sim device answers CUDA_ERROR_INVALID_VALUE: make the two agree", r, err)
	}
	if err := c.MemcpyDtoH(across, dev, device.DefaultStream, false); device.ResultOf(err) != device.ErrInvalidValue {
		t.Errorf("a copy back over two registrations: %v; the sim device answers CUDA_ERROR_INVALID_VALUE: make the two agree", err)
	}
	directRunAcrossChunks(t, c)
}
