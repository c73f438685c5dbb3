package session

import (
	"encoding/binary"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/protocol"
)

// Graphs built node by node (GRAPH_CREATE, GRAPH_ADD_*_NODE) and the
// nodes of any graph (GRAPH_GET_NODES, GRAPH_NODE_GET_TYPE). A node's
// handle is the session's, of one graph: it is made when the node is
// added, or when the guest first lists a captured graph's nodes.
//
// Host memory in a graph: a memcpy node (or a copy captured into a graph)
// is replayed at every launch, long after the call that named it, so it
// cannot name a staging buffer or a segment list. It must name pinned
// memory, a registered region (cudaMallocHost, cudaHostAlloc,
// cudaHostRegister: in host mode a shared memfd, in a guest pages vgpu.ko
// keeps pinned), and the node gets the backend's own mapping of it,
// registered with the device (graphView). Anything else is
// CUDA_ERROR_NOT_SUPPORTED. A region a graph or executable graph uses is
// held: unregistering it hides it from the guest at once, but its mapping
// goes only with the last graph using it, and a graph using a region the
// guest unregistered is refused at launch (it would copy to or from
// memory the program freed).

// errPageable is the answer to host memory in a graph that is not pinned.
func errPageable(op string) error {
	return device.Errorf(op, device.ErrNotSupported, "graph memcpy nodes need pinned host memory (cudaMallocHost/cudaHostRegister): pageable memory cannot be copied by a graph on vgpu")
}

// nodeObj is a node of graph graph.
type nodeObj struct {
	graph uint64
	h     device.GraphNode
	child uint64 // a child graph node: the handle of its graph, once the guest asked for it
	// typ is its CUgraphNodeType once asked (typed), which never changes.
	typ   int
	typed bool
}

// graphView returns [off, off+n) of region ref.Region as one slice of the
// backend's memory that the device knows as registered host memory: the
// region's own mapping when it has one (RegisterMapped), else a mapping
// made for graphs on first use and kept with the region.
func (s *Session) graphView(op string, ref protocol.BufRef, write bool) (*region, []byte, error) {
	if ref.Kind != protocol.BufRegion {
		return nil, nil, errPageable(op)
	}
	rg, ok := s.st.regions[ref.Region]
	if !ok {
		return nil, nil, device.Errorf(op, device.ErrInvalidValue, "region %#x is not this session's pinned memory (freed or never registered)", ref.Region)
	}
	if ref.Len == 0 || ref.Offset > rg.size || ref.Len > rg.size-ref.Offset {
		return nil, nil, device.Errorf(op, device.ErrInvalidValue, "[%d, +%d) outside region %#x of %d bytes", ref.Offset, ref.Len, ref.Region, rg.size)
	}
	if write && rg.readOnly {
		return nil, nil, device.Errorf(op, device.ErrInvalidValue, "region %#x was registered read-only", ref.Region)
	}
	m := rg.mapping
	if m == nil {
		if rg.view == nil {
			n := mappingRuns(rg.pieces)
			if err := s.pool.Take(budget.Mappings, n); err != nil {
				return nil, nil, device.Errorf(op, device.ErrOutOfMemory, "mapping pinned memory for a graph (%d runs): %v", n, err)
			}
			v, err := mapPieces(rg.pieces)
			if err != nil {
				s.pool.Give(budget.Mappings, n)
				return nil, nil, err
			}
			if _, err := s.cfg.Devices[rg.dev].HostRegister(v, rg.readOnly); err != nil {
				unmap(v)
				s.pool.Give(budget.Mappings, n)
				return nil, nil, err
			}
			rg.view, rg.viewMaps = v, n
		}
		m = rg.view
	}
	return rg, m[ref.Offset : ref.Offset+ref.Len : ref.Offset+ref.Len], nil
}

// useRegions and unuseRegions count the graphs, executable graphs and
// captures that hold regions (each holds a region once, whatever number
// of its copies use it: hold); a region the guest unregistered goes with
// its last user.
func (s *Session) useRegions(rs []*region) {
	for _, rg := range rs {
		rg.users++
	}
}

// hold adds rg to a holder's list rs unless it is there already.
func (s *Session) hold(rs []*region, rg *region) []*region {
	for _, r := range rs {
		if r == rg {
			return rs
		}
	}
	rg.users++
	return append(rs, rg)
}

func (s *Session) unuseRegions(rs []*region) {
	for _, rg := range rs {
		rg.users--
		if rg.users == 0 && rg.retired {
			s.dropRegion(rg.id, rg)
		}
	}
}

