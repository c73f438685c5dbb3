package sim

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Stream capture and graphs, simulated. A capturing stream records the
// work queued on it (the same closures it would run) instead of running
// it, each as a node that depends on the one before; ending the capture
// makes a graph of those nodes. A graph built node by node (GraphCreate,
// GraphAdd*Node) holds its nodes in the order they were added, which is a
// topological order (a node's dependencies exist before it). Launching an
// instantiated graph runs its nodes in that order, as one work item of the
// stream it is launched on. What the simulation leaves out: streams that
// join a capture by waiting for an event recorded in it (they just run),
// and the rules of the legacy NULL stream against capturing streams.

// capture is a capture in progress on one stream.
type capture struct {
	mode    int
	nodes   []*node
	invalid bool // a call the capture cannot hold was made: ending it fails
}

// node is one node of a graph: its CUgraphNodeType, its work and the
// nodes it depends on.
type node struct {
	typ  int
	run  func()
	deps []*node
	g    *graph
	h    device.GraphNode
}

// graph is a graph's nodes, in a topological order. An executable graph
// holds a copy of the list made when it was instantiated.
type graph struct {
	nodes []*node
}

// opNodeType is the type of the node a call captured on a stream makes.
func opNodeType(op string) int {
	switch op {
	case "cuLaunchKernel":
		return device.GraphNodeKernel
	case "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD":
		return device.GraphNodeMemcpy
	case "cuMemset":
		return device.GraphNodeMemset
	case "cuLaunchHostFunc":
		return device.GraphNodeHost
	case "cuStreamWaitEvent":
		return device.GraphNodeWaitEvent
	case "cuEventRecord":
		return device.GraphNodeEventRecord
	case "cuMemAllocAsync":
		return device.GraphNodeMemAlloc
	case "cuMemFreeAsync":
		return device.GraphNodeMemFree
	}
	return device.GraphNodeEmpty
}

// record appends work to a capture, after the node before it.
func (cp *capture) record(op string, fn func()) {
	n := &node{typ: opNodeType(op), run: fn}
	if k := len(cp.nodes); k > 0 {
		n.deps = []*node{cp.nodes[k-1]}
	}
	cp.nodes = append(cp.nodes, n)
}

// capturing returns s's capture, if any.
func (s *stream) capturing() *capture {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cap
}

// invalidate marks s's capture, if any, invalid and reports whether there
// was one (a synchronous call on a capturing stream ends it badly, as the
// driver does).
func (s *stream) invalidate() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap == nil {
		return false
	}
	s.cap.invalid = true
	return true
}

func errCapturing(op string) error {
	return device.Errorf(op, device.ErrCaptureUnsupported, "the stream is capturing: a synchronous call cannot be captured (the capture is now invalidated)")
}

// StreamBeginCapture starts capturing s.
func (c *Context) StreamBeginCapture(h device.Stream, mode int) error {
	const op = "cuStreamBeginCapture"
	if err := c.broken(op); err != nil {
		return err
	}
	if mode < device.CaptureModeGlobal || mode > device.CaptureModeRelaxed {
		return device.Errorf(op, device.ErrInvalidValue, "capture mode %d", mode)
	}
	if h == defaultStreamHandle {
		return device.Errorf(op, device.ErrCaptureUnsupported, "the legacy NULL stream cannot be captured")
	}
	s, err := c.stream(op, h)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap != nil {
		return device.Errorf(op, device.ErrIllegalState, "the stream is already capturing")
	}
	s.cap = &capture{mode: mode}
	return nil
}

// StreamEndCapture ends s's capture and returns its graph.
func (c *Context) StreamEndCapture(h device.Stream) (device.Graph, error) {
	const op = "cuStreamEndCapture"
	s, err := c.stream(op, h)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	cp := s.cap
	s.cap = nil
	s.mu.Unlock()
	if cp == nil {
		return 0, device.Errorf(op, device.ErrIllegalState, "the stream is not capturing")
	}
	if cp.invalid {
		return 0, device.Errorf(op, device.ErrCaptureInvalidated, "a call the capture could not hold was made on the stream")
	}
	if err := c.broken(op); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := device.Graph(c.newHandle())
	gr := &graph{}
	for _, n := range cp.nodes {
		c.addNode(gr, n)
	}
	c.graphs[g] = gr
	return g, nil
}

// addNode gives n a handle and appends it to gr (c.mu held).
func (c *Context) addNode(gr *graph, n *node) device.GraphNode {
	n.g = gr
	n.h = device.GraphNode(c.newHandle())
	c.nodes[n.h] = n
	gr.nodes = append(gr.nodes, n)
	return n.h
}

// StreamCaptureStatus says whether s is capturing.
func (c *Context) StreamCaptureStatus(h device.Stream) (int, error) {
	const op = "cuStreamIsCapturing"
	s, err := c.stream(op, h)
	if err != nil {
		return 0, err
	}
	cp := s.capturing()
	switch {
	case cp == nil:
		return device.CaptureStatusNone, nil
	case cp.invalid:
		return device.CaptureStatusInvalidated, nil
	}
	return device.CaptureStatusActive, nil
}

