package sim

import (
	"time"

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
// nodes it depends on; the parameters of its type, which the Get methods
// read (a node captured from a call other than a launch keeps none).
type node struct {
	typ    int
	run    func()
	deps   []*node
	g      *graph
	h      device.GraphNode
	kern   *device.KernelNode
	memset *device.MemsetNode
	cp     *device.GraphCopy
	// An event node's event; a child graph node's copy of its graph
	// (childH: its handle, 0 in an executable graph, whose copies have
	// none).
	ev     *event
	evH    device.Event
	child  *graph
	childH device.Graph
	// A kernel node's attributes (nil: the defaults); replaced, never
	// changed, as the node's copies share them.
	attrs *kernelAttrs
	// origin: in a clone, the node it was copied from; disabled: in an
	// executable graph, switched off (launches skip it).
	origin   *node
	disabled bool
}

// kernelAttrs are a kernel node's attributes: a stream's (but the
// synchronization policy) and COOPERATIVE.
type kernelAttrs struct {
	streamAttrs
	cooperative uint32
}

// graph is a graph's nodes, in a topological order. An executable graph
// holds copies of its graph's nodes, made when it was instantiated: from
// maps each node of the graph to its copy (the Exec*SetParams calls name
// the graph's node, and change only the copy).
type graph struct {
	nodes []*node
	from  map[*node]*node
}

// instance copies gr's nodes for an executable graph (c.mu held); the
// copies have no handles of their own.
func instance(gr *graph) *graph {
	ex := &graph{nodes: make([]*node, 0, len(gr.nodes)), from: make(map[*node]*node, len(gr.nodes))}
	for _, n := range gr.nodes { // dependencies come first: they are copied by then
		m := *n
		m.g, m.h, m.deps = ex, 0, make([]*node, 0, len(n.deps))
		if n.child != nil {
			m.child, m.childH = instance(n.child), 0
		}
		for _, d := range n.deps {
			m.deps = append(m.deps, ex.from[d])
		}
		ex.from[n] = &m
		ex.nodes = append(ex.nodes, &m)
	}
	return ex
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

// record appends work to a capture, after the node before it; tmpl (if
// not nil) holds the node's parameters.
func (cp *capture) record(op string, fn func(), tmpl *node) {
	n := &node{}
	if tmpl != nil {
		n = tmpl
	}
	n.typ, n.run = opNodeType(op), fn
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
	c.execs[e] = instance(gr)
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
	var runs []func() // as the nodes are now: a later SetParams changes later launches
	if ok {
		runs = prepare(gr.nodes, nil)
	}
	c.mu.Unlock()
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	_, _, err := c.submit(op, h, func() {
		for _, run := range runs {
			run()
		}
	})
	return err
}

// prepare appends the work of a launch of nodes to runs (c.mu held): a
// child graph's nodes in its place; an event record node's event takes a
// new record now, completed when the node runs; a wait node waits for
// the event's record as it is now (as at a stream's cuStreamWaitEvent).
func prepare(nodes []*node, runs []func()) []func() {
	for _, n := range nodes {
		switch {
		case n.disabled:
		case n.child != nil:
			runs = prepare(n.child.nodes, runs)
		case n.ev != nil && n.typ == device.GraphNodeEventRecord:
			e, done := n.ev, make(chan struct{})
			e.mu.Lock()
			e.done = done
			e.mu.Unlock()
			runs = append(runs, func() {
				e.mu.Lock()
				e.at, e.recorded = time.Now(), true
				e.mu.Unlock()
				close(done)
			})
		case n.ev != nil && n.typ == device.GraphNodeWaitEvent:
			done := n.ev.current()
			runs = append(runs, func() { <-done })
		case n.run != nil:
			runs = append(runs, n.run)
		}
	}
	return runs
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
	c.dropGraph(g, gr)
	return nil
}

// dropGraph forgets graph g, its nodes and its child graph nodes' graphs
// (c.mu held).
func (c *Context) dropGraph(g device.Graph, gr *graph) {
	for _, n := range gr.nodes {
		c.dropNode(n)
	}
	delete(c.graphs, g)
}

// dropNode forgets a node's handle and its child graph (c.mu held).
func (c *Context) dropNode(n *node) {
	if n.child != nil && n.childH != 0 {
		c.dropGraph(n.childH, n.child)
	}
	delete(c.nodes, n.h)
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

// addGraphNode adds n (its type, work and parameters set) to g after deps.
func (c *Context) addGraphNode(op string, g device.Graph, deps []device.GraphNode, n *node) (device.GraphNode, error) {
	if err := c.broken(op); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
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
	cfg.Stream = 0
	return c.addGraphNode("cuGraphAddKernelNode", g, deps, &node{typ: device.GraphNodeKernel, run: work,
		kern: &device.KernelNode{Func: f, Config: cfg, Params: params}})
}

// GraphAddMemcpyNode adds a 1D copy; its host memory must be registered
// (HostRegister) and stay so while the graph lives.
func (c *Context) GraphAddMemcpyNode(g device.Graph, deps []device.GraphNode, cp device.GraphCopy) (device.GraphNode, error) {
	const op = "cuGraphAddMemcpyNode"
	work, err := c.copyWork(op, cp)
	if err != nil {
		return 0, err
	}
	return c.addGraphNode(op, g, deps, &node{typ: device.GraphNodeMemcpy, run: work, cp: &cp})
}

// copyWork checks a memcpy node's copy and returns the work that does it.
func (c *Context) copyWork(op string, cp device.GraphCopy) (func(), error) {
	if cp.N == 0 {
		return nil, device.Errorf(op, device.ErrInvalidValue, "a copy of 0 bytes")
	}
	if cp.DstHost != nil && cp.SrcHost != nil {
		return nil, device.Errorf(op, device.ErrInvalidValue, "a copy from host memory to host memory")
	}
	var dst, src []byte
	for _, h := range []struct {
		host []byte
		dev  device.Ptr
		out  *[]byte
	}{{cp.DstHost, cp.Dst, &dst}, {cp.SrcHost, cp.Src, &src}} {
		if h.host != nil {
			if uint64(len(h.host)) != cp.N {
				return nil, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(h.host), cp.N)
			}
			pinned, err := c.hostRange(op, h.host)
			if err != nil {
				return nil, err
			}
			if !pinned {
				return nil, device.Errorf(op, device.ErrInvalidValue, "host memory of a graph memcpy node must be registered (cuMemHostRegister)")
			}
			*h.out = h.host
			continue
		}
		b, err := c.span(op, h.dev, cp.N)
		if err != nil {
			return nil, err
		}
		*h.out = b
	}
	return func() {
		if c.healthy() {
			copy(dst, src)
		}
	}, nil
}

// GraphAddMemsetNode adds a memset.
func (c *Context) GraphAddMemsetNode(g device.Graph, deps []device.GraphNode, dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64) (device.GraphNode, error) {
	const op = "cuGraphAddMemsetNode"
	p := device.MemsetNode{Dst: dst, Value: value, ElemSize: elemSize, Width: width, Height: height, Pitch: pitch}
	work, err := c.memsetNodeWork(op, p)
	if err != nil {
		return 0, err
	}
	return c.addGraphNode(op, g, deps, &node{typ: device.GraphNodeMemset, run: work, memset: &p})
}

// memsetNodeWork checks a memset node's parameters and returns its work.
func (c *Context) memsetNodeWork(op string, p device.MemsetNode) (func(), error) {
	if p.Width == 0 {
		return nil, device.Errorf(op, device.ErrInvalidValue, "a memset of width 0")
	}
	work, err := c.memsetWork(p.Dst, p.Value, p.ElemSize, p.Width, p.Height, p.Pitch)
	if err != nil {
		return nil, err
	}
	return func() {
		if c.healthy() {
			work()
		}
	}, nil
}

// GraphAddEmptyNode adds a node that does nothing (a join point).
func (c *Context) GraphAddEmptyNode(g device.Graph, deps []device.GraphNode) (device.GraphNode, error) {
	return c.addGraphNode("cuGraphAddEmptyNode", g, deps, &node{typ: device.GraphNodeEmpty})
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
	return c.cloneGraph(gr), nil
}

// cloneGraph copies gr, its child graphs too, as a new graph with new
// handles (c.mu held).
func (c *Context) cloneGraph(gr *graph) device.Graph {
	cl := &graph{}
	copies := make(map[*node]*node, len(gr.nodes))
	for _, n := range gr.nodes { // dependencies come first: they are copied by then
		m := &node{typ: n.typ, run: n.run, kern: n.kern, memset: n.memset, cp: n.cp, ev: n.ev, evH: n.evH, attrs: n.attrs, origin: n}
		if n.child != nil {
			m.childH = c.cloneGraph(n.child)
			m.child = c.graphs[m.childH]
		}
		for _, d := range n.deps {
			m.deps = append(m.deps, copies[d])
		}
		copies[n] = m
		c.addNode(cl, m)
	}
	h := device.Graph(c.newHandle())
	c.graphs[h] = cl
	return h
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
	c.dropNode(n)
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
	if result, n := sameShape(gr.nodes, ex.nodes); result != device.GraphUpdateSuccess {
		if n != nil {
			return result, n.h, nil
		}
		return result, 0, nil
	}
	ep := make(map[*node]int, len(ex.nodes))
	for i, n := range ex.nodes {
		ep[n] = i
	}
	// New copies of g's nodes, each the copy of the node of e's graph at
	// its position (launches already queued keep what they took).
	up := instance(gr)
	from := make(map[*node]*node, len(ex.from))
	for orig, old := range ex.from {
		from[orig] = up.nodes[ep[old]]
	}
	ex.nodes, ex.from = up.nodes, from
	for _, n := range ex.nodes {
		n.g = ex
	}
	return device.GraphUpdateSuccess, 0, nil
}

// paramNode returns the node of type typ that a parameter call names: h
// itself (e 0) or its copy in executable graph e (c.mu held).
func (c *Context) paramNode(op string, e device.GraphExec, h device.GraphNode, typ int) (*node, error) {
	n, ok := c.nodes[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	if n.typ != typ {
		return nil, device.Errorf(op, device.ErrInvalidValue, "graph node %#x is of type %d, not %d", uintptr(h), n.typ, typ)
	}
	if e == 0 {
		return n, nil
	}
	ex, ok := c.execs[e]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	m, ok := ex.from[n]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidValue, "graph node %#x is not a node of the graph exec %#x was instantiated from", uintptr(h), uintptr(e))
	}
	return m, nil
}

// errNoParams answers a parameter read of a captured node whose call the
// simulation records as work only.
func errNoParams(op string) error {
	return device.Errorf(op, device.ErrNotSupported, "the simulated device keeps no parameters of this captured node (only of captured kernel launches and of nodes added by the program)")
}

// GraphKernelNodeParams reads a kernel node's launch.
func (c *Context) GraphKernelNodeParams(h device.GraphNode) (device.KernelNode, error) {
	const op = "cuGraphKernelNodeGetParams"
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, 0, h, device.GraphNodeKernel)
	if err != nil {
		return device.KernelNode{}, err
	}
	if n.kern == nil {
		return device.KernelNode{}, errNoParams(op)
	}
	k := *n.kern
	k.Params = append([]byte(nil), k.Params...)
	return k, nil
}

