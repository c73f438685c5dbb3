package session_test

import (
	"math"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// LAUNCH_KERNEL_ATTRS launches with launch attributes: cooperative
// launches whose blocks must all be resident at once (as many as the
// occupancy calculator allows per SM, times the SMs), and the stream
// attributes as launch attributes, each checked as on a stream.
func TestLaunchKernelAttrs(t *testing.T) { testLaunchKernelAttrs(t, opts{}) }

func testLaunchKernelAttrs(t *testing.T, o opts) {
	e := start(t, o)
	fn := e.saxpy()
	occ, _ := must[protocol.OccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxBlocks, protocol.OccupancyReq{Func: fn, BlockSize: 128}, nil)
	info, _ := must[protocol.DeviceReq, protocol.DeviceInfo](e, protocol.OpDeviceGetInfo, protocol.DeviceReq{}, nil)
	resident := uint32(occ.NumBlocks) * uint32(info.Attrs[16]) // blocks per SM times SMs
	if resident == 0 {
		t.Fatalf("occupancy %d blocks per SM, %d SMs", occ.NumBlocks, info.Attrs[16])
	}
	mem, _ := must[protocol.MemAllocReq, protocol.PtrReply](e, protocol.OpMemAlloc, protocol.MemAllocReq{Size: 1 << 20}, nil)
	params := make([]byte, 24)
	coop := protocol.LaunchAttrsReq{
		Launch: protocol.LaunchReq{Func: fn, GridX: resident, GridY: 1, GridZ: 1, BlockX: 128, BlockY: 1, BlockZ: 1, ParamSize: 24},
		Attrs:  protocol.LaunchAttrs{Has: 1 << device.LaunchAttrCooperative, Cooperative: 1},
	}
	must[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, coop, params)
	hints := coop
	hints.Launch.GridX = 4
	hints.Attrs = protocol.LaunchAttrs{Has: 1<<1 | 1<<6 | 1<<8 | 1<<9 | 1<<10 | 1<<14,
		Window:                    protocol.AccessPolicyWindow{Base: mem.Ptr, Bytes: 4096, HitRatio: math.Float32bits(1), HitProp: 2},
		ProgrammaticSerialization: 1, Priority: -3, MemSyncDomainMap: 0x0100, MemSyncDomain: 1, Carveout: 50}
	// Each hint alone first, so that a refusal names its attribute.
	for bit := 0; bit < 32; bit++ {
		if hints.Attrs.Has&(1<<bit) == 0 {
			continue
		}
		one := hints
		h, a := &hints.Attrs, protocol.LaunchAttrs{Has: 1 << bit}
		switch bit {
		case 1:
			a.Window = h.Window
		case 6:
			a.ProgrammaticSerialization = h.ProgrammaticSerialization
		case 8:
			a.Priority = h.Priority
		case 9:
			a.MemSyncDomainMap = h.MemSyncDomainMap
		case 10:
			a.MemSyncDomain = h.MemSyncDomain
		case 14:
			a.Carveout = h.Carveout
		}
		one.Attrs = a
		st, _, _ := do[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, one, params)
		if device.Result(st) != device.Success {
			t.Errorf("launch attribute %d alone: status %v", bit, device.Result(st))
		}
	}
	must[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, hints, params)
	clustered := coop
	clustered.Launch.GridX = 8
	clustered.Cluster = protocol.Cluster{X: 2, Y: 1, Z: 1}
	must[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, clustered, params)

	for _, c := range []struct {
		name string
		base protocol.LaunchAttrsReq
		mod  func(r *protocol.LaunchAttrsReq)
		want device.Result
	}{
		{"cooperative, one block too many", coop, func(r *protocol.LaunchAttrsReq) { r.Launch.GridX++ }, device.ErrCooperativeTooLarge},
		{"cooperative 2", coop, func(r *protocol.LaunchAttrsReq) { r.Attrs.Cooperative = 2 }, device.ErrInvalidValue},
		{"cooperative not given but set", coop, func(r *protocol.LaunchAttrsReq) { r.Attrs.Has = 0 }, device.ErrInvalidValue},
		{"an attribute not served (events, 7)", coop, func(r *protocol.LaunchAttrsReq) { r.Attrs.Has |= 1 << 7 }, device.ErrInvalidValue},
		{"attribute 31", coop, func(r *protocol.LaunchAttrsReq) { r.Attrs.Has |= 1 << 31 }, device.ErrInvalidValue},
		{"a foreign function", coop, func(r *protocol.LaunchAttrsReq) { r.Launch.Func = 0xdead }, device.ErrInvalidHandle},
		{"a foreign stream", coop, func(r *protocol.LaunchAttrsReq) { r.Launch.Stream = 0x9999 }, device.ErrInvalidHandle},
		{"a cluster of 17", clustered, func(r *protocol.LaunchAttrsReq) { r.Cluster.X = 17 }, device.ErrInvalidClusterSize},
		{"a sync policy (a stream attribute; the driver refuses it on a launch)", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Has |= 1 << 3; r.Attrs.SyncPolicy = 2 }, device.ErrInvalidValue},
		{"programmatic serialization 2", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.ProgrammaticSerialization = 2 }, device.ErrInvalidValue},
		{"sync domain 3", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.MemSyncDomain = 3 }, device.ErrInvalidValue},
		{"carveout 101", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Carveout = 101 }, device.ErrInvalidValue},
		{"a window over foreign memory", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Window.Base = 0x1000 }, device.ErrInvalidValue},
		{"a window past its allocation", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Window.Bytes = 2 << 20 }, device.ErrInvalidValue},
		{"hit ratio -1", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Window.HitRatio = math.Float32bits(-1) }, device.ErrInvalidValue},
		{"a window not given but set", hints, func(r *protocol.LaunchAttrsReq) { r.Attrs.Has &^= 1 << 1 }, device.ErrInvalidValue},
	} {
		r := c.base
		c.mod(&r)
		st, _, _ := do[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, r, params)
		wantStatus(t, c.name, st, c.want)
	}
	// A refused cooperative launch breaks nothing: it never ran.
	must[protocol.LaunchAttrsReq, protocol.Empty](e, protocol.OpLaunchKernelAttrs, coop, params)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{}, nil)
}
