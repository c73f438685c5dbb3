package session_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// cuOccupancyMaxActiveClusters on the sim device: the H100 model's GPCs
// (114 SMs in 7 GPCs: two of 17, five of 16), 8 blocks of 256 threads per
// SM, and the cluster rules the driver enforces.
func TestOccupancyMaxClusters(t *testing.T) {
	e := start(t, opts{})
	fn := e.saxpy()
	q := func(cl protocol.Cluster, block, smem uint32) (int32, int32) {
		t.Helper()
		req := protocol.ClusterOccupancyReq{Func: fn, GridX: 16, GridY: 1, GridZ: 1, BlockX: block, BlockY: 1, BlockZ: 1, SharedMem: smem, Cluster: cl}
		st, rep, _ := do[protocol.ClusterOccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxClusters, req, nil)
		return st, rep.NumBlocks
	}
	for _, c := range []struct {
		name  string
		cl    protocol.Cluster
		block uint32
		smem  uint32
		want  int32
		st    device.Result
	}{
		{"pairs", protocol.Cluster{X: 2, Y: 1, Z: 1}, 256, 0, 2*17*8/2 + 5*16*8/2, device.Success},
		{"eights, spread", protocol.Cluster{X: 2, Y: 2, Z: 2, Policy: 1}, 256, 0, 2*17 + 5*16, device.Success},
		{"singles", protocol.Cluster{X: 1, Y: 1, Z: 1}, 1024, 0, 114 * 2, device.Success},
		{"no shape", protocol.Cluster{}, 256, 0, 0, device.ErrInvalidClusterSize},
		{"16 without opt-in", protocol.Cluster{X: 16, Y: 1, Z: 1}, 256, 0, 0, device.ErrInvalidClusterSize},
		{"32 blocks", protocol.Cluster{X: 32, Y: 1, Z: 1}, 256, 0, 0, device.ErrInvalidClusterSize},
		{"zero dimension", protocol.Cluster{X: 2, Y: 0, Z: 1}, 256, 0, 0, device.ErrInvalidClusterSize},
		{"huge dimensions", protocol.Cluster{X: 1 << 31, Y: 1 << 31, Z: 4}, 256, 0, 0, device.ErrInvalidClusterSize},
		{"unknown policy", protocol.Cluster{X: 2, Y: 1, Z: 1, Policy: 3}, 256, 0, 0, device.ErrInvalidValue},
		{"block 0", protocol.Cluster{X: 2, Y: 1, Z: 1}, 0, 0, 0, device.ErrInvalidValue},
		{"block 2048", protocol.Cluster{X: 2, Y: 1, Z: 1}, 2048, 0, 0, device.ErrInvalidValue},
		{"more shared memory than a block may have", protocol.Cluster{X: 2, Y: 1, Z: 1}, 256, 1 << 31, 0, device.Success},
	} {
		st, n := q(c.cl, c.block, c.smem)
		wantStatus(t, c.name, st, c.st)
		if n != c.want {
			t.Errorf("%s: %d clusters, want %d", c.name, n, c.want)
		}
	}
	// A kernel that allows non-portable sizes may have 16 blocks a cluster.
	must[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, protocol.FuncSetAttributeReq{Func: fn, Attr: 14, Value: 1}, nil)
	if st, n := q(protocol.Cluster{X: 16, Y: 1, Z: 1}, 256, 0); st != 0 || n != 2*(17*8/16)+5*(16*8/16) {
		t.Fatalf("16-block clusters with the opt-in: status %v, %d clusters", device.Result(st), n)
	}
	// A compile-time (here: set) required shape applies when the launch
	// names none, and a different one is refused.
	must[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, protocol.FuncSetAttributeReq{Func: fn, Attr: 11, Value: 4}, nil)
	must[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, protocol.FuncSetAttributeReq{Func: fn, Attr: 12, Value: 1}, nil)
	must[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, protocol.FuncSetAttributeReq{Func: fn, Attr: 13, Value: 1}, nil)
	if st, n := q(protocol.Cluster{}, 256, 0); st != 0 || n != 2*(17*8/4)+5*(16*8/4) {
		t.Fatalf("required shape: status %v, %d clusters", device.Result(st), n)
	}
	st, _ := q(protocol.Cluster{X: 2, Y: 1, Z: 1}, 256, 0)
	wantStatus(t, "a shape other than the required one", st, device.ErrInvalidClusterSize)
	st2, _, _ := do[protocol.ClusterOccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxClusters, protocol.ClusterOccupancyReq{Func: 0xdead, BlockX: 32, BlockY: 1, BlockZ: 1, Cluster: protocol.Cluster{X: 2, Y: 1, Z: 1}}, nil)
	wantStatus(t, "unknown function", st2, device.ErrInvalidHandle)
}

