package session

import (
	"encoding/binary"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Edges after the fact (GRAPH_ADD_DEPENDENCIES, GRAPH_REMOVE_DEPENDENCIES,
// GRAPH_GET_EDGES, GRAPH_NODE_GET_DEPENDENCIES) and an executable graph's
// flags (GRAPH_EXEC_GET_FLAGS). Every node named is the session's and of
// the graph named; the nodes a device lists get the session's handles.

// edges resolves a GraphEdgesReq's graph and its (from, to) pairs.
func (s *Session) edges(c *call, op string, r *protocol.GraphEdgesReq) (*graphObj, []device.GraphNode, []device.GraphNode, error) {
	g, err := s.graph(op, r.Graph)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.Count > protocol.MaxGraphEdges || uint64(len(c.tail)) != 16*uint64(r.Count) {
		return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "%d edges declared (at most %d), the tail holds %d bytes", r.Count, protocol.MaxGraphEdges, len(c.tail))
	}
	from, to := make([]device.GraphNode, r.Count), make([]device.GraphNode, r.Count)
	for i := range from {
		for j, out := range []*device.GraphNode{&from[i], &to[i]} {
			id := binary.LittleEndian.Uint64(c.tail[16*i+8*j:])
			n, ok := s.st.nodes[id]
			if !ok || n.graph != r.Graph {
				return nil, nil, nil, device.Errorf(op, device.ErrInvalidValue, "edge %d: %#x is not a node of graph %#x", i, id, r.Graph)
			}
			*out = n.h
		}
	}
	return g, from, to, nil
}

func graphAddDependencies(s *Session, c *call, r *protocol.GraphEdgesReq) error {
	g, from, to, err := s.edges(c, "OpGraphAddDependencies", r)
	if err != nil || len(from) == 0 {
		return err
	}
	return s.cfg.Devices[g.dev].GraphAddDependencies(g.h, from, to)
}

func graphRemoveDependencies(s *Session, c *call, r *protocol.GraphEdgesReq) error {
	g, from, to, err := s.edges(c, "OpGraphRemoveDependencies", r)
	if err != nil || len(from) == 0 {
		return err
	}
	return s.cfg.Devices[g.dev].GraphRemoveDependencies(g.h, from, to)
}

// maxEdgeList bounds the edges one GRAPH_GET_EDGES reply carries.
const maxEdgeList = protocol.MaxGraphNodeList / 2

func graphGetEdges(s *Session, c *call, r *protocol.GraphGetEdgesReq) error {
	const op = "OpGraphGetEdges"
	g, err := s.graph(op, r.Graph)
	if err != nil {
		return err
	}
	from, to, err := s.cfg.Devices[g.dev].GraphEdges(g.h)
	if err != nil {
		return err
	}
	if len(from) != len(to) {
		return device.Errorf(op, device.ErrUnknown, "the device listed %d from nodes for %d to nodes", len(from), len(to))
	}
	if uint64(r.First) > uint64(len(from)) {
		return device.Errorf(op, device.ErrInvalidValue, "from edge %d of %d", r.First, len(from))
	}
	k := min(len(from)-int(r.First), maxEdgeList)
	ids := make([]uint64, 0, 2*k)
	for i := int(r.First); i < int(r.First)+k; i++ {
		for _, h := range []device.GraphNode{from[i], to[i]} {
			id, err := s.nodeID(op, r.Graph, g, h)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
	c.replyNodeIDs(len(from), k, ids)
	return nil
}

func graphNodeGetDependencies(s *Session, c *call, r *protocol.GraphNodeDepsReq) error {
	const op = "OpGraphNodeGetDependencies"
	n, err := s.node(op, r.Node)
	if err != nil {
		return err
	}
	g := s.st.graphs[n.graph]
	nodes, err := s.cfg.Devices[g.dev].GraphNodeDeps(n.h, r.Dependents != 0)
	if err != nil {
		return err
	}
	return s.replyNodeList(c, op, n.graph, g, nodes, r.First)
}

func graphExecGetFlags(s *Session, c *call, r *protocol.HandleReq) (protocol.GraphExecFlagsReply, error) {
	e, err := s.exec("OpGraphExecGetFlags", r.Handle)
	if err != nil {
		return protocol.GraphExecFlagsReply{}, err
	}
	return protocol.GraphExecFlagsReply{Flags: e.flags}, nil
}
