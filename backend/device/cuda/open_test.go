package cuda

import (
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
)

// TestOpenWithoutGPU runs everywhere: without a usable GPU (no libcuda, or
// Debian's libcuda 535 without a device) Open must fail with ErrNoGPU and a
// reason, never panic — even where entry points such as cuFuncGetParamInfo
// are missing.
func TestOpenWithoutGPU(t *testing.T) {
	d, err := Open(nil)
	if err == nil {
		d.Close()
		t.Skip("a GPU is present; the gpu-tagged tests cover it")
	}
	if !errors.Is(err, device.ErrNoGPU) {
		t.Fatalf("Open without a GPU: %v (want an error wrapping device.ErrNoGPU)", err)
	}
	t.Logf("as expected: %v", err)
}

// The host NVML is asked for a GPU by the UUID CUDA gives it, in NVML's
// text form.
func TestNVMLUUID(t *testing.T) {
	u := [16]byte{0x5e, 0x5a, 0x1b, 0x2c, 0x01, 0x02, 0xab, 0xcd, 0xef, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x6f}
	if got, want := nvmlUUID(u), "GPU-5e5a1b2c-0102-abcd-ef00-10203040506f"; got != want {
		t.Fatalf("nvmlUUID = %q, want %q", got, want)
	}
}

// Without host NVML (or before it knows the GPU) a monitor has no
// readings and a release string is empty, never a crash.
func TestHostNVMLAbsent(t *testing.T) {
	var n *hostNVML
	if _, ok := n.device([16]byte{}); ok {
		t.Fatal("a nil host NVML found a device")
	}
	n.close()
	if r := (&Driver{}).Release(); r != "" {
		t.Fatalf("Release without NVML = %q", r)
	}
}