// LAUNCH_KERNEL_EX launches in clusters: the grid must be a multiple of
// the cluster, whose shape is checked as for occupancy.
func TestLaunchKernelEx(t *testing.T) {
	e := start(t, opts{})
	fn := e.saxpy()
	params := make([]byte, 24)
	req := protocol.LaunchExReq{
		Launch:  protocol.LaunchReq{Func: fn, GridX: 4, GridY: 2, GridZ: 1, BlockX: 128, BlockY: 1, BlockZ: 1, ParamSize: 24},
		Cluster: protocol.Cluster{X: 2, Y: 2, Z: 1, Policy: 2},
	}
	must[protocol.LaunchExReq, protocol.Empty](e, protocol.OpLaunchKernelEx, req, params)
	for _, c := range []struct {
		name string
		mod  func(r *protocol.LaunchExReq)
		want device.Result
	}{
		{"grid not a multiple", func(r *protocol.LaunchExReq) { r.Launch.GridX = 3 }, device.ErrInvalidClusterSize},
		{"cluster of 17", func(r *protocol.LaunchExReq) { r.Cluster = protocol.Cluster{X: 17, Y: 1, Z: 1} }, device.ErrInvalidClusterSize},
		{"cluster of 16, not allowed", func(r *protocol.LaunchExReq) { r.Launch.GridX = 16; r.Cluster = protocol.Cluster{X: 16, Y: 1, Z: 1} }, device.ErrInvalidClusterSize},
		{"policy 7", func(r *protocol.LaunchExReq) { r.Cluster.Policy = 7 }, device.ErrInvalidValue},
		{"zero block", func(r *protocol.LaunchExReq) { r.Launch.BlockY = 0 }, device.ErrInvalidValue},
		{"short parameters", func(r *protocol.LaunchExReq) { r.Launch.ParamSize = 16 }, device.ErrInvalidValue},
	} {
		r := req
		c.mod(&r)
		st, _, _ := do[protocol.LaunchExReq, protocol.Empty](e, protocol.OpLaunchKernelEx, r, params[:r.Launch.ParamSize])
		wantStatus(t, c.name, st, c.want)
	}
	// Only a policy, no shape: a launch of single-block clusters.
	r := req
	r.Cluster = protocol.Cluster{Policy: 1}
	must[protocol.LaunchExReq, protocol.Empty](e, protocol.OpLaunchKernelEx, r, params)
	ctx, _ := e.drv.Context(0)
	if s := ctx.(device.StatsReporter).Stats(); s.Launches != 2 {
		t.Fatalf("%d launches recorded, want 2", s.Launches)
	}
}

// MEM_GET_GRANULARITY: the sim H100's 2 MiB, and the property's enums
// checked before the device sees them.
func TestMemGetGranularity(t *testing.T) {
	e := start(t, opts{})
	for _, opt := range []uint32{0, 1} {
		g, _ := must[protocol.GranularityReq, protocol.GranularityReply](e, protocol.OpMemGetGranularity, protocol.GranularityReq{Option: opt, Type: 1, HandleTypes: 1}, nil)
		if g.Granularity != 2<<20 {
			t.Fatalf("option %d: granularity %d", opt, g.Granularity)
		}
	}
	for _, c := range []struct {
		name string
		req  protocol.GranularityReq
		want device.Result
	}{
		{"device 7", protocol.GranularityReq{Device: 7, Type: 1}, device.ErrInvalidDevice},
		{"option 2", protocol.GranularityReq{Option: 2, Type: 1}, device.ErrInvalidValue},
		{"type 0", protocol.GranularityReq{}, device.ErrInvalidValue},
		{"type 9", protocol.GranularityReq{Type: 9}, device.ErrInvalidValue},
		{"handle type 0x10", protocol.GranularityReq{Type: 1, HandleTypes: 0x10}, device.ErrInvalidValue},
		{"compression 2", protocol.GranularityReq{Type: 1, Compression: 2}, device.ErrInvalidValue},
		{"rdma 2", protocol.GranularityReq{Type: 1, RDMA: 2}, device.ErrInvalidValue},
		{"usage 0x100", protocol.GranularityReq{Type: 1, Usage: 0x100}, device.ErrInvalidValue},
	} {
		st, _, _ := do[protocol.GranularityReq, protocol.GranularityReply](e, protocol.OpMemGetGranularity, c.req, nil)
		wantStatus(t, c.name, st, c.want)
	}
}