// GraphInstantiate makes an executable graph of g.
func (c *Context) GraphInstantiate(g device.Graph, flags uint64) (device.GraphExec, error) {
	const op = "cuGraphInstantiateWithFlags"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	if flags&^graphInstantiateFlags != 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "flags %#x", flags)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	e := device.GraphExec(c.newHandle())
	c.execs[e] = &graph{nodes: append([]*node(nil), gr.nodes...)}
	return e, nil
}

// CUgraphInstantiate_flags (cuda.h): AUTO_FREE_ON_LAUNCH, UPLOAD,
// DEVICE_LAUNCH, USE_NODE_PRIORITY.
const graphInstantiateFlags = 0x1 | 0x2 | 0x4 | 0x8

// GraphLaunch queues e's work on s, in order, as one work item.
func (c *Context) GraphLaunch(e device.GraphExec, h device.Stream) error {
	const op = "cuGraphLaunch"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	gr, ok := c.execs[e]
	var nodes []*node
	if ok {
		nodes = gr.nodes // GraphExecUpdate replaces the list, never changes it
	}
	c.mu.Unlock()
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	_, _, err := c.submit(op, h, func() {
		for _, n := range nodes {
			if n.run != nil {
				n.run()
			}
		}
	})
	return err
}

// GraphExecDestroy destroys an executable graph (launches already queued
// still run).
func (c *Context) GraphExecDestroy(e device.GraphExec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.execs[e]; !ok {
		return device.Errorf("cuGraphExecDestroy", device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	delete(c.execs, e)
	return nil
}

// GraphDestroy destroys a graph (its instantiations stay valid).
func (c *Context) GraphDestroy(g device.Graph) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return device.Errorf("cuGraphDestroy", device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	for _, n := range gr.nodes {
		delete(c.nodes, n.h)
	}
	delete(c.graphs, g)
	return nil
}

// GraphCreate makes an empty graph.
func (c *Context) GraphCreate() (device.Graph, error) {
	if err := c.broken("cuGraphCreate"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := device.Graph(c.newHandle())
	c.graphs[g] = &graph{}
	return g, nil
}

// GraphNodes lists g's nodes (roots: those without dependencies).
func (c *Context) GraphNodes(g device.Graph, roots bool) ([]device.GraphNode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return nil, device.Errorf("cuGraphGetNodes", device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	out := make([]device.GraphNode, 0, len(gr.nodes))
	for _, n := range gr.nodes {
		if !roots || len(n.deps) == 0 {
			out = append(out, n.h)
		}
	}
	return out, nil
}

// GraphNodeType is a node's CUgraphNodeType.
func (c *Context) GraphNodeType(h device.GraphNode) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[h]
	if !ok {
		return 0, device.Errorf("cuGraphNodeGetType", device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	return n.typ, nil
}

// addGraphNode adds a node of typ running work to g after deps.
func (c *Context) addGraphNode(op string, g device.Graph, deps []device.GraphNode, typ int, work func()) (device.GraphNode, error) {
	if err := c.broken(op); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	n := &node{typ: typ, run: work}
	for i, d := range deps {
		dn, ok := c.nodes[d]
		if !ok || dn.g != gr {
			return 0, device.Errorf(op, device.ErrInvalidValue, "dependency %d (%#x) is not a node of graph %#x", i, uintptr(d), uintptr(g))
		}
		for _, o := range n.deps {
			if o == dn {
				return 0, device.Errorf(op, device.ErrInvalidValue, "dependency %d (%#x) is listed twice", i, uintptr(d))
			}
		}
		n.deps = append(n.deps, dn)
	}
	return c.addNode(gr, n), nil
}

// GraphAddKernelNode adds a launch of f.
func (c *Context) GraphAddKernelNode(g device.Graph, deps []device.GraphNode, f device.Function, cfg device.LaunchConfig, params []byte) (device.GraphNode, error) {
	params = append([]byte(nil), params...) // the node keeps its own copy, as the driver does
	work, err := c.kernelWork(f, cfg, params)
	if err != nil {
		return 0, err
	}
	return c.addGraphNode("cuGraphAddKernelNode", g, deps, device.GraphNodeKernel, work)
}

// GraphAddMemcpyNode adds a 1D copy; its host memory must be registered
// (HostRegister) and stay so while the graph lives.
func (c *Context) GraphAddMemcpyNode(g device.Graph, deps []device.GraphNode, cp device.GraphCopy) (device.GraphNode, error) {
	const op = "cuGraphAddMemcpyNode"
	if cp.N == 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "a copy of 0 bytes")
	}
	var dst, src []byte
	for _, h := range []struct {
		host []byte
		dev  device.Ptr
		out  *[]byte
	}{{cp.DstHost, cp.Dst, &dst}, {cp.SrcHost, cp.Src, &src}} {
		if h.host != nil {
			if uint64(len(h.host)) != cp.N {
				return 0, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(h.host), cp.N)
			}
			pinned, err := c.hostRange(op, h.host)
			if err != nil {
				return 0, err
			}
			if !pinned {
				return 0, device.Errorf(op, device.ErrInvalidValue, "host memory of a graph memcpy node must be registered (cuMemHostRegister)")
			}
			*h.out = h.host
			continue
		}
		b, err := c.span(op, h.dev, cp.N)
		if err != nil {
			return 0, err
		}
		*h.out = b
	}
	return c.addGraphNode(op, g, deps, device.GraphNodeMemcpy, func() {
		if c.healthy() {
			copy(dst, src)
		}
	})
}

// GraphAddMemsetNode adds a memset.
func (c *Context) GraphAddMemsetNode(g device.Graph, deps []device.GraphNode, dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64) (device.GraphNode, error) {
	const op = "cuGraphAddMemsetNode"
	if width == 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "a memset of width 0")
	}
	work, err := c.memsetWork(dst, value, elemSize, width, height, pitch)
	if err != nil {
		return 0, err
	}
	return c.addGraphNode(op, g, deps, device.GraphNodeMemset, func() {
		if c.healthy() {
			work()
		}
	})
}

