package session_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Node parameters: read back as given, set on a graph's node (its later
// instantiations see them, earlier ones do not) or on the node's copy in
// an executable graph (only that one changes); checked as when added.
func TestGraphNodeParams(t *testing.T) { testGraphNodeParams(t, opts{}) }

func testGraphNodeParams(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	segs := []protocol.Segment{{GPA: 1 << 32, Len: 4096}}
	reg := e.register(segs)
	region := func(off, n uint64) protocol.BufRef {
		return protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Offset: off, Len: n}
	}
	p := e.alloc(4096)
	fn := e.saxpy()
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	s := strm.Handle
	sync := func() {
		t.Helper()
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
	}
	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)

	// A kernel node: its launch read back, then changed.
	params := make([]byte, 24) // saxpy(n 0, a, x, y): runs no thread's work
	binary.LittleEndian.PutUint64(params[8:], p)
	binary.LittleEndian.PutUint64(params[16:], p)
	launch := protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 24}
	kn, _ := must[protocol.GraphAddKernelNodeReq, protocol.HandleReply](e, protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: launch}, params)
	getKernel := func(node uint64) (protocol.LaunchReq, []byte) {
		t.Helper()
		return must[protocol.HandleReq, protocol.LaunchReq](e, protocol.OpGraphKernelNodeGetParams, protocol.HandleReq{Handle: node}, nil)
	}
	if l, b := getKernel(kn.Handle); l != launch || !bytes.Equal(b, params) {
		t.Fatalf("kernel node: %+v % x, want %+v % x", l, b, launch, params)
	}
	set := launch
	set.GridX, set.BlockX, set.SharedMem = 4, 64, 128
	params2 := bytes.Clone(params)
	binary.LittleEndian.PutUint32(params2[4:], 0x40000000) // a = 2.0
	must[protocol.GraphKernelNodeSetReq, protocol.Empty](e, protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Launch: set}, params2)
	if l, b := getKernel(kn.Handle); l != set || !bytes.Equal(b, params2) {
		t.Fatalf("kernel node after set: %+v % x, want %+v % x", l, b, set, params2)
	}

	// A memset node: an executable graph keeps what it was instantiated
	// with; setting its copy changes it alone.
	ms := protocol.GraphAddMemsetNodeReq{Graph: g.Handle, NumDeps: 1, Dst: p, ElemSize: 1, Value: 0x11, Width: 64, Height: 1}
	mn, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode, ms, deps(nil, kn.Handle))
	getMemset := func(node uint64) protocol.GraphMemsetParams {
		t.Helper()
		r, _ := must[protocol.HandleReq, protocol.GraphMemsetParams](e, protocol.OpGraphMemsetNodeGetParams, protocol.HandleReq{Handle: node}, nil)
		return r
	}
	if r := getMemset(mn.Handle); r.Dst != p || r.Value != 0x11 || r.ElemSize != 1 || r.Width != 64 || r.Height != 1 {
		t.Fatalf("memset node: %+v", r)
	}
	// A copy of the first 64 bytes out to the region, after the memset.
	cn, _ := must[protocol.GraphAddMemcpyNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemcpyNode,
		protocol.GraphAddMemcpyNodeReq{Graph: g.Handle, NumDeps: 1, Dir: protocol.GraphCopyDtoH, Src: p, Host: region(0, 64)}, deps(nil, mn.Handle))
	getCopy := func(node uint64) protocol.GraphMemcpyParams {
		t.Helper()
		r, _ := must[protocol.HandleReq, protocol.GraphMemcpyParams](e, protocol.OpGraphMemcpyNodeGetParams, protocol.HandleReq{Handle: node}, nil)
		return r
	}
	if r := getCopy(cn.Handle); r.Dir != protocol.GraphCopyDtoH || r.Src != p || r.Host != region(0, 64) {
		t.Fatalf("memcpy node: %+v", r)
	}
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	run := func(exec uint64, off uint64) []byte {
		t.Helper()
		e.guestFill(1<<32, 4096, 0xee)
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: exec, Stream: s}, nil)
		sync()
		return e.guestRead(1<<32+off, 64)
	}
	fill := func(v byte) []byte { return bytes.Repeat([]byte{v}, 64) }
	setMemset := func(exec uint64, v uint32) {
		t.Helper()
		must[protocol.GraphMemsetNodeSetReq, protocol.Empty](e, protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Exec: exec,
			Params: protocol.GraphMemsetParams{Dst: p, ElemSize: 1, Value: v, Width: 64, Height: 1}}, nil)
	}
	if got := run(x.Handle, 0); !bytes.Equal(got, fill(0x11)) {
		t.Fatalf("first launch: % x", got[:8])
	}
	setMemset(0, 0x22) // the graph's node
	if r := getMemset(mn.Handle); r.Value != 0x22 {
		t.Fatalf("memset node after set: %+v", r)
	}
	if got := run(x.Handle, 0); !bytes.Equal(got, fill(0x11)) {
		t.Fatalf("the executable graph took the graph's new memset: % x", got[:8])
	}
	setMemset(x.Handle, 0x33) // the executable graph's copy
	if got := run(x.Handle, 0); !bytes.Equal(got, fill(0x33)) {
		t.Fatalf("after the executable graph's memset was set: % x", got[:8])
	}
	if r := getMemset(mn.Handle); r.Value != 0x22 {
		t.Fatalf("setting the executable graph's copy changed the graph's node: %+v", r)
	}
	x2, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	if got := run(x2.Handle, 0); !bytes.Equal(got, fill(0x22)) {
		t.Fatalf("a new instantiation: % x, want the graph's 0x22", got[:8])
	}
	// The copy moved to another place of the region, in the executable
	// graph and then in the graph.
	must[protocol.GraphMemcpyNodeSetReq, protocol.Empty](e, protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Exec: x.Handle,
		Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p, Host: region(1024, 64)}}, nil)
	if got := run(x.Handle, 1024); !bytes.Equal(got, fill(0x33)) {
		t.Fatalf("after the executable graph's copy moved: % x", got[:8])
	}
	if r := getCopy(cn.Handle); r.Host != region(0, 64) {
		t.Fatalf("setting the executable graph's copy changed the graph's node: %+v", r)
	}
	must[protocol.GraphMemcpyNodeSetReq, protocol.Empty](e, protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle,
		Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p + 64, Host: region(2048, 32)}}, nil)
	if r := getCopy(cn.Handle); r.Src != p+64 || r.Host != region(2048, 32) {
		t.Fatalf("memcpy node after set: %+v", r)
	}
	must[protocol.GraphKernelNodeSetReq, protocol.Empty](e, protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Exec: x.Handle, Launch: launch}, params)
	if l, _ := getKernel(kn.Handle); l != set {
		t.Fatalf("setting the executable graph's kernel changed the graph's node: %+v", l)
	}

	// A captured launch's node reads like an added one.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	cl := launch
	cl.Stream = s
	must[protocol.LaunchReq, protocol.Empty](e, protocol.OpLaunchKernel, cl, params2)
	cg, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	ids := nodesOf(e, cg.Handle, 0)
	if len(ids) != 1 {
		t.Fatalf("captured %d nodes", len(ids))
	}
	if l, b := getKernel(ids[0]); l != launch || !bytes.Equal(b, params2) {
		t.Fatalf("captured kernel node: %+v % x, want %+v % x", l, b, launch, params2)
	}

	other, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	ox, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: other.Handle}, nil)
	memset := protocol.GraphMemsetParams{Dst: p, ElemSize: 1, Value: 1, Width: 64, Height: 1}
	copyOut := protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p, Host: region(0, 64)}
	tests := []struct {
		name string
		op   protocol.Opcode
		req  any
		tail []byte
		want device.Result
	}{
		{"get, a foreign node", protocol.OpGraphKernelNodeGetParams, protocol.HandleReq{Handle: 0x9999}, nil, device.ErrInvalidHandle},
		{"get a kernel's of a memset node", protocol.OpGraphKernelNodeGetParams, protocol.HandleReq{Handle: mn.Handle}, nil, device.ErrInvalidValue},
		{"get a memset's of a kernel node", protocol.OpGraphMemsetNodeGetParams, protocol.HandleReq{Handle: kn.Handle}, nil, device.ErrInvalidValue},
		{"get a copy's of a memset node", protocol.OpGraphMemcpyNodeGetParams, protocol.HandleReq{Handle: mn.Handle}, nil, device.ErrInvalidValue},
		{"set, a foreign node", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: 0x9999, Launch: launch}, params, device.ErrInvalidHandle},
		{"set, a foreign executable graph", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Exec: 0x9999, Launch: launch}, params, device.ErrInvalidHandle},
		{"set, an executable graph of another graph", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Exec: ox.Handle, Launch: launch}, params, device.ErrInvalidValue},
		{"set, a foreign function", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Launch: protocol.LaunchReq{Func: 0x9999, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 24}}, params, device.ErrInvalidHandle},
		{"set, a short parameter block", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Launch: protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 8}}, params[:8], device.ErrInvalidValue},
		{"set, a block longer than declared", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Launch: launch}, append(bytes.Clone(params), 0, 0, 0, 0), device.ErrInvalidValue},
		{"set, a zero grid", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: kn.Handle, Launch: protocol.LaunchReq{Func: fn, BlockX: 1, BlockY: 1, BlockZ: 1, ParamSize: 24}}, params, device.ErrInvalidValue},
		{"set a kernel's on a memset node", protocol.OpGraphKernelNodeSetParams, protocol.GraphKernelNodeSetReq{Node: mn.Handle, Launch: launch}, params, device.ErrInvalidValue},
		{"memset, bad element size", protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Params: protocol.GraphMemsetParams{Dst: p, ElemSize: 3, Width: 4}}, nil, device.ErrInvalidValue},
		{"memset past the allocation", protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Params: protocol.GraphMemsetParams{Dst: p, ElemSize: 4, Width: 4096}}, nil, device.ErrInvalidValue},
		{"memset, foreign memory", protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Params: protocol.GraphMemsetParams{Dst: 0x1234, ElemSize: 1, Width: 4}}, nil, device.ErrInvalidValue},
		{"memset on a kernel node", protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: kn.Handle, Params: memset}, nil, device.ErrInvalidValue},
		{"memset, an executable graph of another graph", protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Exec: ox.Handle, Params: memset}, nil, device.ErrInvalidValue},
		{"copy, pageable memory", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p, Host: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}}, nil, device.ErrNotSupported},
		{"copy, a region past its end", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p, Host: region(4000, 200)}}, nil, device.ErrInvalidValue},
		{"copy, a foreign region", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p, Host: protocol.BufRef{Kind: protocol.BufRegion, Region: 0x9999, Len: 16}}}, nil, device.ErrInvalidValue},
		{"copy, device memory past its end", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Params: protocol.GraphMemcpyParams{Dir: protocol.GraphCopyDtoH, Src: p + 4090, Host: region(0, 64)}}, nil, device.ErrInvalidValue},
		{"copy, a bad direction", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Params: protocol.GraphMemcpyParams{Dir: 9, Dst: p, Src: p, Size: 16}}, nil, device.ErrInvalidValue},
		{"copy on a memset node", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: mn.Handle, Params: copyOut}, nil, device.ErrInvalidValue},
		{"copy, an executable graph of another graph", protocol.OpGraphMemcpyNodeSetParams, protocol.GraphMemcpyNodeSetReq{Node: cn.Handle, Exec: ox.Handle, Params: copyOut}, nil, device.ErrInvalidValue},
	}
	for _, tc := range tests {
		var st int32
		switch r := tc.req.(type) {
		case protocol.HandleReq:
			f, err := e.c.Call(tc.op, 0, protocol.Bytes(&r), nil)
			if err != nil {
				t.Fatal(err)
			}
			st = f.Status
		case protocol.GraphKernelNodeSetReq:
			st, _, _ = do[protocol.GraphKernelNodeSetReq, protocol.Empty](e, tc.op, r, tc.tail)
		case protocol.GraphMemsetNodeSetReq:
			st, _, _ = do[protocol.GraphMemsetNodeSetReq, protocol.Empty](e, tc.op, r, tc.tail)
		case protocol.GraphMemcpyNodeSetReq:
			st, _, _ = do[protocol.GraphMemcpyNodeSetReq, protocol.Empty](e, tc.op, r, tc.tail)
		}
		wantStatus(t, tc.name, st, tc.want)
	}
	// A destroyed graph's nodes are no longer the session's.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: g.Handle}, nil)
	st, _, _ := do[protocol.GraphMemsetNodeSetReq, protocol.Empty](e, protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: mn.Handle, Exec: x.Handle, Params: memset}, nil)
	wantStatus(t, "a node of a destroyed graph", st, device.ErrInvalidHandle)
	if got := run(x.Handle, 1024); !bytes.Equal(got, fill(0x33)) {
		t.Fatalf("the executable graph after its graph went: % x", got[:8])
	}
}

