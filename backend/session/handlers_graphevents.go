package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Event nodes (GRAPH_ADD_EVENT_NODE, GRAPH_EVENT_NODE_GET_EVENT,
// GRAPH_EVENT_NODE_SET_EVENT) and child graph nodes (GRAPH_ADD_CHILD_NODE,
// GRAPH_CHILD_NODE_GET_GRAPH, GRAPH_EXEC_CHILD_NODE_SET_PARAMS).
//
// An event a graph's node records or waits for is held by the graph (and
// by each executable graph made of it) as pinned memory is: the guest may
// destroy the event, but the device's event goes with the last graph using
// it, so no launch names an event the driver has freed.
//
// A child graph node holds the device's copy of a graph. Its handle
// (GRAPH_CHILD_NODE_GET_GRAPH) is the session's like any graph's, but it is
// the node's: GRAPH_DESTROY refuses it, and it goes with the node or the
// node's graph. What a child graph holds (pinned memory, events) its
// parents hold too, up to the guest's own graph, so that an executable
// graph made of the parent holds it.

// useEvents and unuseEvents count the graphs and executable graphs using
// events; a retired event (destroyed by the guest) goes with its last.
func (s *Session) useEvents(es []*eventObj) {
	for _, e := range es {
		e.users++
	}
}

func (s *Session) unuseEvents(es []*eventObj) {
	for _, e := range es {
		e.users--
		if e.users == 0 && e.retired {
			_ = s.cfg.Devices[e.dev].EventDestroy(e.h)
		}
	}
}

// holdEvent adds e to a holder's list es unless it is there already.
func holdEvent(es []*eventObj, e *eventObj) []*eventObj {
	for _, o := range es {
		if o == e {
			return es
		}
	}
	e.users++
	return append(es, e)
}

// graphHold makes graph g, and the graphs whose child graph nodes hold it,
// hold region rg and event ev (either may be nil).
func (s *Session) graphHold(g *graphObj, rg *region, ev *eventObj) {
	for depth := 0; g != nil && depth <= len(s.st.graphs); depth++ {
		if rg != nil {
			g.regions = s.hold(g.regions, rg)
		}
		if ev != nil {
			g.events = holdEvent(g.events, ev)
		}
		if g.owner == 0 {
			return
		}
		g = s.st.graphs[g.parent]
	}
}

// eventNodeType is the CUgraphNodeType of an event record (wait 0) or
// wait (1) node.
func eventNodeType(wait uint32) int {
	if wait != 0 {
		return device.GraphNodeWaitEvent
	}
	return device.GraphNodeEventRecord
}

// eventOf resolves event id for a graph of device dev.
func (s *Session) eventOf(op string, id uint64, dev int) (*eventObj, error) {
	e, ok := s.st.events[id]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "event %#x is not this session's", id)
	}
	if e.dev != dev {
		return nil, device.Errorf(op, device.ErrInvalidValue, "event of device %d for a graph of device %d", e.dev, dev)
	}
	return e, nil
}

func graphAddEventNode(s *Session, c *call, r *protocol.GraphAddEventNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddEventNode"
	g, deps, _, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	ev, err := s.eventOf(op, r.Event, g.dev)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := s.cfg.Devices[g.dev].GraphAddEventNode(g.h, deps, ev.h, r.Wait != 0)
	rep, err := s.added(op, r.Graph, g, h, err)
	if err == nil {
		s.graphHold(g, nil, ev)
	}
	return rep, err
}

func graphEventNodeGetEvent(s *Session, c *call, r *protocol.GraphEventNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphEventNodeGetEvent"
	g, n, _, err := s.paramNode(op, r.Node, 0, eventNodeType(r.Wait))
	if err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := s.cfg.Devices[g.dev].GraphEventNodeEvent(n.h, r.Wait != 0)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	for id, e := range s.st.events {
		if e.dev == g.dev && e.h == h {
			return protocol.HandleReply{Handle: id}, nil
		}
	}
	return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "the node's event is not one of this session's (the program destroyed it)")
}

