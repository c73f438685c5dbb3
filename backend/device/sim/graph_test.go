package sim

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
)

// A graph built node by node runs its nodes in order at each launch; its
// nodes list with their types; a copy node's host memory must be
// registered, and dependencies must be nodes of the same graph.
func TestGraphBuiltNodeByNode(t *testing.T) {
	c := newCtx(t)
	host := bytes.Repeat([]byte{7}, 64)
	if _, err := c.HostRegister(host, false); err != nil {
		t.Fatal(err)
	}
	p, _ := c.MemAlloc(64)
	s, _ := c.StreamCreate(0, 0)
	g, err := c.GraphCreate()
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.GraphAddMemcpyNode(g, nil, device.GraphCopy{Dst: p, SrcHost: host[:32], N: 32})
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.GraphAddMemsetNode(g, []device.GraphNode{in}, p+8, 0x01020304, 4, 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	join, err := c.GraphAddEmptyNode(g, []device.GraphNode{in, set})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.GraphAddMemcpyNode(g, []device.GraphNode{join}, device.GraphCopy{DstHost: host[32:], Src: p, N: 32})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := c.GraphNodes(g, false)
	if len(nodes) != 4 || nodes[0] != in || nodes[3] != out {
		t.Fatalf("nodes %v", nodes)
	}
	if roots, _ := c.GraphNodes(g, true); len(roots) != 1 || roots[0] != in {
		t.Fatalf("roots %v", roots)
	}
	for n, want := range map[device.GraphNode]int{in: device.GraphNodeMemcpy, set: device.GraphNodeMemset, join: device.GraphNodeEmpty} {
		if typ, err := c.GraphNodeType(n); err != nil || typ != want {
			t.Fatalf("node %#x: type %d (%v), want %d", n, typ, err, want)
		}
	}
	e, err := c.GraphInstantiate(g, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Nodes added after instantiation are not the executable graph's.
	if _, err := c.GraphAddMemsetNode(g, nil, p, 0, 1, 32, 1, 0); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{7}, 8), 4, 3, 2, 1, 4, 3, 2, 1)
	want = append(want, bytes.Repeat([]byte{7}, 16)...)
	for i := 0; i < 2; i++ {
		copy(host[32:], make([]byte, 32))
		if err := c.GraphLaunch(e, s); err != nil {
			t.Fatal(err)
		}
		if err := c.StreamSynchronize(s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(host[32:], want) {
			t.Fatalf("launch %d: % x", i, host[32:])
		}
	}

	// A clone has its own nodes with the same edges; a node removed from
	// it takes its edges along and leaves the original whole.
	cl, err := c.GraphClone(g)
	if err != nil {
		t.Fatal(err)
	}
	cn, _ := c.GraphNodes(cl, false)
	if len(cn) != 5 || cn[0] == in {
		t.Fatalf("clone's nodes %v", cn)
	}
	if err := c.GraphDestroyNode(cn[0]); err != nil {
		t.Fatal(err)
	}
	if roots, _ := c.GraphNodes(cl, true); len(roots) != 2 || roots[0] != cn[1] || roots[1] != cn[4] {
		t.Fatalf("clone's roots after its first node went: %v (nodes %v)", roots, cn)
	}
	if n, _ := c.GraphNodes(g, false); len(n) != 5 {
		t.Fatalf("the original has %d nodes", len(n))
	}
	if err := c.GraphDestroyNode(cn[0]); device.ResultOf(err) != device.ErrInvalidHandle {
		t.Fatalf("destroying a node twice: %v", err)
	}
	if err := c.GraphUpload(e, s); err != nil {
		t.Fatal(err)
	}
	// e (4 nodes) takes a graph of its shape; the clone, a node short of
	// g's 5 now, is another shape.
	same, _ := c.GraphCreate()
	a, _ := c.GraphAddMemcpyNode(same, nil, device.GraphCopy{Dst: p, SrcHost: host[:32], N: 32})
	b, _ := c.GraphAddMemsetNode(same, []device.GraphNode{a}, p, 0, 1, 1, 1, 0)
	j, _ := c.GraphAddEmptyNode(same, []device.GraphNode{a, b})
	if _, err := c.GraphAddMemcpyNode(same, []device.GraphNode{j}, device.GraphCopy{DstHost: host[32:], Src: p, N: 32}); err != nil {
		t.Fatal(err)
	}
	if r, _, err := c.GraphExecUpdate(e, same); err != nil || r != device.GraphUpdateSuccess {
		t.Fatalf("update from a graph of the same shape: %d %v", r, err)
	}
	if r, n, err := c.GraphExecUpdate(e, cl); err != nil || r != device.GraphUpdateNodeTypeChanged || n != cn[1] {
		t.Fatalf("update from a graph of other node types: %d %#x %v", r, n, err)
	}
	if r, _, err := c.GraphExecUpdate(e, g); err != nil || r != device.GraphUpdateTopologyChanged {
		t.Fatalf("update from a graph with a node more: %d %v", r, err)
	}

	other, _ := c.GraphCreate()
	if _, err := c.GraphAddEmptyNode(other, []device.GraphNode{in}); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("a dependency of another graph: %v", err)
	}
	if _, err := c.GraphAddEmptyNode(g, []device.GraphNode{in, in}); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("a dependency twice: %v", err)
	}
	if _, err := c.GraphAddMemcpyNode(g, nil, device.GraphCopy{Dst: p, SrcHost: make([]byte, 8), N: 8}); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("unregistered host memory: %v", err)
	}
	if _, err := c.GraphAddMemcpyNode(g, nil, device.GraphCopy{Dst: p, Src: p + 60, N: 8}); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("a copy past the allocation: %v", err)
	}
	if _, err := c.GraphAddMemsetNode(g, nil, p, 0, 3, 4, 1, 0); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("a memset of element size 3: %v", err)
	}
	if err := c.GraphDestroy(g); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GraphNodeType(in); device.ResultOf(err) != device.ErrInvalidHandle {
		t.Fatalf("a node of a destroyed graph: %v", err)
	}
	if _, err := c.GraphNodes(g, false); device.ResultOf(err) != device.ErrInvalidHandle {
		t.Fatalf("nodes of a destroyed graph: %v", err)
	}
	// The executable graph outlives its graph.
	if err := c.GraphLaunch(e, s); err != nil {
		t.Fatal(err)
	}
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}