// Kernel node attributes: set, read back, copied to another kernel node;
// a stream-only attribute, one not served and a bad value are refused.
func TestGraphKernelNodeAttributes(t *testing.T) { testGraphKernelNodeAttributes(t, opts{}) }

func testGraphKernelNodeAttributes(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	p := e.alloc(4096)
	fn := e.saxpy()
	params := make([]byte, 24)
	binary.LittleEndian.PutUint64(params[8:], p)
	binary.LittleEndian.PutUint64(params[16:], p)
	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	launch := protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 24}
	kernel := func() uint64 {
		r, _ := must[protocol.GraphAddKernelNodeReq, protocol.HandleReply](e, protocol.OpGraphAddKernelNode, protocol.GraphAddKernelNodeReq{Graph: g.Handle, Launch: launch}, params)
		return r.Handle
	}
	a, b := kernel(), kernel()
	get := func(n uint64, attr uint32) protocol.StreamAttrValue {
		t.Helper()
		r, _ := must[protocol.GraphKernelNodeAttrReq, protocol.StreamAttrValue](e, protocol.OpGraphKernelNodeGetAttribute, protocol.GraphKernelNodeAttrReq{Node: n, Attr: attr}, nil)
		return r
	}
	set := func(n uint64, attr uint32, v protocol.StreamAttrValue) int32 {
		st, _, _ := do[protocol.GraphKernelNodeAttrReq, protocol.Empty](e, protocol.OpGraphKernelNodeSetAttribute, protocol.GraphKernelNodeAttrReq{Node: n, Attr: attr, Value: v}, nil)
		return st
	}
	wantStatus(t, "set priority", set(a, device.StreamAttrPriority, protocol.StreamAttrValue{Value: uint32(0xffffffff)}), 0) // -1
	wantStatus(t, "set cooperative", set(a, device.KernelNodeAttrCooperative, protocol.StreamAttrValue{Value: 1}), 0)
	win := protocol.AccessPolicyWindow{Base: p, Bytes: 4096, HitRatio: 0x3f000000, HitProp: 2, MissProp: 1} // hit ratio 0.5
	wantStatus(t, "set an access policy window", set(a, device.StreamAttrAccessPolicyWindow, protocol.StreamAttrValue{Window: win}), 0)
	if v := get(a, device.StreamAttrPriority); int32(v.Value) != -1 {
		t.Fatalf("priority %d, want -1", int32(v.Value))
	}
	if v := get(a, device.KernelNodeAttrCooperative); v.Value != 1 {
		t.Fatalf("cooperative %d, want 1", v.Value)
	}
	if v := get(a, device.StreamAttrAccessPolicyWindow); v.Window != win {
		t.Fatalf("window %+v, want %+v", v.Window, win)
	}
	if v := get(b, device.KernelNodeAttrCooperative); v.Value != 0 {
		t.Fatalf("another node's cooperative %d, want 0", v.Value)
	}
	must[protocol.GraphNodePairReq, protocol.Empty](e, protocol.OpGraphKernelNodeCopyAttributes, protocol.GraphNodePairReq{Dst: b, Src: a}, nil)
	if v := get(b, device.KernelNodeAttrCooperative); v.Value != 1 {
		t.Fatalf("copied cooperative %d, want 1", v.Value)
	}
	if v := get(b, device.StreamAttrPriority); int32(v.Value) != -1 {
		t.Fatalf("copied priority %d, want -1", int32(v.Value))
	}
	m, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode,
		protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 1, Value: 1, Width: 64, Height: 1}, nil)
	for _, tc := range []struct {
		name string
		st   int32
		want device.Result
	}{
		{"the synchronization policy (a stream's)", set(a, device.StreamAttrSyncPolicy, protocol.StreamAttrValue{Value: 1}), device.ErrInvalidValue},
		{"cluster dimension (not served)", set(a, 4, protocol.StreamAttrValue{Value: 2}), device.ErrNotSupported},
		{"an attribute cuda.h has not", set(a, 0x7fffffff, protocol.StreamAttrValue{}), device.ErrInvalidValue},
		{"cooperative 2", set(a, device.KernelNodeAttrCooperative, protocol.StreamAttrValue{Value: 2}), device.ErrInvalidValue},
		{"a window of foreign memory", set(a, device.StreamAttrAccessPolicyWindow, protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: 0x1000, Bytes: 4096}}), device.ErrInvalidValue},
		{"a window with bytes beside it", set(a, device.StreamAttrAccessPolicyWindow, protocol.StreamAttrValue{Value: 1, Window: win}), device.ErrInvalidValue},
		{"a priority with a window", set(a, device.StreamAttrPriority, protocol.StreamAttrValue{Window: win}), device.ErrInvalidValue},
		{"a memset node", set(m.Handle, device.StreamAttrPriority, protocol.StreamAttrValue{}), device.ErrInvalidValue},
		{"a foreign node", set(0x9999, device.StreamAttrPriority, protocol.StreamAttrValue{}), device.ErrInvalidHandle},
	} {
		wantStatus(t, tc.name, tc.st, tc.want)
	}
	st, _, _ := do[protocol.GraphKernelNodeAttrReq, protocol.StreamAttrValue](e, protocol.OpGraphKernelNodeGetAttribute, protocol.GraphKernelNodeAttrReq{Node: a, Attr: 3}, nil)
	wantStatus(t, "get the synchronization policy", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphKernelNodeAttrReq, protocol.StreamAttrValue](e, protocol.OpGraphKernelNodeGetAttribute, protocol.GraphKernelNodeAttrReq{Node: a, Attr: 8, Value: protocol.StreamAttrValue{Value: 1}}, nil)
	wantStatus(t, "a get with a value", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphNodePairReq, protocol.Empty](e, protocol.OpGraphKernelNodeCopyAttributes, protocol.GraphNodePairReq{Dst: m.Handle, Src: a}, nil)
	wantStatus(t, "copy to a memset node", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphNodePairReq, protocol.Empty](e, protocol.OpGraphKernelNodeCopyAttributes, protocol.GraphNodePairReq{Dst: a, Src: 0x9999}, nil)
	wantStatus(t, "copy from a foreign node", st, device.ErrInvalidHandle)
}