// setNode gives the node a parameter call names (checked against typ
// first, then again once work is made outside c.mu) new work and
// parameters.
func (c *Context) setNode(op string, e device.GraphExec, h device.GraphNode, typ int, work func() (func(), error), set func(n *node)) error {
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	_, err := c.paramNode(op, e, h, typ)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	run, err := work()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, e, h, typ)
	if err != nil {
		return err
	}
	n.run = run
	set(n)
	return nil
}

// GraphKernelNodeSetParams gives a kernel node (or its copy in e) a new
// launch.
func (c *Context) GraphKernelNodeSetParams(e device.GraphExec, h device.GraphNode, p device.KernelNode) error {
	op := "cuGraphKernelNodeSetParams"
	if e != 0 {
		op = "cuGraphExecKernelNodeSetParams"
	}
	p.Params = append([]byte(nil), p.Params...)
	p.Config.Stream = 0
	return c.setNode(op, e, h, device.GraphNodeKernel, func() (func(), error) {
		return c.kernelWork(p.Func, p.Config, p.Params)
	}, func(n *node) { n.kern = &p })
}

// GraphMemsetNodeParams reads a memset node's parameters.
func (c *Context) GraphMemsetNodeParams(h device.GraphNode) (device.MemsetNode, error) {
	const op = "cuGraphMemsetNodeGetParams"
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, 0, h, device.GraphNodeMemset)
	if err != nil {
		return device.MemsetNode{}, err
	}
	if n.memset == nil {
		return device.MemsetNode{}, errNoParams(op)
	}
	return *n.memset, nil
}