// retiredRegion says whether any of rs was unregistered by the guest.
func retiredRegion(rs []*region) bool {
	for _, rg := range rs {
		if rg.retired {
			return true
		}
	}
	return false
}

func graphCreate(s *Session, c *call, r *protocol.GraphCreateReq) (protocol.HandleReply, error) {
	const op = "OpGraphCreate"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject(op, len(s.st.graphs)); err != nil {
		return protocol.HandleReply{}, err
	}
	g, err := ctx.GraphCreate()
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.graphs[id] = &graphObj{dev: int(r.Device), h: g}
	return protocol.HandleReply{Handle: id}, nil
}

// nodeID returns the session's handle of node h of graph id (made on
// first use).
func (s *Session) nodeID(op string, id uint64, g *graphObj, h device.GraphNode) (uint64, error) {
	if n, ok := g.ids[h]; ok {
		return n, nil
	}
	if err := room(op, len(s.st.nodes)); err != nil {
		return 0, err
	}
	n := s.st.handle()
	if g.ids == nil {
		g.ids = map[device.GraphNode]uint64{}
	}
	g.ids[h] = n
	s.st.nodes[n] = &nodeObj{graph: id, h: h}
	return n, nil
}

func graphGetNodes(s *Session, c *call, r *protocol.GraphNodesReq) error {
	const op = "OpGraphGetNodes"
	g, err := s.graph(op, r.Graph)
	if err != nil {
		return err
	}
	nodes, err := s.cfg.Devices[g.dev].GraphNodes(g.h, r.Roots != 0)
	if err != nil {
		return err
	}
	return s.replyNodeList(c, op, r.Graph, g, nodes, r.First)
}

// replyNodeList answers a listing call with nodes[first:] of graph id (at
// most MaxGraphNodeList of them), as the session's node ids.
func (s *Session) replyNodeList(c *call, op string, id uint64, g *graphObj, nodes []device.GraphNode, first uint32) error {
	if uint64(first) > uint64(len(nodes)) {
		return device.Errorf(op, device.ErrInvalidValue, "from node %d of %d", first, len(nodes))
	}
	rest := nodes[first:]
	rest = rest[:min(len(rest), protocol.MaxGraphNodeList)]
	ids := make([]uint64, len(rest))
	for i, h := range rest {
		var err error
		if ids[i], err = s.nodeID(op, id, g, h); err != nil {
			return err
		}
	}
	c.replyNodeIDs(len(nodes), len(rest), ids)
	return nil
}

// replyNodeIDs writes a GraphNodesReply of count items out of total, then
// ids.
func (c *call) replyNodeIDs(total, count int, ids []uint64) {
	rep := protocol.GraphNodesReply{Total: uint32(total), Count: uint32(count)}
	c.out = protocol.Append(c.out, &rep)
	for _, id := range ids {
		c.out = binary.LittleEndian.AppendUint64(c.out, id)
	}
}

func graphNodeGetType(s *Session, c *call, r *protocol.HandleReq) (protocol.GraphNodeTypeReply, error) {
	const op = "OpGraphNodeGetType"
	n, err := s.node(op, r.Handle)
	if err != nil {
		return protocol.GraphNodeTypeReply{}, err
	}
	g := s.st.graphs[n.graph]
	t, err := s.cfg.Devices[g.dev].GraphNodeType(n.h)
	return protocol.GraphNodeTypeReply{Type: uint32(t)}, err
}

// graphAdd resolves the graph and the dependencies (the first numDeps
// node handles of the tail) of a node to add, and returns the rest of the
// tail.
func (s *Session) graphAdd(c *call, op string, graph uint64, numDeps uint32) (*graphObj, []device.GraphNode, []byte, error) {
	g, err := s.graph(op, graph)
	if err != nil {
		return nil, nil, nil, err
	}
	if numDeps > protocol.MaxGraphDeps || uint64(numDeps)*8 > uint64(len(c.tail)) {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "%d dependencies declared, the tail holds %d bytes (at most %d)", numDeps, len(c.tail), protocol.MaxGraphDeps)
	}
	if err := room(op, len(s.st.nodes)); err != nil {
		return nil, nil, nil, err
	}
	var deps []device.GraphNode
	for i := uint32(0); i < numDeps; i++ {
		id := binary.LittleEndian.Uint64(c.tail[8*i:])
		n, ok := s.st.nodes[id]
		if !ok || n.graph != graph {
			return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "dependency %d (%#x) is not a node of graph %#x", i, id, graph)
		}
		for _, d := range deps {
			if d == n.h {
				return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "dependency %d (%#x) is listed twice", i, id)
			}
		}
		deps = append(deps, n.h)
	}
	return g, deps, c.tail[8*numDeps:], nil
}