// A node of an executable graph switched off is skipped by its launches
// until switched on again; a clone's copy of a node is found.
func TestGraphNodeEnabledAndClone(t *testing.T) { testGraphNodeEnabledAndClone(t, opts{}) }

func testGraphNodeEnabledAndClone(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	memset := func(v uint32, dep ...uint64) uint64 {
		r, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode,
			protocol.GraphAddMemsetNodeReq{Graph: g.Handle, NumDeps: uint32(len(dep)), Dst: p, ElemSize: 1, Value: v, Width: 64, Height: 1}, deps(nil, dep...))
		return r.Handle
	}
	a := memset(1)
	b := memset(2, a)
	empty, _ := must[protocol.GraphAddEmptyNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle}, nil)
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	launch := func() byte {
		t.Helper()
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
		st, got := e.dtoh(p, 64)
		wantStatus(t, "read back", st, 0)
		return got[0]
	}
	enabled := func(n uint64) uint32 {
		t.Helper()
		r, _ := must[protocol.GraphNodeEnabledReq, protocol.GraphNodeEnabledReply](e, protocol.OpGraphNodeGetEnabled, protocol.GraphNodeEnabledReq{Exec: x.Handle, Node: n}, nil)
		return r.Enabled
	}
	setEnabled := func(n uint64, on uint32) int32 {
		st, _, _ := do[protocol.GraphNodeEnabledReq, protocol.Empty](e, protocol.OpGraphNodeSetEnabled, protocol.GraphNodeEnabledReq{Exec: x.Handle, Node: n, Enabled: on}, nil)
		return st
	}
	if v := launch(); v != 2 || enabled(b) != 1 {
		t.Fatalf("launch: %d (want 2), b enabled %d", v, enabled(b))
	}
	wantStatus(t, "switch b off", setEnabled(b, 0), 0)
	if v := launch(); v != 1 || enabled(b) != 0 {
		t.Fatalf("b off: %d (want 1), b enabled %d", v, enabled(b))
	}
	wantStatus(t, "switch b on", setEnabled(b, 1), 0)
	if v := launch(); v != 2 {
		t.Fatalf("b on again: %d, want 2", v)
	}
	wantStatus(t, "an empty node", setEnabled(empty.Handle, 0), device.ErrInvalidValue)
	wantStatus(t, "enabled 2", setEnabled(b, 2), device.ErrInvalidValue)
	wantStatus(t, "a foreign node", setEnabled(0x9999, 0), device.ErrInvalidHandle)
	st, _, _ := do[protocol.GraphNodeEnabledReq, protocol.Empty](e, protocol.OpGraphNodeSetEnabled, protocol.GraphNodeEnabledReq{Node: b, Enabled: 1}, nil)
	wantStatus(t, "no executable graph", st, device.ErrInvalidHandle)

	// The clone's copy of a.
	g2, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphClone, protocol.HandleReq{Handle: g.Handle}, nil)
	f, _ := must[protocol.GraphNodeFindReq, protocol.HandleReply](e, protocol.OpGraphNodeFindInClone, protocol.GraphNodeFindReq{Node: a, Clone: g2.Handle}, nil)
	if ids := nodesOf(e, g2.Handle, 1); len(ids) != 2 || (f.Handle != ids[0] && f.Handle != ids[1]) || f.Handle == a {
		t.Fatalf("a's copy %#x, the clone's roots %v", f.Handle, ids)
	}
	if r, _ := must[protocol.HandleReq, protocol.GraphMemsetParams](e, protocol.OpGraphMemsetNodeGetParams, protocol.HandleReq{Handle: f.Handle}, nil); r.Value != 1 {
		t.Fatalf("a's copy sets %d, want 1", r.Value)
	}
	other, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	st, _, _ = do[protocol.GraphNodeFindReq, protocol.HandleReply](e, protocol.OpGraphNodeFindInClone, protocol.GraphNodeFindReq{Node: a, Clone: other.Handle}, nil)
	wantStatus(t, "a graph that is no clone", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphNodeFindReq, protocol.HandleReply](e, protocol.OpGraphNodeFindInClone, protocol.GraphNodeFindReq{Node: a, Clone: 0x9999}, nil)
	wantStatus(t, "a foreign clone", st, device.ErrInvalidHandle)
}
