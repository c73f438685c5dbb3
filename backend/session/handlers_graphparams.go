package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Node parameters (GRAPH_*_NODE_GET_PARAMS, GRAPH_*_NODE_SET_PARAMS): read
// from a node of one of the session's graphs, set on it or on its copy in
// an executable graph instantiated from that graph (Exec not 0). What a
// node is given is checked as when it was added: a kernel's parameter
// block against the function's layout, device memory against the
// session's allocations, host memory only as pinned regions, which the
// graph (or the executable graph) then holds.

// funcKey is a function as the device knows it.
type funcKey struct {
	dev int
	h   device.Function
}

// funcID returns the session's handle of function h of device dev.
func (s *Session) funcID(op string, dev int, h device.Function) (uint64, error) {
	k := funcKey{dev, h}
	if id, ok := s.st.funcIDs[k]; ok {
		if f, ok := s.st.funcs[id]; ok && f.dev == dev && f.h == h {
			return id, nil
		}
	}
	s.st.funcIDs = make(map[funcKey]uint64, len(s.st.funcs))
	for id, f := range s.st.funcs {
		s.st.funcIDs[funcKey{f.dev, f.h}] = id
	}
	if id, ok := s.st.funcIDs[k]; ok {
		return id, nil
	}
	return 0, device.Errorf(op, device.ErrNotSupported, "the node launches a function this session did not load (it is no longer loaded)")
}

// paramNode resolves a parameter call's node (of one of the session's
// graphs, of CUgraphNodeType typ) and, when exec is not 0, the executable
// graph whose copy of it the call changes (instantiated from the node's
// graph). A node of another type is refused here, whatever the device
// would make of it (typ -1: any type).
func (s *Session) paramNode(op string, node, exec uint64, typ int) (*graphObj, *nodeObj, *execObj, error) {
	n, err := s.node(op, node)
	if err != nil {
		return nil, nil, nil, err
	}
	g := s.st.graphs[n.graph]
	if !n.typed {
		t, err := s.cfg.Devices[g.dev].GraphNodeType(n.h)
		if err != nil {
			return nil, nil, nil, err
		}
		n.typ, n.typed = t, true
	}
	if typ >= 0 && n.typ != typ {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "graph node %#x is of type %d (CUgraphNodeType), not %d", node, n.typ, typ)
	}
	if exec == 0 {
		return g, n, nil, nil
	}
	e, err := s.exec(op, exec)
	if err != nil {
		return nil, nil, nil, err
	}
	if e.graph != n.graph {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "graph node %#x is not of the graph executable graph %#x was instantiated from", node, exec)
	}
	return g, n, e, nil
}

// execOf is e's device handle, or 0 (the graph's node itself).
func execOf(e *execObj) device.GraphExec {
	if e == nil {
		return 0
	}
	return e.h
}