// GraphAddEmptyNode adds a node that does nothing (a join point).
func (c *Context) GraphAddEmptyNode(g device.Graph, deps []device.GraphNode) (device.GraphNode, error) {
	return c.addGraphNode("cuGraphAddEmptyNode", g, deps, device.GraphNodeEmpty, nil)
}

// GraphClone copies g: new nodes of the same work, with the same edges.
func (c *Context) GraphClone(g device.Graph) (device.Graph, error) {
	if err := c.broken("cuGraphClone"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return 0, device.Errorf("cuGraphClone", device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	cl := &graph{}
	copies := make(map[*node]*node, len(gr.nodes))
	for _, n := range gr.nodes { // dependencies come first: they are copied by then
		m := &node{typ: n.typ, run: n.run}
		for _, d := range n.deps {
			m.deps = append(m.deps, copies[d])
		}
		copies[n] = m
		c.addNode(cl, m)
	}
	h := device.Graph(c.newHandle())
	c.graphs[h] = cl
	return h, nil
}

// GraphDestroyNode removes a node and the edges to and from it.
func (c *Context) GraphDestroyNode(h device.GraphNode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[h]
	if !ok {
		return device.Errorf("cuGraphDestroyNode", device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	gr := n.g
	kept := gr.nodes[:0]
	for _, o := range gr.nodes {
		if o == n {
			continue
		}
		deps := o.deps[:0:0]
		for _, d := range o.deps {
			if d != n {
				deps = append(deps, d)
			}
		}
		o.deps = deps
		kept = append(kept, o)
	}
	clear(gr.nodes[len(kept):])
	gr.nodes = kept
	delete(c.nodes, h)
	return nil
}

// GraphUpload checks its handles: the simulated device has nothing to
// upload (a launch needs no preparation here).
func (c *Context) GraphUpload(e device.GraphExec, h device.Stream) error {
	const op = "cuGraphUpload"
	if err := c.broken(op); err != nil {
		return err
	}
	if _, err := c.stream(op, h); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.execs[e]; !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	return nil
}

// GraphExecUpdate gives e the nodes of g when g has e's shape: as many
// nodes, of the same types, with the same edges (by position); otherwise
// e is unchanged and the result says why.
func (c *Context) GraphExecUpdate(e device.GraphExec, g device.Graph) (int, device.GraphNode, error) {
	const op = "cuGraphExecUpdate"
	if err := c.broken(op); err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ex, ok := c.execs[e]
	if !ok {
		return 0, 0, device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	gr, ok := c.graphs[g]
	if !ok {
		return 0, 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	if len(gr.nodes) != len(ex.nodes) {
		return device.GraphUpdateTopologyChanged, 0, nil
	}
	pos := func(nodes []*node) map[*node]int {
		m := make(map[*node]int, len(nodes))
		for i, n := range nodes {
			m[n] = i
		}
		return m
	}
	gp, ep := pos(gr.nodes), pos(ex.nodes)
	for i, n := range gr.nodes {
		o := ex.nodes[i]
		if n.typ != o.typ {
			return device.GraphUpdateNodeTypeChanged, n.h, nil
		}
		if len(n.deps) != len(o.deps) {
			return device.GraphUpdateTopologyChanged, n.h, nil
		}
		for j, d := range n.deps {
			if gp[d] != ep[o.deps[j]] {
				return device.GraphUpdateTopologyChanged, n.h, nil
			}
		}
	}
	ex.nodes = append([]*node(nil), gr.nodes...) // launches already queued keep the old list
	return device.GraphUpdateSuccess, 0, nil
}
