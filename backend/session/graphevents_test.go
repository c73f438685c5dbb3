package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Event record and wait nodes: their events read back and set, recorded at
// each launch, and kept for the graph when the program destroys them.
func TestGraphEventNodes(t *testing.T) { testGraphEventNodes(t, opts{}) }

func testGraphEventNodes(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	event := func() uint64 {
		r, _ := must[protocol.EventCreateReq, protocol.HandleReply](e, protocol.OpEventCreate, protocol.EventCreateReq{}, nil)
		return r.Handle
	}
	ev1, ev2 := event(), event()
	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	m, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode,
		protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 1, Value: 7, Width: 64, Height: 1}, nil)
	rec, _ := must[protocol.GraphAddEventNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEventNode, protocol.GraphAddEventNodeReq{Graph: g.Handle, NumDeps: 1, Event: ev1}, deps(nil, m.Handle))
	wait, _ := must[protocol.GraphAddEventNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEventNode, protocol.GraphAddEventNodeReq{Graph: g.Handle, Wait: 1, Event: ev2}, nil)
	for h, typ := range map[uint64]uint32{rec.Handle: device.GraphNodeEventRecord, wait.Handle: device.GraphNodeWaitEvent} {
		r, _ := must[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: h}, nil)
		if r.Type != typ {
			t.Fatalf("node %d: type %d, want %d", h, r.Type, typ)
		}
	}
	getEvent := func(n uint64, w uint32) uint64 {
		t.Helper()
		r, _ := must[protocol.GraphEventNodeReq, protocol.HandleReply](e, protocol.OpGraphEventNodeGetEvent, protocol.GraphEventNodeReq{Node: n, Wait: w}, nil)
		return r.Handle
	}
	setEvent := func(exec, n, ev uint64, w uint32) int32 {
		st, _, _ := do[protocol.GraphEventNodeReq, protocol.Empty](e, protocol.OpGraphEventNodeSetEvent, protocol.GraphEventNodeReq{Node: n, Exec: exec, Event: ev, Wait: w}, nil)
		return st
	}
	if got := getEvent(rec.Handle, 0); got != ev1 {
		t.Fatalf("record node's event %#x, want %#x", got, ev1)
	}
	if got := getEvent(wait.Handle, 1); got != ev2 {
		t.Fatalf("wait node's event %#x, want %#x", got, ev2)
	}
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	launch := func(exec uint64) {
		t.Helper()
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: exec, Stream: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
	}
	launch(x.Handle)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpEventQuery, protocol.HandleReq{Handle: ev1}, nil)

	// Set on the graph (its later instantiations) and on the executable
	// graph's copy.
	wantStatus(t, "set the record node's event", setEvent(0, rec.Handle, ev2, 0), 0)
	if got := getEvent(rec.Handle, 0); got != ev2 {
		t.Fatalf("record node's event after set %#x, want %#x", got, ev2)
	}
	wantStatus(t, "set the wait node's event in the executable graph", setEvent(x.Handle, wait.Handle, ev1, 1), 0)
	if got := getEvent(wait.Handle, 1); got != ev2 {
		t.Fatalf("setting the executable graph's copy changed the graph's node: %#x", got)
	}
	// The program destroys ev1, which the executable graph records and
	// waits for: its launches still run.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpEventDestroy, protocol.HandleReq{Handle: ev1}, nil)
	launch(x.Handle)
	st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpEventQuery, protocol.HandleReq{Handle: ev1}, nil)
	wantStatus(t, "the destroyed event is not the program's", st, device.ErrInvalidHandle)

	other, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	ox, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: other.Handle}, nil)
	for _, tc := range []struct {
		name string
		st   int32
		want device.Result
	}{
		{"set a destroyed event", setEvent(0, rec.Handle, ev1, 0), device.ErrInvalidHandle},
		{"set a foreign event", setEvent(0, rec.Handle, 0x9999, 0), device.ErrInvalidHandle},
		{"set a record node's event as a wait node's", setEvent(0, rec.Handle, ev2, 1), device.ErrInvalidValue},
		{"set on a memset node", setEvent(0, m.Handle, ev2, 0), device.ErrInvalidValue},
		{"set in an executable graph of another graph", setEvent(ox.Handle, rec.Handle, ev2, 0), device.ErrInvalidValue},
		{"set, wait 2", setEvent(0, rec.Handle, ev2, 2), device.ErrInvalidValue},
	} {
		wantStatus(t, tc.name, tc.st, tc.want)
	}
	st, _, _ = do[protocol.GraphEventNodeReq, protocol.HandleReply](e, protocol.OpGraphEventNodeGetEvent, protocol.GraphEventNodeReq{Node: rec.Handle, Exec: x.Handle}, nil)
	wantStatus(t, "get names an executable graph", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphEventNodeReq, protocol.HandleReply](e, protocol.OpGraphEventNodeGetEvent, protocol.GraphEventNodeReq{Node: 0x9999}, nil)
	wantStatus(t, "get, a foreign node", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphAddEventNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEventNode, protocol.GraphAddEventNodeReq{Graph: g.Handle, Event: 0x9999}, nil)
	wantStatus(t, "add, a foreign event", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphAddEventNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEventNode, protocol.GraphAddEventNodeReq{Graph: g.Handle, Event: ev2, Wait: 3}, nil)
	wantStatus(t, "add, wait 3", st, device.ErrInvalidValue)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: g.Handle}, nil)
}