// GraphMemsetNodeSetParams gives a memset node (or its copy in e) new
// parameters.
func (c *Context) GraphMemsetNodeSetParams(e device.GraphExec, h device.GraphNode, p device.MemsetNode) error {
	op := "cuGraphMemsetNodeSetParams"
	if e != 0 {
		op = "cuGraphExecMemsetNodeSetParams"
	}
	return c.setNode(op, e, h, device.GraphNodeMemset, func() (func(), error) {
		return c.memsetNodeWork(op, p)
	}, func(n *node) { n.memset = &p })
}

// GraphMemcpyNodeParams reads a memcpy node's copy.
func (c *Context) GraphMemcpyNodeParams(h device.GraphNode) (device.GraphCopy, error) {
	const op = "cuGraphMemcpyNodeGetParams"
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, 0, h, device.GraphNodeMemcpy)
	if err != nil {
		return device.GraphCopy{}, err
	}
	if n.cp == nil {
		return device.GraphCopy{}, errNoParams(op)
	}
	return *n.cp, nil
}

// GraphMemcpyNodeSetParams gives a memcpy node (or its copy in e) a new
// copy.
func (c *Context) GraphMemcpyNodeSetParams(e device.GraphExec, h device.GraphNode, cp device.GraphCopy) error {
	op := "cuGraphMemcpyNodeSetParams"
	if e != 0 {
		op = "cuGraphExecMemcpyNodeSetParams"
	}
	return c.setNode(op, e, h, device.GraphNodeMemcpy, func() (func(), error) {
		return c.copyWork(op, cp)
	}, func(n *node) { n.cp = &cp })
}

