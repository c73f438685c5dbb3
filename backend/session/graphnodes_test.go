package session_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// deps is a node request's tail of dependency handles (and extra bytes).
func deps(extra []byte, ids ...uint64) []byte {
	var b []byte
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return append(b, extra...)
}

// nodesOf lists graph g's nodes (roots: its root nodes).
func nodesOf(e *env, g uint64, roots uint32) []uint64 {
	e.t.Helper()
	rep, tail := must[protocol.GraphNodesReq, protocol.GraphNodesReply](e, protocol.OpGraphGetNodes, protocol.GraphNodesReq{Graph: g, Roots: roots}, nil)
	if rep.Count != rep.Total || len(tail) != 8*int(rep.Count) {
		e.t.Fatalf("GET_NODES: total %d, count %d, %d tail bytes", rep.Total, rep.Count, len(tail))
	}
	var ids []uint64
	for i := 0; i < len(tail); i += 8 {
		ids = append(ids, binary.LittleEndian.Uint64(tail[i:]))
	}
	return ids
}

// A graph built node by node on pinned (registered) guest memory: copy in,
// memset, a kernel, copy out; each launch replays it, the nodes are listed
// with their types, and what a node cannot name is refused.
func TestGraphNodes(t *testing.T) { testGraphNodes(t, opts{}) }