func graphKernelNodeGetParams(s *Session, c *call, r *protocol.HandleReq) error {
	const op = "OpGraphKernelNodeGetParams"
	g, n, _, err := s.paramNode(op, r.Handle, 0, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	k, err := s.cfg.Devices[g.dev].GraphKernelNodeParams(n.h)
	if err != nil {
		return err
	}
	id, err := s.funcID(op, g.dev, k.Func)
	if err != nil {
		return err
	}
	if f := s.st.funcs[id]; uint64(len(k.Params)) != uint64(f.bytes) {
		return device.Errorf(op, device.ErrInvalidValue, "the node's parameter block has %d bytes, the function's layout %d", len(k.Params), f.bytes)
	}
	cfg := k.Config
	rep := protocol.LaunchReq{Func: id, GridX: cfg.Grid[0], GridY: cfg.Grid[1], GridZ: cfg.Grid[2],
		BlockX: cfg.Block[0], BlockY: cfg.Block[1], BlockZ: cfg.Block[2], SharedMem: cfg.SharedMem, ParamSize: uint32(len(k.Params))}
	c.out = protocol.Append(c.out, &rep)
	c.out = append(c.out, k.Params...)
	return nil
}

func graphKernelNodeSetParams(s *Session, c *call, r *protocol.GraphKernelNodeSetReq) error {
	const op = "OpGraphKernelNodeSetParams"
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	l := &r.Launch
	f, err := s.function(op, l.Func)
	if err != nil {
		return err
	}
	if f.dev != g.dev {
		return device.Errorf(op, device.ErrInvalidValue, "kernel of device %d in a graph of device %d", f.dev, g.dev)
	}
	if uint64(l.ParamSize) != uint64(len(c.tail)) || l.ParamSize != f.bytes {
		return device.Errorf(op, device.ErrInvalidValue, "parameter block of %d bytes declared, %d sent, the kernel's layout takes %d", l.ParamSize, len(c.tail), f.bytes)
	}
	k := device.KernelNode{Func: f.h, Params: c.tail, Config: device.LaunchConfig{Grid: [3]uint32{l.GridX, l.GridY, l.GridZ},
		Block: [3]uint32{l.BlockX, l.BlockY, l.BlockZ}, SharedMem: l.SharedMem}}
	return s.cfg.Devices[g.dev].GraphKernelNodeSetParams(execOf(e), n.h, k)
}

func graphMemsetNodeGetParams(s *Session, c *call, r *protocol.HandleReq) (protocol.GraphMemsetParams, error) {
	const op = "OpGraphMemsetNodeGetParams"
	g, n, _, err := s.paramNode(op, r.Handle, 0, device.GraphNodeMemset)
	if err != nil {
		return protocol.GraphMemsetParams{}, err
	}
	m, err := s.cfg.Devices[g.dev].GraphMemsetNodeParams(n.h)
	return protocol.GraphMemsetParams{Dst: uint64(m.Dst), Value: m.Value, ElemSize: uint32(m.ElemSize), Width: m.Width, Height: m.Height, Pitch: m.Pitch}, err
}

func graphMemsetNodeSetParams(s *Session, c *call, r *protocol.GraphMemsetNodeSetReq) error {
	const op = "OpGraphMemsetNodeSetParams"
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, device.GraphNodeMemset)
	if err != nil {
		return err
	}
	p := &r.Params
	height := p.Height
	if height == 1 {
		height = 0 // one row: its pitch is unused
	}
	span, err := memsetSpan(op, p.ElemSize, p.Width, height, p.Pitch)
	if err != nil {
		return err
	}
	m, err := s.st.find(op, p.Dst, span)
	if err != nil {
		return err
	}
	if m.dev != g.dev {
		return device.Errorf(op, device.ErrInvalidValue, "%#x is memory of device %d, the graph is of device %d", p.Dst, m.dev, g.dev)
	}
	return s.cfg.Devices[g.dev].GraphMemsetNodeSetParams(execOf(e), n.h, device.MemsetNode{Dst: device.Ptr(p.Dst), Value: p.Value,
		ElemSize: int(p.ElemSize), Width: p.Width, Height: max(p.Height, 1), Pitch: p.Pitch})
}

// regionOf finds the region whose graph mapping holds host, a device's
// answer about memory the session gave it (graphView), as the guest named
// it: a BufRegion.
func (s *Session) regionOf(op string, host []byte) (protocol.BufRef, error) {
	for id, rg := range s.st.regions {
		for _, m := range [][]byte{rg.mapping, rg.view} {
			if off, ok := within(m, host); ok {
				return protocol.BufRef{Kind: protocol.BufRegion, Region: id, Offset: off, Len: uint64(len(host))}, nil
			}
		}
	}
	return protocol.BufRef{}, device.Errorf(op, device.ErrNotSupported, "the node copies host memory that is not the program's pinned memory (freed, or not given by this session)")
}

