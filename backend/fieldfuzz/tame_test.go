package fieldfuzz

import (
	"testing"

	"github.com/vgpu-project/vgpu/protocol"
)

// A random launch keeps its largest grid dimension but never asks for more
// than MaxRandomBlocks blocks (a valid grid of 2^31-1 x 65535 blocks runs
// for hours on a real GPU).
func TestTameKeepsLaunchesFinite(t *testing.T) {
	info, _ := protocol.Lookup(protocol.OpLaunchKernel)
	for _, g := range [][3]uint32{{1<<31 - 1, 65535, 65535}, {1<<31 - 1, 65535, 1}, {7, 65535, 65535}, {1 << 20, 1 << 12, 1}} {
		r := protocol.LaunchReq{GridX: g[0], GridY: g[1], GridZ: g[2], BlockX: 32}
		p := protocol.Bytes(&r)
		tame(info, p)
		got, _, _ := protocol.Decode[protocol.LaunchReq](p)
		n := uint64(max(got.GridX, 1)) * uint64(max(got.GridY, 1)) * uint64(max(got.GridZ, 1))
		if n > MaxRandomBlocks || max(got.GridX, got.GridY, got.GridZ) != max(g[0], g[1], g[2]) || got.BlockX != 32 {
			t.Errorf("grid %v tamed to [%d %d %d]", g, got.GridX, got.GridY, got.GridZ)
		}
	}
	ex, _ := protocol.Lookup(protocol.OpLaunchKernelEx)
	r := protocol.LaunchExReq{Launch: protocol.LaunchReq{GridX: 1<<31 - 1, GridY: 65535, GridZ: 3, BlockX: 32}}
	p := protocol.Bytes(&r)
	tame(ex, p)
	if got, _, _ := protocol.Decode[protocol.LaunchExReq](p); got.Launch.GridX != 1<<31-1 || got.Launch.GridY != 1 || got.Launch.GridZ != 1 {
		t.Errorf("LAUNCH_KERNEL_EX's grid tamed to %+v", got.Launch)
	}
	small := protocol.LaunchReq{GridX: 1024, GridY: 64, GridZ: 2, BlockX: 32}
	p = protocol.Bytes(&small)
	tame(info, p)
	if got, _, _ := protocol.Decode[protocol.LaunchReq](p); got != small {
		t.Errorf("a grid of %d blocks was changed: %+v", 1024*64*2, got)
	}
}