// Child graph nodes: a copy of the child, its graph handed out as the
// node's (not to be destroyed alone), set anew in an executable graph;
// what the child copies the parent holds.
func TestGraphChildNodes(t *testing.T) { testGraphChildNodes(t, opts{}) }

func testGraphChildNodes(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	segs := []protocol.Segment{{GPA: 1 << 32, Len: 4096}}
	reg := e.register(segs)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	newGraph := func() uint64 {
		r, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
		return r.Handle
	}
	memset := func(g uint64, v uint32) uint64 {
		r, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode,
			protocol.GraphAddMemsetNodeReq{Graph: g, Dst: p, ElemSize: 1, Value: v, Width: 64, Height: 1}, nil)
		return r.Handle
	}
	addChild := func(g, child uint64) (int32, uint64) {
		st, r, _ := do[protocol.GraphAddChildNodeReq, protocol.HandleReply](e, protocol.OpGraphAddChildNode, protocol.GraphAddChildNodeReq{Graph: g, Child: child}, nil)
		return st, r.Handle
	}
	launch := func(exec uint64) byte {
		t.Helper()
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: exec, Stream: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
		st, b := e.dtoh(p, 64)
		wantStatus(t, "read back", st, 0)
		if !bytes.Equal(b, bytes.Repeat(b[:1], 64)) {
			t.Fatalf("memsets left % x", b[:8])
		}
		return b[0]
	}
	child := newGraph()
	cm := memset(child, 9)
	parent := newGraph()
	st, k := addChild(parent, child)
	wantStatus(t, "add a child graph node", st, 0)
	if r, _ := must[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: k}, nil); r.Type != device.GraphNodeGraph {
		t.Fatalf("child graph node of type %d", r.Type)
	}
	cg, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphChildNodeGetGraph, protocol.HandleReq{Handle: k}, nil)
	if again, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphChildNodeGetGraph, protocol.HandleReq{Handle: k}, nil); again != cg || cg.Handle == child {
		t.Fatalf("the node's graph %#x, then %#x (the child: %#x)", cg.Handle, again.Handle, child)
	}
	inner := nodesOf(e, cg.Handle, 0)
	if len(inner) != 1 || inner[0] == cm {
		t.Fatalf("the node's graph has nodes %v (the child's: %d)", inner, cm)
	}
	st, _, _ = do[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: cg.Handle}, nil)
	wantStatus(t, "destroy the node's graph alone", st, device.ErrInvalidValue)

	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: parent}, nil)
	if v := launch(x.Handle); v != 9 {
		t.Fatalf("launch: %d, want the child's 9", v)
	}
	// The node holds a copy: the child changed afterwards leaves it.
	must[protocol.GraphMemsetNodeSetReq, protocol.Empty](e, protocol.OpGraphMemsetNodeSetParams, protocol.GraphMemsetNodeSetReq{Node: cm,
		Params: protocol.GraphMemsetParams{Dst: p, ElemSize: 1, Value: 10, Width: 64, Height: 1}}, nil)
	if v := launch(x.Handle); v != 9 {
		t.Fatalf("after the child changed: %d, want the copy's 9", v)
	}
	must[protocol.GraphExecChildSetReq, protocol.Empty](e, protocol.OpGraphExecChildNodeSetParams, protocol.GraphExecChildSetReq{Exec: x.Handle, Node: k, Child: child}, nil)
	if v := launch(x.Handle); v != 10 {
		t.Fatalf("after the executable graph's child was set: %d, want 10", v)
	}
	two := newGraph()
	memset(two, 1)
	memset(two, 2)
	st, _, _ = do[protocol.GraphExecChildSetReq, protocol.Empty](e, protocol.OpGraphExecChildNodeSetParams, protocol.GraphExecChildSetReq{Exec: x.Handle, Node: k, Child: two}, nil)
	wantStatus(t, "a child of another shape", st, device.ErrGraphUpdateFailed) // the H100's driver 580 answers so
	st, _, _ = do[protocol.GraphExecChildSetReq, protocol.Empty](e, protocol.OpGraphExecChildNodeSetParams, protocol.GraphExecChildSetReq{Exec: x.Handle, Node: k, Child: 0x9999}, nil)
	wantStatus(t, "a foreign child", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphExecChildSetReq, protocol.Empty](e, protocol.OpGraphExecChildNodeSetParams, protocol.GraphExecChildSetReq{Exec: 0x9999, Node: k, Child: child}, nil)
	wantStatus(t, "a foreign executable graph", st, device.ErrInvalidHandle)
	st, _ = addChild(parent, 0x9999)
	wantStatus(t, "add a foreign child", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.HandleReq, protocol.HandleReply](e, protocol.OpGraphChildNodeGetGraph, protocol.HandleReq{Handle: cm}, nil)
	wantStatus(t, "the graph of a memset node", st, device.ErrInvalidValue)

	// A copy to pinned memory in the node's graph: the parent holds the
	// region, and is refused once the program frees it.
	must[protocol.GraphAddMemcpyNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemcpyNode,
		protocol.GraphAddMemcpyNodeReq{Graph: cg.Handle, NumDeps: 1, Dir: protocol.GraphCopyDtoH, Src: p,
			Host: protocol.BufRef{Kind: protocol.BufRegion, Region: reg, Len: 64}}, deps(nil, inner[0]))
	x2, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: parent}, nil)
	e.guestFill(1<<32, 64, 0xee)
	launch(x2.Handle)
	if got := e.guestRead(1<<32, 64); !bytes.Equal(got, bytes.Repeat([]byte{9}, 64)) {
		t.Fatalf("the node's graph copied % x to pinned memory, want 09...", got[:8])
	}
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGuestUnregister, protocol.HandleReq{Handle: reg}, nil)
	st, _, _ = do[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: parent}, nil)
	wantStatus(t, "instantiate a parent whose child copies freed memory", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x2.Handle, Stream: strm.Handle}, nil)
	wantStatus(t, "launch it", st, device.ErrInvalidValue)

	// The node's graph goes with the node.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroyNode, protocol.HandleReq{Handle: k}, nil)
	st, _, _ = do[protocol.GraphNodesReq, protocol.GraphNodesReply](e, protocol.OpGraphGetNodes, protocol.GraphNodesReq{Graph: cg.Handle}, nil)
	wantStatus(t, "the graph of a destroyed node", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.HandleReq, protocol.GraphNodeTypeReply](e, protocol.OpGraphNodeGetType, protocol.HandleReq{Handle: inner[0]}, nil)
	wantStatus(t, "a node of it", st, device.ErrInvalidHandle)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x2.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: parent}, nil)
}

