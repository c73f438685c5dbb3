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