func graphEventNodeSetEvent(s *Session, c *call, r *protocol.GraphEventNodeReq) error {
	const op = "OpGraphEventNodeSetEvent"
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, eventNodeType(r.Wait))
	if err != nil {
		return err
	}
	ev, err := s.eventOf(op, r.Event, g.dev)
	if err != nil {
		return err
	}
	if err := s.cfg.Devices[g.dev].GraphEventNodeSetEvent(execOf(e), n.h, r.Wait != 0, ev.h); err != nil {
		return err
	}
	if e != nil {
		e.events = holdEvent(e.events, ev)
	} else {
		s.graphHold(g, nil, ev)
	}
	return nil
}

func graphAddChildNode(s *Session, c *call, r *protocol.GraphAddChildNodeReq) (protocol.HandleReply, error) {
	const op = "OpGraphAddChildNode"
	g, deps, _, err := s.graphAdd(c, op, r.Graph, r.NumDeps)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	child, err := s.graph(op, r.Child)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if child.dev != g.dev {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidValue, "a graph of device %d in a graph of device %d", child.dev, g.dev)
	}
	if retiredRegion(child.regions) {
		return protocol.HandleReply{}, errFreedPinned(op)
	}
	h, err := s.cfg.Devices[g.dev].GraphAddChildGraphNode(g.h, deps, child.h)
	rep, err := s.added(op, r.Graph, g, h, err)
	if err != nil {
		return rep, err
	}
	// The node's copy copies and records what the child does.
	for _, rg := range child.regions {
		s.graphHold(g, rg, nil)
	}
	for _, ev := range child.events {
		s.graphHold(g, nil, ev)
	}
	return rep, nil
}

func graphChildNodeGetGraph(s *Session, c *call, r *protocol.HandleReq) (protocol.HandleReply, error) {
	const op = "OpGraphChildNodeGetGraph"
	g, n, _, err := s.paramNode(op, r.Handle, 0, device.GraphNodeGraph)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if n.child != 0 {
		return protocol.HandleReply{Handle: n.child}, nil
	}
	h, err := s.cfg.Devices[g.dev].GraphChildGraph(n.h)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject(op, len(s.st.graphs)); err != nil {
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	// Its regions and events are the parent's already (held when the node
	// was added); it holds none of its own until the guest adds nodes.
	s.st.graphs[id] = &graphObj{dev: g.dev, h: h, owner: r.Handle, parent: n.graph}
	n.child = id
	return protocol.HandleReply{Handle: id}, nil
}

func graphExecChildNodeSetParams(s *Session, c *call, r *protocol.GraphExecChildSetReq) error {
	const op = "OpGraphExecChildNodeSetParams"
	g, n, e, err := s.paramNode(op, r.Node, r.Exec, device.GraphNodeGraph)
	if err != nil {
		return err
	}
	if e == nil {
		return device.Errorf(op, device.ErrInvalidHandle, "no executable graph named")
	}
	child, err := s.graph(op, r.Child)
	if err != nil {
		return err
	}
	if child.dev != g.dev {
		return device.Errorf(op, device.ErrInvalidValue, "a graph of device %d for a node of device %d", child.dev, g.dev)
	}
	if retiredRegion(child.regions) {
		return errFreedPinned(op)
	}
	if err := s.cfg.Devices[g.dev].GraphExecChildGraphSetParams(e.h, n.h, child.h); err != nil {
		return err
	}
	for _, rg := range child.regions {
		e.regions = s.hold(e.regions, rg)
	}
	for _, ev := range child.events {
		e.events = holdEvent(e.events, ev)
	}
	return nil
}

// holdCapturedEvents makes a captured graph hold the events its event
// nodes name (a wait captured with CU_EVENT_WAIT_EXTERNAL is such a node).
// Only looked for after such a wait: it costs a device call per node.
func (s *Session) holdCapturedEvents(g *graphObj) {
	ctx := s.cfg.Devices[g.dev]
	nodes, err := ctx.GraphNodes(g.h, false)
	if err != nil {
		return
	}
	for _, n := range nodes {
		t, err := ctx.GraphNodeType(n)
		if err != nil || (t != device.GraphNodeWaitEvent && t != device.GraphNodeEventRecord) {
			continue
		}
		h, err := ctx.GraphEventNodeEvent(n, t == device.GraphNodeWaitEvent)
		if err != nil {
			continue
		}
		for _, e := range s.st.events {
			if e.dev == g.dev && e.h == h {
				g.events = holdEvent(g.events, e)
				break
			}
		}
	}
}