// A capture's work becomes a chain of typed nodes.
func TestCapturedNodes(t *testing.T) {
	c := newCtx(t)
	p, _ := c.MemAlloc(64)
	s, _ := c.StreamCreate(0, 0)
	if err := c.StreamBeginCapture(s, device.CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := c.Memset(p, 1, 1, 64, 1, 0, s, true); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyDtoD(p, p+32, 16, s, true); err != nil {
		t.Fatal(err)
	}
	g, err := c.StreamEndCapture(s)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := c.GraphNodes(g, false)
	if len(nodes) != 2 {
		t.Fatalf("%d nodes", len(nodes))
	}
	for i, want := range []int{device.GraphNodeMemset, device.GraphNodeMemcpy} {
		if typ, _ := c.GraphNodeType(nodes[i]); typ != want {
			t.Fatalf("node %d: type %d, want %d", i, typ, want)
		}
	}
	if roots, _ := c.GraphNodes(g, true); len(roots) != 1 || roots[0] != nodes[0] {
		t.Fatalf("roots %v", roots)
	}
}

// Edges added after the nodes reorder the graph's launch order; edges
// that would make a cycle leave the graph as it was.
func TestGraphEdgesCycle(t *testing.T) {
	c := newCtx(t)
	g, _ := c.GraphCreate()
	a, _ := c.GraphAddEmptyNode(g, nil)
	b, _ := c.GraphAddEmptyNode(g, nil)
	d, _ := c.GraphAddEmptyNode(g, []device.GraphNode{a})
	if err := c.GraphAddDependencies(g, []device.GraphNode{b}, []device.GraphNode{a}); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := c.GraphNodes(g, false); len(nodes) != 3 || nodes[0] != b || nodes[1] != a || nodes[2] != d {
		t.Fatalf("order %v, want b %v a %v d %v", nodes, b, a, d)
	}
	// d -> b closes b -> a -> d; with it, a -> b (an edge of its own) goes too.
	err := c.GraphAddDependencies(g, []device.GraphNode{a, d}, []device.GraphNode{b, b})
	if device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("a cycle: %v", err)
	}
	if from, _, _ := c.GraphEdges(g); len(from) != 2 {
		t.Fatalf("%d edges after a refused cycle, want 2", len(from))
	}
	if deps, _ := c.GraphNodeDeps(b, false); len(deps) != 0 {
		t.Fatalf("b depends on %v after a refused cycle", deps)
	}
}