// An event a graph uses (an event node's, or a captured external wait's)
// outlives the program's cuEventDestroy on the device until the last graph
// using it goes; an event no graph uses goes at once.
func TestGraphEventsHeld(t *testing.T) {
	spy := newSpy(t)
	e := start(t, opts{drv: spy})
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	event := func() uint64 {
		r, _ := must[protocol.EventCreateReq, protocol.HandleReply](e, protocol.OpEventCreate, protocol.EventCreateReq{}, nil)
		return r.Handle
	}
	destroy := func(op protocol.Opcode, h uint64) {
		t.Helper()
		must[protocol.HandleReq, protocol.Empty](e, op, protocol.HandleReq{Handle: h}, nil)
	}
	gone := func(want int64) {
		t.Helper()
		e.ping()
		if got := spy.eventsGone.Load(); got != want {
			t.Fatalf("%d events destroyed on the device, want %d", got, want)
		}
	}
	free, built, captured := event(), event(), event()
	destroy(protocol.OpEventDestroy, free)
	gone(1)

	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	must[protocol.GraphAddEventNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEventNode, protocol.GraphAddEventNodeReq{Graph: g.Handle, Event: built}, nil)
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	destroy(protocol.OpEventDestroy, built)
	gone(1)
	destroy(protocol.OpGraphDestroy, g.Handle)
	gone(1) // the executable graph still records it
	must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
	destroy(protocol.OpGraphExecDestroy, x.Handle)
	gone(2)

	// A wait captured with CU_EVENT_WAIT_EXTERNAL is a wait node.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: strm.Handle}, nil)
	must[protocol.StreamWaitEventReq, protocol.Empty](e, protocol.OpStreamWaitEvent, protocol.StreamWaitEventReq{Stream: strm.Handle, Event: captured, Flags: 1}, nil)
	cg, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: strm.Handle}, nil)
	ids := nodesOf(e, cg.Handle, 0)
	if len(ids) != 1 {
		t.Fatalf("captured %d nodes, want a wait node", len(ids))
	}
	if r, _ := must[protocol.GraphEventNodeReq, protocol.HandleReply](e, protocol.OpGraphEventNodeGetEvent, protocol.GraphEventNodeReq{Node: ids[0], Wait: 1}, nil); r.Handle != captured {
		t.Fatalf("the captured wait node waits for %#x, want %#x", r.Handle, captured)
	}
	destroy(protocol.OpEventDestroy, captured)
	gone(2)
	destroy(protocol.OpGraphDestroy, cg.Handle)
	gone(3)
}