// topo orders nodes so that each comes after its dependencies (Kahn's
// order, starting from the nodes as they were); ok is false when the
// edges make a cycle.
func topo(nodes []*node) (out []*node, ok bool) {
	indeg := make(map[*node]int, len(nodes))
	after := make(map[*node][]*node, len(nodes))
	for _, n := range nodes {
		indeg[n] = len(n.deps)
		for _, d := range n.deps {
			after[d] = append(after[d], n)
		}
	}
	out = make([]*node, 0, len(nodes))
	for _, n := range nodes {
		if indeg[n] == 0 {
			out = append(out, n)
		}
	}
	for i := 0; i < len(out); i++ {
		for _, m := range after[out[i]] {
			if indeg[m]--; indeg[m] == 0 {
				out = append(out, m)
			}
		}
	}
	return out, len(out) == len(nodes)
}

// edgeNodes resolves the nodes of edges (from[i], to[i]) of graph g
// (c.mu held).
func (c *Context) edgeNodes(op string, g device.Graph, from, to []device.GraphNode) (*graph, []*node, []*node, error) {
	gr, ok := c.graphs[g]
	if !ok {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	if len(from) != len(to) {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "%d from nodes for %d to nodes", len(from), len(to))
	}
	fs, ts := make([]*node, len(from)), make([]*node, len(to))
	of := func(i int, h device.GraphNode) (*node, error) {
		n, ok := c.nodes[h]
		if !ok || n.g != gr {
			return nil, device.Errorf(op, device.ErrInvalidValue, "edge %d: node %#x is not of graph %#x", i, uintptr(h), uintptr(g))
		}
		return n, nil
	}
	for i := range from {
		var err error
		if fs[i], err = of(i, from[i]); err != nil {
			return nil, nil, nil, err
		}
		if ts[i], err = of(i, to[i]); err != nil {
			return nil, nil, nil, err
		}
		if fs[i] == ts[i] {
			return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "edge %d: a node cannot depend on itself", i)
		}
	}
	return gr, fs, ts, nil
}

// hasDep says whether n depends on d.
func hasDep(n, d *node) bool {
	for _, o := range n.deps {
		if o == d {
			return true
		}
	}
	return false
}