func testGraphNodes(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	segs := []protocol.Segment{{GPA: 1<<32 + 8192, Len: 4096}, {GPA: 4096, Len: 4096}} // not contiguous
	want := append(e.guestFill(segs[0].GPA, 4096, 1), e.guestFill(segs[1].GPA, 4096, 2)...)
	reg := e.register(segs)
	region := func(off, n uint64) protocol.BufRef {
		return protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Offset: off, Len: n}
	}
	p := e.alloc(8192)
	fn := e.saxpy()
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)

	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	add := func(op protocol.Opcode, req any, tail []byte) (int32, uint64) {
		t.Helper()
		var st int32
		var rep protocol.HandleReply
		switch r := req.(type) {
		case protocol.GraphAddMemcpyNodeReq:
			st, rep, _ = do[protocol.GraphAddMemcpyNodeReq, protocol.HandleReply](e, op, r, tail)
		case protocol.GraphAddMemsetNodeReq:
			st, rep, _ = do[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, op, r, tail)
		case protocol.GraphAddKernelNodeReq:
			st, rep, _ = do[protocol.GraphAddKernelNodeReq, protocol.HandleReply](e, op, r, tail)
		case protocol.GraphAddEmptyNodeReq:
			st, rep, _ = do[protocol.GraphAddEmptyNodeReq, protocol.HandleReply](e, op, r, tail)
		}
		return st, rep.Handle
	}
	mustAdd := func(name string, op protocol.Opcode, req any, tail []byte) uint64 {
		t.Helper()
		st, h := add(op, req, tail)
		wantStatus(t, name, st, 0)
		return h
	}
	in := mustAdd("copy in", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyHtoD, Dst: p, Host: region(0, 8192)}, nil)
	set := mustAdd("memset", protocol.OpGraphAddMemsetNode, protocol.GraphAddMemsetNodeReq{Graph: g.Handle, NumDeps: 1, Dst: p + 16, ElemSize: 4, Value: 0x41414141, Width: 4, Height: 1}, deps(nil, in))
	params := make([]byte, 24)
	binary.LittleEndian.PutUint64(params[8:], p)
	binary.LittleEndian.PutUint64(params[16:], p)
	kn := mustAdd("kernel", protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, NumDeps: 1,
		Launch: protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 24}}, deps(params, set))
	join := mustAdd("empty", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: 2}, deps(nil, set, kn))
	out := mustAdd("copy out", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, NumDeps: 1, Dir: protocol.GraphCopyDtoH, Src: p, Host: region(4096, 4096)}, deps(nil, join))

	if got := nodesOf(e, g.Handle, 0); len(got) != 5 || got[0] != in || got[4] != out {
		t.Fatalf("nodes %v, want [%d %d %d %d %d]", got, in, set, kn, join, out)
	}
	if got := nodesOf(e, g.Handle, 1); len(got) != 1 || got[0] != in {
		t.Fatalf("root nodes %v, want [%d]", got, in)
	}
	for h, typ := range map[uint64]uint32{in: device.GraphNodeMemcpy, set: device.GraphNodeMemset, kn: device.GraphNodeKernel, join: device.GraphNodeEmpty} {
		r, _ := must[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: h}, nil)
		if r.Type != typ {
			t.Fatalf("node %d: type %d, want %d", h, r.Type, typ)
		}
	}

	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	// Guest memory after a launch: the first page copied in, 16 bytes of
	// 0x41 set at offset 16, then copied out over the second page.
	page := append(append(append([]byte(nil), want[:16]...), bytes.Repeat([]byte{0x41}, 16)...), want[32:4096]...)
	for i := 0; i < 2; i++ {
		e.guestFill(segs[1].GPA, 4096, byte(9+i))
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
		if got := e.guestRead(segs[1].GPA, 4096); !bytes.Equal(got, page) {
			t.Fatalf("launch %d: guest page after the graph differs (% x...)", i, got[:40])
		}
	}

	// A clone copies the nodes and their edges, and uses the region too;
	// removing a node of the clone leaves the original whole.
	g2, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphClone, protocol.HandleReq{Handle: g.Handle}, nil)
	ids2 := nodesOf(e, g2.Handle, 0)
	if len(ids2) != 5 || ids2[0] == in {
		t.Fatalf("clone's nodes %v (the original's: %d...)", ids2, in)
	}
	x2, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g2.Handle}, nil)
	must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphUpload, protocol.GraphLaunchReq{Exec: x2.Handle, Stream: strm.Handle}, nil)
	e.guestFill(segs[1].GPA, 4096, 0x30)
	must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x2.Handle, Stream: strm.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
	if got := e.guestRead(segs[1].GPA, 4096); !bytes.Equal(got, page) {
		t.Fatal("the clone's launch left a different guest page")
	}
	// The executable graph takes the clone's parameters (same shape);
	// a graph of another shape leaves it as it was.
	upd, _ := must[protocol.GraphExecUpdateReq, protocol.GraphExecUpdateReply](e, protocol.OpGraphExecUpdate, protocol.GraphExecUpdateReq{Exec: x.Handle, Graph: g2.Handle}, nil)
	if upd.Result != device.GraphUpdateSuccess {
		t.Fatalf("update from the clone: result %d", upd.Result)
	}
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x2.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroyNode, protocol.HandleReq{Handle: ids2[4]}, nil)
	upd, _ = must[protocol.GraphExecUpdateReq, protocol.GraphExecUpdateReply](e, protocol.OpGraphExecUpdate, protocol.GraphExecUpdateReq{Exec: x.Handle, Graph: g2.Handle}, nil)
	if upd.Result == device.GraphUpdateSuccess {
		t.Fatal("update from a graph with a node fewer succeeded")
	}
	st, _, _ := do[protocol.GraphExecUpdateReq, protocol.GraphExecUpdateReply](e, protocol.OpGraphExecUpdate, protocol.GraphExecUpdateReq{Exec: x2.Handle, Graph: g2.Handle}, nil)
	wantStatus(t, "update a destroyed exec", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphExecUpdateReq, protocol.GraphExecUpdateReply](e, protocol.OpGraphExecUpdate, protocol.GraphExecUpdateReq{Exec: x.Handle, Graph: 0x9999}, nil)
	wantStatus(t, "update from a foreign graph", st, device.ErrInvalidHandle)
	e.guestFill(segs[1].GPA, 4096, 0x31)
	must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
	if got := e.guestRead(segs[1].GPA, 4096); !bytes.Equal(got, page) {
		t.Fatal("the updated graph's launch left a different guest page")
	}
	if got := nodesOf(e, g2.Handle, 0); len(got) != 4 || !equalIDs(got, ids2[:4]) {
		t.Fatalf("clone's nodes after removing the last: %v", got)
	}
	if got := nodesOf(e, g.Handle, 0); len(got) != 5 {
		t.Fatalf("the original has %d nodes after a node of its clone went", len(got))
	}
	st, _, _ = do[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: ids2[4]}, nil)
	wantStatus(t, "a destroyed node", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroyNode, protocol.HandleReq{Handle: ids2[4]}, nil)
	wantStatus(t, "destroy a destroyed node", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphClone, protocol.HandleReq{Handle: 0x9999}, nil)
	wantStatus(t, "clone a foreign graph", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphUpload, protocol.GraphLaunchReq{Exec: x2.Handle, Stream: strm.Handle}, nil)
	wantStatus(t, "upload a destroyed exec", st, device.ErrInvalidHandle)

	other, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	tests := []struct {
		name string
		op   protocol.Opcode
		req  any
		tail []byte
		want device.Result
	}{
		{"a foreign graph", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: 0x9999}, nil, device.ErrInvalidHandle},
		{"a dependency of another graph", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: other.Handle, NumDeps: 1}, deps(nil, in), device.ErrInvalidValue},
		{"a dependency that is no node", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: 1}, deps(nil, 0x9999), device.ErrInvalidValue},
		{"more dependencies than sent", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: 3}, deps(nil, in, set), device.ErrInvalidValue},
		{"fewer dependencies than sent", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: 1}, deps(nil, in, set), device.ErrInvalidValue},
		{"too many dependencies", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: protocol.MaxGraphDeps + 1}, nil, device.ErrInvalidValue},
		{"a dependency twice", protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle, NumDeps: 2}, deps(nil, in, in), device.ErrInvalidValue},
		{"pageable host memory", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyHtoD, Dst: p, Host: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, nil, device.ErrNotSupported},
		{"host memory by segments", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyDtoH, Src: p, Host: protocol.BufRef{Kind: protocol.BufSegments, Len: 4}}, nil, device.ErrNotSupported},
		{"a region past its end", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyHtoD, Dst: p, Host: region(4096, 8192)}, nil, device.ErrInvalidValue},
		{"a foreign region", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyHtoD, Dst: p, Host: protocol.BufRef{Kind: protocol.BufRegion, Region: 0x9999, Len: 16}}, nil, device.ErrInvalidValue},
		{"device memory past its end", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyDtoH, Src: p + 4096, Host: region(0, 8192)}, nil, device.ErrInvalidValue},
		{"device to device, foreign memory", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyDtoD, Dst: p, Src: 0x1234, Size: 16}, nil, device.ErrInvalidValue},
		{"device to device with a host buffer", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: protocol.GraphCopyDtoD, Dst: p, Src: p, Size: 16, Host: region(0, 16)}, nil, device.ErrInvalidValue},
		{"a bad direction", protocol.OpGraphAddMemcpyNode, protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, Dir: 9, Dst: p, Src: p, Size: 16}, nil, device.ErrInvalidValue},
		{"memset, bad element size", protocol.OpGraphAddMemsetNode, protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 3, Width: 4}, nil, device.ErrInvalidValue},
		{"memset past the allocation", protocol.OpGraphAddMemsetNode, protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 4, Width: 4096}, nil, device.ErrInvalidValue},
		{"memset rows overflow", protocol.OpGraphAddMemsetNode, protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 4, Width: 4, Height: 1 << 62, Pitch: 1 << 40}, nil, device.ErrInvalidValue},
		{"kernel, a foreign function", protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: protocol.LaunchReq{Func: 0x9999, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 24}}, params, device.ErrInvalidHandle},
		{"kernel, a short parameter block", protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 8}}, params[:8], device.ErrInvalidValue},
		{"kernel, a stream", protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: protocol.LaunchReq{Func: fn, Stream: strm.Handle, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 24}}, params, device.ErrInvalidValue},
		{"kernel, a zero grid", protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: protocol.LaunchReq{Func: fn, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 24}}, params, device.ErrInvalidValue},
	}
	for _, tc := range tests {
		st, _ := add(tc.op, tc.req, tc.tail)
		wantStatus(t, tc.name, st, tc.want)
	}
	for _, tc := range []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"create, flags", protocol.OpGraphCreate, protocol.Bytes(&protocol.GraphCreateReq{Flags: 1}), device.ErrInvalidValue},
		{"create, a device out of range", protocol.OpGraphCreate, protocol.Bytes(&protocol.GraphCreateReq{Device: 7}), device.ErrInvalidDevice},
		{"nodes of a foreign graph", protocol.OpGraphGetNodes, protocol.Bytes(&protocol.GraphNodesReq{Graph: 0x9999}), device.ErrInvalidHandle},
		{"nodes, bad roots", protocol.OpGraphGetNodes, protocol.Bytes(&protocol.GraphNodesReq{Graph: g.Handle, Roots: 2}), device.ErrInvalidValue},
		{"nodes from past the end", protocol.OpGraphGetNodes, protocol.Bytes(&protocol.GraphNodesReq{Graph: g.Handle, First: 6}), device.ErrInvalidValue},
		{"type of a foreign node", protocol.OpGraphNodeGetType, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidHandle},
	} {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}

	// Unregistering pinned memory a graph uses: the memory stays mapped
	// for the backend, but the graph no longer launches or instantiates.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGuestUnregister, protocol.HandleReq{Handle: reg}, nil)
	st, _, _ = do[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
	wantStatus(t, "launch after the pinned memory was freed", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	wantStatus(t, "instantiate after the pinned memory was freed", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g2.Handle}, nil)
	wantStatus(t, "instantiate the clone after the pinned memory was freed", st, device.ErrInvalidValue)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: g2.Handle}, nil)
	st, _, _ = do[protocol.HandleReq, protocol.Empty](e, protocol.OpGuestUnregister, protocol.HandleReq{Handle: reg}, nil)
	wantStatus(t, "unregister twice", st, device.ErrInvalidHandle)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: g.Handle}, nil)
	st, _, _ = do[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: in}, nil)
	wantStatus(t, "a node of a destroyed graph", st, device.ErrInvalidHandle)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x.Handle}, nil) // the region goes now
	e.ping()
}

