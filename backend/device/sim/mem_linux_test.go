package sim

import (
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Large allocations are mappings, and the process has only
// vm.max_map_count of them: past the simulated devices' share an
// allocation is CUDA_ERROR_OUT_OF_MEMORY, and freeing makes room again.
func TestMappedAllocationsCapped(t *testing.T) {
	old := maxMappedAllocs
	maxMappedAllocs = mappedAllocs.Load() + 3
	defer func() { maxMappedAllocs = old }()
	d, err := New(Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, _ := d.Context(0)
	var ps []device.Ptr
	for i := 0; i < 3; i++ {
		p, err := c.MemAlloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	_, err = c.MemAlloc(1 << 20)
	var de *device.Error
	if !errors.As(err, &de) || de.Result != device.ErrOutOfMemory {
		t.Fatalf("allocation past the mapping cap: %v", err)
	}
	if _, err := c.MemAlloc(64); err != nil {
		t.Fatalf("a small allocation (no mapping): %v", err)
	}
	if err := c.MemFree(ps[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MemAlloc(1 << 20); err != nil {
		t.Fatalf("after a free: %v", err)
	}
}