// GraphAddDependencies makes to[i] depend on from[i]; an edge that is
// there already, or edges that make a cycle, leave the graph unchanged.
func (c *Context) GraphAddDependencies(g device.Graph, from, to []device.GraphNode) error {
	const op = "cuGraphAddDependencies"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, fs, ts, err := c.edgeNodes(op, g, from, to)
	if err != nil {
		return err
	}
	saved := make(map[*node][]*node, len(ts))
	for i := range ts {
		if hasDep(ts[i], fs[i]) {
			for n, deps := range saved {
				n.deps = deps
			}
			return device.Errorf(op, device.ErrInvalidValue, "edge %d: node %#x already depends on node %#x", i, uintptr(to[i]), uintptr(from[i]))
		}
		if _, ok := saved[ts[i]]; !ok {
			saved[ts[i]] = ts[i].deps
			ts[i].deps = append([]*node(nil), ts[i].deps...)
		}
		ts[i].deps = append(ts[i].deps, fs[i])
	}
	sorted, ok := topo(gr.nodes)
	if !ok {
		for n, deps := range saved {
			n.deps = deps
		}
		return device.Errorf(op, device.ErrInvalidValue, "the edges would make a cycle")
	}
	gr.nodes = sorted
	return nil
}

// GraphRemoveDependencies removes the edges from[i] -> to[i], each of
// which must be there.
func (c *Context) GraphRemoveDependencies(g device.Graph, from, to []device.GraphNode) error {
	const op = "cuGraphRemoveDependencies"
	c.mu.Lock()
	defer c.mu.Unlock()
	_, fs, ts, err := c.edgeNodes(op, g, from, to)
	if err != nil {
		return err
	}
	for i := range ts {
		if !hasDep(ts[i], fs[i]) {
			return device.Errorf(op, device.ErrInvalidValue, "edge %d: node %#x does not depend on node %#x", i, uintptr(to[i]), uintptr(from[i]))
		}
	}
	for i := range ts {
		deps := make([]*node, 0, len(ts[i].deps))
		for _, d := range ts[i].deps {
			if d != fs[i] {
				deps = append(deps, d)
			}
		}
		ts[i].deps = deps
	}
	return nil
}

