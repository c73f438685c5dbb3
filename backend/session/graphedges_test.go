package session_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// pairs is a GRAPH_*_DEPENDENCIES tail: (from, to) node handles.
func pairs(ids ...uint64) []byte {
	var b []byte
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return b
}

// Edges added and removed after the nodes, listed from the graph and from
// each node, and obeyed at launch; an executable graph's flags.
func TestGraphEdges(t *testing.T) { testGraphEdges(t, opts{}) }

func testGraphEdges(t *testing.T, o opts) {
	o.mem, o.allowAll = true, true
	e := start(t, o)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	g, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	memset := func(v uint32) uint64 {
		t.Helper()
		r, _ := must[protocol.GraphAddMemsetNodeReq, protocol.HandleReply](e, protocol.OpGraphAddMemsetNode,
			protocol.GraphAddMemsetNodeReq{Graph: g.Handle, Dst: p, ElemSize: 1, Value: v, Width: 64, Height: 1}, nil)
		return r.Handle
	}
	x, y := memset(1), memset(2) // the same bytes: the edge decides what is left
	zr, _ := must[protocol.GraphAddEmptyNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: g.Handle}, nil)
	z := zr.Handle
	edges := func(op protocol.Opcode, tail []byte) int32 {
		st, _, _ := do[protocol.GraphEdgesReq, protocol.Empty](e, op, protocol.GraphEdgesReq{Graph: g.Handle, Count: uint32(len(tail) / 16)}, tail)
		return st
	}
	list := func(op protocol.Opcode, req any) []uint64 {
		t.Helper()
		var rep protocol.GraphNodesReply
		var tail []byte
		switch r := req.(type) {
		case protocol.GraphGetEdgesReq:
			rep, tail = must[protocol.GraphGetEdgesReq, protocol.GraphNodesReply](e, op, r, nil)
		case protocol.GraphNodeDepsReq:
			rep, tail = must[protocol.GraphNodeDepsReq, protocol.GraphNodesReply](e, op, r, nil)
		}
		var ids []uint64
		for i := 0; i+8 <= len(tail); i += 8 {
			ids = append(ids, binary.LittleEndian.Uint64(tail[i:]))
		}
		if rep.Count != rep.Total {
			t.Fatalf("%v: %d of %d", op, rep.Count, rep.Total)
		}
		return ids
	}
	getEdges := func() []uint64 { return list(protocol.OpGraphGetEdges, protocol.GraphGetEdgesReq{Graph: g.Handle}) }
	deps := func(n uint64, dependents uint32) []uint64 {
		return list(protocol.OpGraphNodeGetDependencies, protocol.GraphNodeDepsReq{Node: n, Dependents: dependents})
	}
	launch := func() byte {
		t.Helper()
		x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: strm.Handle}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x.Handle}, nil)
		st, b := e.dtoh(p, 64)
		wantStatus(t, "read back", st, 0)
		if !bytes.Equal(b, bytes.Repeat(b[:1], 64)) {
			t.Fatalf("memsets left % x", b[:8])
		}
		return b[0]
	}

	if got := getEdges(); len(got) != 0 {
		t.Fatalf("edges of a graph without any: %v", got)
	}
	// x after y, and z after both.
	wantStatus(t, "add y->x, x->z, y->z", edges(protocol.OpGraphAddDependencies, pairs(y, x, x, z, y, z)), 0)
	if got := getEdges(); len(got) != 6 {
		t.Fatalf("edges %v, want 3 pairs", got)
	}
	if got := deps(z, 0); len(got) != 2 || !(got[0] == x && got[1] == y || got[0] == y && got[1] == x) {
		t.Fatalf("z depends on %v, want x %d and y %d", got, x, y)
	}
	if got := deps(y, 1); len(got) != 2 {
		t.Fatalf("dependents of y: %v, want x and z", got)
	}
	if got := deps(y, 0); len(got) != 0 {
		t.Fatalf("y depends on %v", got)
	}
	if got := nodesOf(e, g.Handle, 1); len(got) != 1 || got[0] != y {
		t.Fatalf("roots %v, want [y %d]", got, y)
	}
	if v := launch(); v != 1 {
		t.Fatalf("x after y left %d, want 1", v)
	}
	// The other way round.
	wantStatus(t, "remove y->x", edges(protocol.OpGraphRemoveDependencies, pairs(y, x)), 0)
	wantStatus(t, "add x->y", edges(protocol.OpGraphAddDependencies, pairs(x, y)), 0)
	if v := launch(); v != 2 {
		t.Fatalf("y after x left %d, want 2", v)
	}
	wantStatus(t, "no edges", edges(protocol.OpGraphAddDependencies, nil), 0)

	ex, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle, Flags: 1}, nil)
	if f, _ := must[protocol.HandleReq, protocol.GraphExecFlagsReply](e, protocol.OpGraphExecGetFlags, protocol.HandleReq{Handle: ex.Handle}, nil); f.Flags != 1 {
		t.Fatalf("flags %#x, want AUTO_FREE_ON_LAUNCH", f.Flags)
	}
	st, _, _ := do[protocol.HandleReq, protocol.GraphExecFlagsReply](e, protocol.OpGraphExecGetFlags, protocol.HandleReq{Handle: 0x9999}, nil)
	wantStatus(t, "flags of a foreign executable graph", st, device.ErrInvalidHandle)

	other, _ := must[protocol.GraphCreateReq, protocol.HandleReply](e, protocol.OpGraphCreate, protocol.GraphCreateReq{}, nil)
	w, _ := must[protocol.GraphAddEmptyNodeReq, protocol.HandleReply](e, protocol.OpGraphAddEmptyNode, protocol.GraphAddEmptyNodeReq{Graph: other.Handle}, nil)
	for _, tc := range []struct {
		name string
		op   protocol.Opcode
		req  protocol.GraphEdgesReq
		tail []byte
		want device.Result
	}{
		{"an edge there already", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(x, y), device.ErrInvalidValue},
		{"removing an edge not there", protocol.OpGraphRemoveDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(y, x), device.ErrInvalidValue},
		{"a node of another graph", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(w.Handle, x), device.ErrInvalidValue},
		{"a foreign node", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(x, 0x9999), device.ErrInvalidValue},
		{"a foreign graph", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: 0x9999, Count: 1}, pairs(x, y), device.ErrInvalidHandle},
		{"more edges than sent", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 2}, pairs(y, z), device.ErrInvalidValue},
		{"half an edge", protocol.OpGraphRemoveDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(y, z, x), device.ErrInvalidValue},
		{"too many edges", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: protocol.MaxGraphEdges + 1}, nil, device.ErrInvalidValue},
		{"a node on itself", protocol.OpGraphAddDependencies, protocol.GraphEdgesReq{Graph: g.Handle, Count: 1}, pairs(x, x), device.ErrInvalidValue},
	} {
		st, _, _ := do[protocol.GraphEdgesReq, protocol.Empty](e, tc.op, tc.req, tc.tail)
		wantStatus(t, tc.name, st, tc.want)
	}
	st, _, _ = do[protocol.GraphGetEdgesReq, protocol.GraphNodesReply](e, protocol.OpGraphGetEdges, protocol.GraphGetEdgesReq{Graph: g.Handle, First: 99}, nil)
	wantStatus(t, "edges past the last", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphGetEdgesReq, protocol.GraphNodesReply](e, protocol.OpGraphGetEdges, protocol.GraphGetEdgesReq{Graph: 0x9999}, nil)
	wantStatus(t, "edges of a foreign graph", st, device.ErrInvalidHandle)
	st, _, _ = do[protocol.GraphNodeDepsReq, protocol.GraphNodesReply](e, protocol.OpGraphNodeGetDependencies, protocol.GraphNodeDepsReq{Node: x, Dependents: 2}, nil)
	wantStatus(t, "dependents 2", st, device.ErrInvalidValue)
	st, _, _ = do[protocol.GraphNodeDepsReq, protocol.GraphNodesReply](e, protocol.OpGraphNodeGetDependencies, protocol.GraphNodeDepsReq{Node: 0x9999}, nil)
	wantStatus(t, "dependencies of a foreign node", st, device.ErrInvalidHandle)
	// A destroyed node takes its edges with it.
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroyNode, protocol.HandleReq{Handle: y}, nil)
	if got := getEdges(); len(got) != 2 || got[0] != x || got[1] != z {
		t.Fatalf("edges after y went: %v, want [x %d z %d]", got, x, z)
	}
}