// The attributes of what vgpu does not serve read 0 (the sim device, like
// the H100, reports 1 for them): export handle types of the virtual-memory
// API and of pools, and managed memory. The families it serves, the virtual-memory API and
// memory pools, report the device's value.
func TestUnservedAttributesReadZero(t *testing.T) {
	e := start(t, opts{})
	ctx, _ := e.drv.Context(0)
	p, err := ctx.Properties()
	if err != nil {
		t.Fatal(err)
	}
	if p.Attrs[102] != 1 || p.Attrs[115] != 1 || p.Attrs[103] != 1 || p.Attrs[83] != 1 || p.Attrs[89] != 1 {
		t.Fatalf("the sim device reports VMM %d, pools %d, POSIX handles %d: want the H100's 1", p.Attrs[102], p.Attrs[115], p.Attrs[103])
	}
	info, _ := must[protocol.DeviceReq, protocol.DeviceInfo](e, protocol.OpDeviceGetInfo, protocol.DeviceReq{}, nil)
	for _, a := range []int{96, 103, 104, 105, 110, 119, 83, 88, 89, 100, 101} {
		if info.Attrs[a] != 0 {
			t.Errorf("attribute %d = %d, want 0 (not served)", a, info.Attrs[a])
		}
	}
	for _, a := range []int{95, 102, 115} {
		if info.Attrs[a] != p.Attrs[a] {
			t.Errorf("attribute %d = %d, want the device's %d (served)", a, info.Attrs[a], p.Attrs[a])
		}
	}
	if info.Attrs[16] != p.Attrs[16] || info.Attrs[75] != 9 {
		t.Errorf("other attributes changed: SMs %d (device %d), major %d", info.Attrs[16], p.Attrs[16], info.Attrs[75])
	}
}

// MODULE_LIST_FUNCTIONS names a module's kernels, in pages of at most
// MaxFunctionListBytes, for cuModuleEnumerateFunctions and the tools
// table's function iterator.
func TestModuleListFunctions(t *testing.T) {
	e := start(t, opts{})
	load := func(ptx string) uint64 {
		t.Helper()
		req := protocol.ModuleLoadReq{Kind: protocol.ImagePTX, Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(ptx))}}
		mod, _ := must[protocol.ModuleLoadReq, protocol.ModuleLoadReply](e, protocol.OpModuleLoad, req, []byte(ptx))
		return mod.Module
	}
	list := func(mod uint64) []string {
		t.Helper()
		var names []string
		for first := uint32(0); ; {
			rep, tail := must[protocol.ModuleFunctionsReq, protocol.ModuleFunctionsReply](e, protocol.OpModuleListFunctions, protocol.ModuleFunctionsReq{Module: mod, First: first}, nil)
			if len(tail) > protocol.MaxFunctionListBytes {
				t.Fatalf("a page of %d bytes", len(tail))
			}
			got := strings.Split(strings.TrimSuffix(string(tail), "\x00"), "\x00")
			if rep.Count == 0 {
				got = nil
			}
			if uint32(len(got)) != rep.Count {
				t.Fatalf("page from %d: %d names for a count of %d", first, len(got), rep.Count)
			}
			names = append(names, got...)
			first += rep.Count
			if first >= rep.Total {
				return names
			}
			if rep.Count == 0 {
				t.Fatalf("an empty page at %d of %d", first, rep.Total)
			}
		}
	}
	if got := list(load(testPTX)); strings.Join(got, ",") != "noargs,saxpy,withstruct" {
		t.Fatalf("kernels %q", got)
	}
	// 120 kernels of 400-byte names: two pages.
	var b strings.Builder
	b.WriteString(".version 8.0\n.target sm_90\n.address_size 64\n")
	for i := 0; i < 120; i++ {
		fmt.Fprintf(&b, ".visible .entry k%03d%s()\n{\nret;\n}\n", i, strings.Repeat("x", 396))
	}
	if got := list(load(b.String())); len(got) != 120 || got[119] != "k119"+strings.Repeat("x", 396) {
		t.Fatalf("%d kernels listed", len(got))
	}
	st, _, _ := do[protocol.ModuleFunctionsReq, protocol.ModuleFunctionsReply](e, protocol.OpModuleListFunctions, protocol.ModuleFunctionsReq{Module: 0xbad}, nil)
	wantStatus(t, "a module not the session's", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.ModuleFunctionsReq, protocol.ModuleFunctionsReply](e, protocol.OpModuleListFunctions, protocol.ModuleFunctionsReq{Module: load(testPTX), First: 4}, nil)
	wantStatus(t, "from past the end", st, device.ErrInvalidValue)
}