// added gives a new node of graph its handle, and the graph the regions
// it holds.
func (s *Session) added(op string, graph uint64, g *graphObj, h device.GraphNode, err error, rs ...*region) (protocol.HandleReply, error) {
	if err != nil {
		return protocol.HandleReply{}, err
	}
	id, err := s.nodeID(op, graph, g, h)
	if err != nil {
		return protocol.HandleReply{}, err // the node stays in the device's graph, without a handle
	}
	for _, rg := range rs {
		s.graphHold(g, rg, nil)
	}
	return protocol.HandleReply{Handle: id}, nil
}

func graphAddKernelNode(s *Session, c *call, r *protocol.GraphAddKernelNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddKernelNode"
	g, deps, params, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	l := &r.Launch
	f, err := s.function(op, l.Func)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if f.dev != g.dev {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "kernel of device %d in a graph of device %d", f.dev, g.dev)
	}
	if uint64(l.ParamSize) != uint64(len(params)) || l.ParamSize != f.bytes {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "parameter block of %d bytes declared, %d sent, the kernel's layout takes %d", l.ParamSize, len(params), f.bytes)
	}
	cfg := device.LaunchConfig{Grid: [3]uint32{l.GridX, l.GridY, l.GridZ}, Block: [3]uint32{l.BlockX, l.BlockY, l.BlockZ}, SharedMem: l.SharedMem}
	h, err := s.cfg.Devices[g.dev].GraphAddKernelNode(g.h, deps, f.h, cfg, params)
	return s.added(op, r.Graph, g, h, err)
}

func graphAddMemcpyNode(s *Session, c *call, r *protocol.GraphAddMemcpyNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddMemcpyNode"
	g, deps, _, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	cp, rg, err := s.graphCopy(op, g.dev, r.Params())
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := s.cfg.Devices[g.dev].GraphAddMemcpyNode(g.h, deps, cp)
	if rg == nil {
		return s.added(op, r.Graph, g, h, err)
	}
	return s.added(op, r.Graph, g, h, err, rg)
}

func graphAddMemsetNode(s *Session, c *call, r *protocol.GraphAddMemsetNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddMemsetNode"
	g, deps, _, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	height := r.Height
	if height == 1 {
		height = 0 // one row: its pitch is unused (cudaMemset's 1D nodes leave it 0)
	}
	span, err := memsetSpan(op, r.ElemSize, r.Width, height, r.Pitch)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	m, err := s.st.find(op, r.Dst, span)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if m.dev != g.dev {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "%#x is memory of device %d, the graph is of device %d", r.Dst, m.dev, g.dev)
	}
	h, err := s.cfg.Devices[g.dev].GraphAddMemsetNode(g.h, deps, device.Ptr(r.Dst), r.Value, int(r.ElemSize), r.Width, max(r.Height, 1), r.Pitch)
	return s.added(op, r.Graph, g, h, err)
}

func graphAddEmptyNode(s *Session, c *call, r *protocol.GraphAddEmptyNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddEmptyNode"
	g, deps, _, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := s.cfg.Devices[g.dev].GraphAddEmptyNode(g.h, deps)
	return s.added(op, r.Graph, g, h, err)
}

// forgetGraph drops graph id's node handles, the graphs of its child
// graph nodes (the device's go with the graph) and its hold on regions
// and events.
func (s *Session) forgetGraph(g *graphObj) {
	for _, n := range g.ids {
		s.forgetNode(n)
	}
	g.ids = nil
	s.unuseRegions(g.regions)
	g.regions = nil
	s.unuseEvents(g.events)
	g.events = nil
}

// forgetNode drops node handle id and, for a child graph node, its
// graph's handle (whose device graph goes with the node).
func (s *Session) forgetNode(id uint64) {
	n, ok := s.st.nodes[id]
	if !ok {
		return
	}
	delete(s.st.nodes, id)
	if cg, ok := s.st.graphs[n.child]; ok && n.child != 0 {
		delete(s.st.graphs, n.child)
		s.dropObject()
		s.forgetGraph(cg)
	}
}