func graphMemcpyNodeGetParams(s *Session, c *call, r *protocol.HandleReq) (protocol.GraphMemcpyParams, error) {
	const op = "OpGraphMemcpyNodeGetParams"
	g, n, _, err := s.paramNode(op, r.Handle, 0, device.GraphNodeMemcpy)
	if err != nil {
		return protocol.GraphMemcpyParams{}, err
	}
	cp, err := s.cfg.Devices[g.dev].GraphMemcpyNodeParams(n.h)
	if err != nil {
		return protocol.GraphMemcpyParams{}, err
	}
	rep := protocol.GraphMemcpyParams{Dst: uint64(cp.Dst), Src: uint64(cp.Src)}
	switch {
	case cp.SrcHost != nil && cp.DstHost != nil:
		return protocol.GraphMemcpyParams{}, device.Errorf(op, device.ErrNotSupported, "the node copies host memory to host memory")
	case cp.SrcHost != nil:
		rep.Dir, rep.Src = protocol.GraphCopyHtoD, 0
		rep.Host, err = s.regionOf(op, cp.SrcHost)
	case cp.DstHost != nil:
		rep.Dir, rep.Dst = protocol.GraphCopyDtoH, 0
		rep.Host, err = s.regionOf(op, cp.DstHost)
	default:
		rep.Dir, rep.Size = protocol.GraphCopyDtoD, cp.N
	}
	if err != nil {
		return protocol.GraphMemcpyParams{}, err
	}
	return rep, nil
}

// graphCopy checks a 1D copy of a graph of device dev, as the guest
// names it, and returns it as the device takes it with the region its
// host memory is (nil: none).
func (s *Session) graphCopy(op string, dev int, p *protocol.GraphMemcpyParams) (device.GraphCopy, *region, error) {
	devRange := func(ptr, n uint64) error {
		m, err := s.st.find(op, ptr, n)
		if err == nil && m.dev != dev {
			err = device.Errorf(op, device.ErrInvalidValue, "%#x is memory of device %d, the graph is of device %d", ptr, m.dev, dev)
		}
		return err
	}
	cp := device.GraphCopy{Dst: device.Ptr(p.Dst), Src: device.Ptr(p.Src)}
	var rg *region
	var err error
	switch p.Dir {
	case protocol.GraphCopyHtoD:
		cp.N = p.Host.Len
		cp.Src = 0
		if rg, cp.SrcHost, err = s.graphView(op, p.Host, false); err == nil {
			err = devRange(p.Dst, cp.N)
		}
	case protocol.GraphCopyDtoH:
		cp.N = p.Host.Len
		cp.Dst = 0
		if rg, cp.DstHost, err = s.graphView(op, p.Host, true); err == nil {
			err = devRange(p.Src, cp.N)
		}
	case protocol.GraphCopyDtoD:
		cp.N = p.Size
		if err = devRange(p.Src, cp.N); err == nil {
			err = devRange(p.Dst, cp.N)
		}
	default:
		err = device.Errorf(op, device.ErrInvalidValue, "copy direction %d", p.Dir)
	}
	return cp, rg, err
}

func graphMemcpyNodeSetParams(s *Session, c *call, r *protocol.GraphMemcpyNodeSetReq) error {
	const op = "OpGraphMemcpyNodeSetParams"
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, device.GraphNodeMemcpy)
	if err != nil {
		return err
	}
	cp, rg, err := s.graphCopy(op, g.dev, &r.Params)
	if err != nil {
		return err
	}
	if err := s.cfg.Devices[g.dev].GraphMemcpyNodeSetParams(execOf(e), n.h, cp); err != nil {
		return err
	}
	if rg != nil { // held by what now copies it (an instantiation copies the graph's)
		if e != nil {
			e.regions = s.hold(e.regions, rg)
		} else {
			s.graphHold(g, rg, nil)
		}
	}
	return nil
}

// Kernel node attributes (GRAPH_KERNEL_NODE_{GET,SET}_ATTRIBUTE,
// GRAPH_KERNEL_NODE_COPY_ATTRIBUTES): values as a stream attribute's,
// checked by the validator but for the window's size, which depends on
// the node's device.

func graphKernelNodeGetAttribute(s *Session, c *call, r *protocol.GraphKernelNodeAttrReq) (protocol.StreamAttrValue, error) {
	g, n, _, err := s.paramNode("OpGraphKernelNodeGetAttribute", r.Node, 0, device.GraphNodeKernel)
	if err != nil {
		return protocol.StreamAttrValue{}, err
	}
	v, err := s.cfg.Devices[g.dev].GraphKernelNodeGetAttribute(n.h, int(r.Attr))
	if err != nil {
		return protocol.StreamAttrValue{}, err
	}
	return fromStreamAttr(v), nil
}