// A capture holds copies to and from pinned memory (a region), replayed at
// each launch; a capture's nodes are listed like a built graph's.
func TestCaptureCopiesPinnedMemory(t *testing.T) { testCaptureCopiesPinned(t, opts{}) }

func testCaptureCopiesPinned(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	segs := []protocol.Segment{{GPA: 1 << 32, Len: 4096}}
	reg := e.register(segs)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	s := strm.Handle
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	must[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD, protocol.MemcpyHtoDReq{Dst: p, Stream: s, Flags: protocol.CopyAsync,
		Src: protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Len: 64}}, nil)
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: p, Count: 8, ElemSize: 1, Value: 0x5a, Stream: s, Flags: protocol.CopyAsync}, nil)
	must[protocol.MemcpyDtoHReq, protocol.Empty](e, protocol.OpMemcpyDtoH, protocol.MemcpyDtoHReq{Src: p, Stream: s, Flags: protocol.CopyAsync,
		Dst: protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Offset: 1024, Len: 64}}, nil)
	g, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	ids := nodesOf(e, g.Handle, 0)
	if len(ids) != 3 {
		t.Fatalf("captured %d nodes, want 3", len(ids))
	}
	for i, typ := range []uint32{device.GraphNodeMemcpy, device.GraphNodeMemset, device.GraphNodeMemcpy} {
		r, _ := must[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: ids[i]}, nil)
		if r.Type != typ {
			t.Fatalf("node %d: type %d, want %d", i, r.Type, typ)
		}
	}
	if again := nodesOf(e, g.Handle, 0); !equalIDs(again, ids) {
		t.Fatalf("nodes listed twice: %v then %v", ids, again)
	}
	if roots := nodesOf(e, g.Handle, 1); len(roots) != 1 || roots[0] != ids[0] {
		t.Fatalf("roots %v, want [%d]", roots, ids[0])
	}
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	for i := 0; i < 2; i++ {
		src := e.guestFill(1<<32, 64, byte(3+i))
		e.guestFill(1<<32+1024, 64, 0xee)
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: s}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
		want := append(bytes.Repeat([]byte{0x5a}, 8), src[8:]...)
		if got := e.guestRead(1<<32+1024, 64); !bytes.Equal(got, want) {
			t.Fatalf("launch %d: % x, want % x", i, got, want)
		}
	}
	// Guest memory that is not pinned still cannot be captured, nor a
	// copy outside its region: each invalidates the capture.
	wantCaptureInvalidated(t, e, s, p, "inline bytes in a capture", func() int32 {
		st, _, _ := do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
			protocol.MemcpyHtoDReq{Dst: p, Stream: s, Flags: protocol.CopyAsync, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, []byte{1, 2, 3, 4})
		return st
	}, device.ErrCaptureUnsupported)
	wantCaptureInvalidated(t, e, s, p, "a region past its end in a capture", func() int32 {
		st, _, _ := do[protocol.MemcpyDtoHReq, protocol.Empty](e, protocol.OpMemcpyDtoH, protocol.MemcpyDtoHReq{Src: p, Stream: s, Flags: protocol.CopyAsync,
			Dst: protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Offset: 4000, Len: 200}}, nil)
		return st
	}, device.ErrInvalidValue)
	// The session ends with a capture holding the region, a graph and an
	// executable graph: everything goes.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	must[protocol.MemcpyDtoHReq, protocol.Empty](e, protocol.OpMemcpyDtoH, protocol.MemcpyDtoHReq{Src: p, Stream: s, Flags: protocol.CopyAsync,
		Dst: protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Len: 64}}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGuestUnregister, protocol.HandleReq{Handle: reg}, nil)
	e.ping()
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