// GraphEdges lists g's edges, node by node.
func (c *Context) GraphEdges(g device.Graph) (from, to []device.GraphNode, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gr, ok := c.graphs[g]
	if !ok {
		return nil, nil, device.Errorf("cuGraphGetEdges", device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	for _, n := range gr.nodes {
		for _, d := range n.deps {
			from, to = append(from, d.h), append(to, n.h)
		}
	}
	return from, to, nil
}

// GraphNodeDeps lists what n depends on, or what depends on n.
func (c *Context) GraphNodeDeps(h device.GraphNode, dependents bool) ([]device.GraphNode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[h]
	if !ok {
		return nil, device.Errorf("cuGraphNodeGetDependencies", device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	var out []device.GraphNode
	if !dependents {
		for _, d := range n.deps {
			out = append(out, d.h)
		}
		return out, nil
	}
	for _, m := range n.g.nodes {
		if hasDep(m, n) {
			out = append(out, m.h)
		}
	}
	return out, nil
}

// sameShape compares two lists of nodes: as many, of the same types (child
// graphs of the same shape), with the same edges by position. Not
// GraphUpdateSuccess: why not, and the node of a where they differ.
func sameShape(a, b []*node) (int, *node) {
	if len(a) != len(b) {
		return device.GraphUpdateTopologyChanged, nil
	}
	pos := func(nodes []*node) map[*node]int {
		m := make(map[*node]int, len(nodes))
		for i, n := range nodes {
			m[n] = i
		}
		return m
	}
	ap, bp := pos(a), pos(b)
	for i, n := range a {
		o := b[i]
		if n.typ != o.typ {
			return device.GraphUpdateNodeTypeChanged, n
		}
		if len(n.deps) != len(o.deps) {
			return device.GraphUpdateTopologyChanged, n
		}
		for j, d := range n.deps {
			if ap[d] != bp[o.deps[j]] {
				return device.GraphUpdateTopologyChanged, n
			}
		}
		if n.child != nil && o.child != nil {
			if r, _ := sameShape(n.child.nodes, o.child.nodes); r != device.GraphUpdateSuccess {
				return r, n
			}
		}
	}
	return device.GraphUpdateSuccess, nil
}

// waitExternal is CU_EVENT_WAIT_EXTERNAL: a wait a capture holds as a
// wait node.
const waitExternal = 0x1

// eventNodeType is the CUgraphNodeType of an event record or wait node.
func eventNodeType(wait bool) int {
	if wait {
		return device.GraphNodeWaitEvent
	}
	return device.GraphNodeEventRecord
}

// GraphAddEventNode adds a node that records ev, or waits for it.
func (c *Context) GraphAddEventNode(g device.Graph, deps []device.GraphNode, ev device.Event, wait bool) (device.GraphNode, error) {
	op := "cuGraphAddEventRecordNode"
	if wait {
		op = "cuGraphAddEventWaitNode"
	}
	e, err := c.event(op, ev)
	if err != nil {
		return 0, err
	}
	return c.addGraphNode(op, g, deps, &node{typ: eventNodeType(wait), ev: e, evH: ev})
}

// GraphEventNodeEvent reads an event node's event.
func (c *Context) GraphEventNodeEvent(h device.GraphNode, wait bool) (device.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode("cuGraphEventRecordNodeGetEvent", 0, h, eventNodeType(wait))
	if err != nil {
		return 0, err
	}
	if n.ev == nil {
		return 0, errNoParams("cuGraphEventRecordNodeGetEvent")
	}
	return n.evH, nil
}

// GraphEventNodeSetEvent gives an event node (or its copy in x) event ev.
func (c *Context) GraphEventNodeSetEvent(x device.GraphExec, h device.GraphNode, wait bool, ev device.Event) error {
	op := "cuGraphEventRecordNodeSetEvent"
	if x != 0 {
		op = "cuGraphExecEventRecordNodeSetEvent"
	}
	if err := c.broken(op); err != nil {
		return err
	}
	e, err := c.event(op, ev)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, x, h, eventNodeType(wait))
	if err != nil {
		return err
	}
	n.ev, n.evH, n.run = e, ev, nil
	return nil
}

// GraphAddChildGraphNode adds a node running a copy of child.
func (c *Context) GraphAddChildGraphNode(g device.Graph, deps []device.GraphNode, child device.Graph) (device.GraphNode, error) {
	const op = "cuGraphAddChildGraphNode"
	c.mu.Lock()
	cg, ok := c.graphs[child]
	var h device.Graph
	if ok {
		h = c.cloneGraph(cg)
		cg = c.graphs[h]
	}
	c.mu.Unlock()
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(child))
	}
	n, err := c.addGraphNode(op, g, deps, &node{typ: device.GraphNodeGraph, child: cg, childH: h})
	if err != nil {
		c.mu.Lock()
		c.dropGraph(h, cg)
		c.mu.Unlock()
	}
	return n, err
}

// GraphChildGraph is a child graph node's graph.
func (c *Context) GraphChildGraph(h device.GraphNode) (device.Graph, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode("cuGraphChildGraphNodeGetGraph", 0, h, device.GraphNodeGraph)
	if err != nil {
		return 0, err
	}
	return n.childH, nil
}

// GraphExecChildGraphSetParams gives the copy of child graph node h in x
// the nodes of child, a graph of the same shape as the copy's graph.
func (c *Context) GraphExecChildGraphSetParams(x device.GraphExec, h device.GraphNode, child device.Graph) error {
	const op = "cuGraphExecChildGraphNodeSetParams"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, x, h, device.GraphNodeGraph)
	if err != nil {
		return err
	}
	cg, ok := c.graphs[child]
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(child))
	}
	if r, _ := sameShape(cg.nodes, n.child.nodes); r != device.GraphUpdateSuccess {
		// CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, as driver 580 answers on the H100.
		return device.Errorf(op, device.ErrGraphUpdateFailed, "graph %#x differs in shape from the node's (CUgraphExecUpdateResult %d)", uintptr(child), r)
	}
	n.child = instance(cg)
	return nil
}