// captureOf returns stream h if the guest began a capture on it.
func (s *Session) captureOf(h uint64) *streamObj {
	if s.st.captures == 0 {
		return nil
	}
	if o, ok := s.st.streams[h]; ok && o.capturing {
		return o
	}
	return nil
}

// captureCopy records a copy between device memory at dev and pinned
// memory (a region) into o's capture: the graph copies the backend's
// mapping of the region at each launch (graphView), and holds the region.
func (s *Session) captureCopy(o *streamObj, ctx device.Context, st device.Stream, dir engine.Dir, dev uint64, ref protocol.BufRef) error {
	op := "OpMemcpyHtoD"
	if dir == engine.DtoH {
		op = "OpMemcpyDtoH"
	}
	rg, host, err := s.graphView(op, ref, dir == engine.DtoH)
	if err != nil {
		return err
	}
	if dir == engine.HtoD {
		err = ctx.MemcpyHtoD(device.Ptr(dev), host, st, true)
	} else {
		err = ctx.MemcpyDtoH(host, device.Ptr(dev), st, true)
	}
	if err != nil {
		return err
	}
	o.capRegions = s.hold(o.capRegions, rg)
	return nil
}

func graphClone(s *Session, c *call, r *protocol.HandleReq) (protocol.HandleReply, error) {
	const op = "OpGraphClone"
	g, err := s.graph(op, r.Handle)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject(op, len(s.st.graphs)); err != nil {
		return protocol.HandleReply{}, err
	}
	ctx := s.cfg.Devices[g.dev]
	h, err := ctx.GraphClone(g.h)
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	rs := append([]*region(nil), g.regions...) // the clone's copies use them too
	s.useRegions(rs)
	es := append([]*eventObj(nil), g.events...)
	s.useEvents(es)
	s.st.graphs[id] = &graphObj{dev: g.dev, h: h, regions: rs, events: es}
	return protocol.HandleReply{Handle: id}, nil
}

func graphDestroyNode(s *Session, c *call, r *protocol.HandleReq) error {
	const op = "OpGraphDestroyNode"
	n, err := s.node(op, r.Handle)
	if err != nil {
		return err
	}
	g := s.st.graphs[n.graph]
	if err := s.cfg.Devices[g.dev].GraphDestroyNode(n.h); err != nil {
		return err
	}
	// The graph keeps its hold on regions and events until it goes (a
	// hold per node is not tracked).
	delete(g.ids, n.h)
	s.forgetNode(r.Handle)
	return nil
}

func graphUpload(s *Session, c *call, r *protocol.GraphLaunchReq) error {
	e, err := s.exec("OpGraphUpload", r.Exec)
	if err != nil {
		return err
	}
	st, err := s.stream(r.Stream, e.dev, true)
	if err != nil {
		return err
	}
	return s.cfg.Devices[e.dev].GraphUpload(e.h, st)
}

func graphExecUpdate(s *Session, c *call, r *protocol.GraphExecUpdateReq) (protocol.GraphExecUpdateReply, error) {
	const op = "OpGraphExecUpdate"
	e, err := s.exec(op, r.Exec)
	if err != nil {
		return protocol.GraphExecUpdateReply{}, err
	}
	g, err := s.graph(op, r.Graph)
	if err != nil {
		return protocol.GraphExecUpdateReply{}, err
	}
	if g.dev != e.dev {
		return protocol.GraphExecUpdateReply{}, device.Errorf(op, device.ErrInvalidValue, "a graph of device %d for an executable graph of device %d", g.dev, e.dev)
	}
	if retiredRegion(g.regions) {
		return protocol.GraphExecUpdateReply{}, errFreedPinned(op)
	}
	result, node, err := s.cfg.Devices[e.dev].GraphExecUpdate(e.h, g.h)
	if err != nil {
		return protocol.GraphExecUpdateReply{}, err
	}
	rep := protocol.GraphExecUpdateReply{Result: uint32(result)}
	if node != 0 {
		if id, err := s.nodeID(op, r.Graph, g, node); err == nil {
			rep.ErrorNode = id
		}
	}
	if result == device.GraphUpdateSuccess {
		// The executable graph now copies what the graph's nodes copy.
		rs := append([]*region(nil), g.regions...)
		s.useRegions(rs)
		old := e.regions
		e.regions = rs
		s.releaseExecRegions(&execObj{dev: e.dev, regions: old})
		es := append([]*eventObj(nil), g.events...)
		s.useEvents(es)
		s.unuseEvents(e.events)
		e.events = es
	}
	return rep, nil
}