func graphKernelNodeSetAttribute(s *Session, c *call, r *protocol.GraphKernelNodeAttrReq) error {
	const op = "OpGraphKernelNodeSetAttribute"
	g, n, _, err := s.paramNode(op, r.Node, 0, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	if r.Attr == device.StreamAttrAccessPolicyWindow {
		if limit := windowLimit(s, g.dev); limit != 0 && r.Value.Window.Bytes > limit {
			return device.Errorf(op, device.ErrInvalidValue, "an access policy window of %d bytes (at most %d on this device)", r.Value.Window.Bytes, limit)
		}
		if err := s.windowMemory(op, r.Value.Window, g.dev); err != nil {
			return err
		}
	}
	return s.cfg.Devices[g.dev].GraphKernelNodeSetAttribute(n.h, int(r.Attr), toStreamAttr(r.Value))
}

func graphKernelNodeCopyAttributes(s *Session, c *call, r *protocol.GraphNodePairReq) error {
	const op = "OpGraphKernelNodeCopyAttributes"
	g, dst, _, err := s.paramNode(op, r.Dst, 0, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	sg, src, _, err := s.paramNode(op, r.Src, 0, device.GraphNodeKernel)
	if err != nil {
		return err
	}
	if sg.dev != g.dev {
		return device.Errorf(op, device.ErrInvalidValue, "a node of device %d to a node of device %d", sg.dev, g.dev)
	}
	return s.cfg.Devices[g.dev].GraphKernelNodeCopyAttributes(dst.h, src.h)
}

func graphNodeFindInClone(s *Session, c *call, r *protocol.GraphNodeFindReq) (protocol.HandleReply, error) {
	const op = "OpGraphNodeFindInClone"
	g, n, _, err := s.paramNode(op, r.Node, 0, -1)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	cg, err := s.graph(op, r.Clone)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if cg.dev != g.dev {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "a graph of device %d is no clone of a graph of device %d", cg.dev, g.dev)
	}
	h, err := s.cfg.Devices[g.dev].GraphNodeFindInClone(n.h, cg.h)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	id, err := s.nodeID(op, r.Clone, cg, h)
	return protocol.HandleReply{Handle: id}, err
}

// enabledNode resolves the executable graph and node of a
// GRAPH_NODE_{SET,GET}_ENABLED.
func (s *Session) enabledNode(op string, r *protocol.GraphNodeEnabledReq) (*graphObj, *nodeObj, *execObj, error) {
	if r.Exec == 0 {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidHandle, "no executable graph named")
	}
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, -1)
	if err != nil {
		return nil, nil, nil, err
	}
	switch n.typ {
	case device.GraphNodeKernel, device.GraphNodeMemcpy, device.GraphNodeMemset:
		return g, n, e, nil
	}
	return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "graph node %#x is of type %d: only kernel, memcpy and memset nodes are switched on and off", r.Node, n.typ)
}

func graphNodeSetEnabled(s *Session, c *call, r *protocol.GraphNodeEnabledReq) error {
	g, n, e, err := s.enabledNode("OpGraphNodeSetEnabled", r)
	if err != nil {
		return err
	}
	return s.cfg.Devices[g.dev].GraphNodeSetEnabled(e.h, n.h, r.Enabled != 0)
}

func graphNodeGetEnabled(s *Session, c *call, r *protocol.GraphNodeEnabledReq) (protocol.GraphNodeEnabledReply, error) {
	g, n, e, err := s.enabledNode("OpGraphNodeGetEnabled", r)
	if err != nil {
		return protocol.GraphNodeEnabledReply{}, err
	}
	on, err := s.cfg.Devices[g.dev].GraphNodeGetEnabled(e.h, n.h)
	if on {
		return protocol.GraphNodeEnabledReply{Enabled: 1}, err
	}
	return protocol.GraphNodeEnabledReply{}, err
}