// nodeAttrs are kernel node n's attributes (c.mu held).
func nodeAttrs(n *node) kernelAttrs {
	if n.attrs == nil {
		return kernelAttrs{streamAttrs: defaultStreamAttrs()}
	}
	return *n.attrs
}

// GraphKernelNodeSetAttribute sets a kernel node's attribute.
func (c *Context) GraphKernelNodeSetAttribute(h device.GraphNode, attr int, v device.StreamAttr) error {
	const op = "cuGraphKernelNodeSetAttribute"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, 0, h, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	a := nodeAttrs(n)
	switch attr {
	case device.StreamAttrSyncPolicy:
		return device.Errorf(op, device.ErrInvalidValue, "the synchronization policy is a stream's attribute, not a kernel node's")
	case device.KernelNodeAttrCooperative:
		if v.Value > 1 {
			return device.Errorf(op, device.ErrInvalidValue, "cooperative %d (0 or 1)", v.Value)
		}
		a.cooperative = v.Value
	default:
		if err := a.set(op, attr, v); err != nil {
			return err
		}
	}
	n.attrs = &a
	return nil
}

// GraphKernelNodeGetAttribute reads a kernel node's attribute.
func (c *Context) GraphKernelNodeGetAttribute(h device.GraphNode, attr int) (device.StreamAttr, error) {
	const op = "cuGraphKernelNodeGetAttribute"
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.paramNode(op, 0, h, device.GraphNodeKernel)
	if err != nil {
		return device.StreamAttr{}, err
	}
	a := nodeAttrs(n)
	switch attr {
	case device.StreamAttrSyncPolicy:
		return device.StreamAttr{}, device.Errorf(op, device.ErrInvalidValue, "the synchronization policy is a stream's attribute, not a kernel node's")
	case device.KernelNodeAttrCooperative:
		return device.StreamAttr{Value: a.cooperative}, nil
	}
	return a.get(op, attr)
}

// GraphKernelNodeCopyAttributes gives kernel node dst src's attributes.
func (c *Context) GraphKernelNodeCopyAttributes(dst, src device.GraphNode) error {
	const op = "cuGraphKernelNodeCopyAttributes"
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.paramNode(op, 0, dst, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	s, err := c.paramNode(op, 0, src, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	d.attrs = s.attrs
	return nil
}

// GraphNodeFindInClone is clone's node copied from h.
func (c *Context) GraphNodeFindInClone(h device.GraphNode, clone device.Graph) (device.GraphNode, error) {
	const op = "cuGraphNodeFindInClone"
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[h]
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	cl, ok := c.graphs[clone]
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidHandle, "graph %#x", uintptr(clone))
	}
	for _, m := range cl.nodes {
		if m.origin == n {
			return m.h, nil
		}
	}
	return 0, device.Errorf(op, device.ErrInvalidValue, "graph %#x is not a clone of node %#x's graph", uintptr(clone), uintptr(h))
}

// enabledNode is the copy in x of h, a kernel, memcpy or memset node (c.mu
// held).
func (c *Context) enabledNode(op string, x device.GraphExec, h device.GraphNode) (*node, error) {
	n, ok := c.nodes[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "graph node %#x", uintptr(h))
	}
	switch n.typ {
	case device.GraphNodeKernel, device.GraphNodeMemcpy, device.GraphNodeMemset:
	default:
		return nil, device.Errorf(op, device.ErrInvalidValue, "node %#x of type %d: only kernel, memcpy and memset nodes are switched on and off", uintptr(h), n.typ)
	}
	return c.paramNode(op, x, h, n.typ)
}

// GraphNodeSetEnabled switches h's copy in x off or on.
func (c *Context) GraphNodeSetEnabled(x device.GraphExec, h device.GraphNode, enabled bool) error {
	const op = "cuGraphNodeSetEnabled"
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.enabledNode(op, x, h)
	if err != nil {
		return err
	}
	m.disabled = !enabled
	return nil
}

// GraphNodeGetEnabled says whether h's copy in x is on.
func (c *Context) GraphNodeGetEnabled(x device.GraphExec, h device.GraphNode) (bool, error) {
	const op = "cuGraphNodeGetEnabled"
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.enabledNode(op, x, h)
	if err != nil {
		return false, err
	}
	return !m.disabled, nil
}
