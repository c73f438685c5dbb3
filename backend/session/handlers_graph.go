package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Stream capture and graphs: the driver's own capture, on the host. A
// stream the guest captures records, on the device, the work the guest
// queues on it; ending the capture gives a graph, which the guest
// instantiates and launches by the session's handles.
//
// What a capture cannot hold is refused with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) before it reaches the
// device: copies between guest memory and the device (a graph would replay
// them against a staging buffer or a segment list that is gone by then)
// unless the guest memory is pinned (a registered region, on a stream the
// guest began the capture on: handlers_graphnodes.go),
// host functions (the session's callback ids are single-use), and capture
// of the guest's default stream (the legacy stream cannot be captured; a
// per-thread default stream is the session's own stream in a shared
// context). The device captures in relaxed mode (see streamBeginCapture).
// A capturing stream takes no part in the legacy default stream's
// ordering while it captures (defstream.go): its work is not executed
// then.
//
// A call that fails while ordered in a capture invalidates the capture,
// as the driver does natively: the backend's refusals never reach the
// device, and an async call's error reaches the guest only at its next
// synchronizing call, so without this the capture would end with a graph
// that silently lacks the refused work. The stream a call orders its work
// on is noted while a capture is in progress (noteStream); when the call
// fails (captureFailed) the capture is marked invalid, its stream's later
// calls answer CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901), its status
// reads CU_STREAM_CAPTURE_STATUS_INVALIDATED, and END_CAPTURE ends the
// device's capture, destroys its graph and answers 901 (the stream is
// usable again). The failed call's own error is reported as any error of
// its kind (for a queued call, at the next synchronizing call). A stream
// that joined a capture by waiting for an event is not the session's
// record: a call failing on it invalidates the session's captures on its
// device (the driver names no capture here), and while every capture on
// that device is invalidated its later calls answer 901 and its status
// reads invalidated too; with a valid capture beside it they reach the
// device, whose capture END_CAPTURE then discards.

// graph is the session's graph id, or an invalid-handle error of op.
func (s *Session) graph(op string, id uint64) (*graphObj, error) {
	g, ok := s.st.graphs[id]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "graph %#x is not this session's", id)
	}
	return g, nil
}

// exec looks up the session's executable graph id, or says it is not
// this session's (CUDA_ERROR_INVALID_HANDLE, under op).
func (s *Session) exec(op string, id uint64) (*execObj, error) {
	e, ok := s.st.execs[id]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "executable graph %#x is not this session's", id)
	}
	return e, nil
}

// node looks up the session's graph node id, or says it is not this
// session's (CUDA_ERROR_INVALID_HANDLE, under op).
func (s *Session) node(op string, id uint64) (*nodeObj, error) {
	n, ok := s.st.nodes[id]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "graph node %#x is not this session's", id)
	}
	return n, nil
}

type graphObj struct {
	dev int
	h   device.Graph
	// ids are the session's handles of its nodes (handlers_graphnodes.go);
	// regions, the pinned memory its copies use (each once).
	ids     map[device.GraphNode]uint64
	regions []*region
	// events, those its event nodes use (each once); owner, the child
	// graph node whose graph it is (0: the guest's own graph), of graph
	// parent (handlers_graphevents.go).
	events []*eventObj
	owner  uint64
	parent uint64
}

type execObj struct {
	dev     int
	h       device.GraphExec
	regions []*region   // the pinned memory its copies use
	events  []*eventObj // the events its event nodes use
	graph   uint64      // the graph it was instantiated from: its nodes name the copies' (Exec*SetParams)
	flags   uint64      // what it was instantiated with (GRAPH_EXEC_GET_FLAGS)
}

func streamBeginCapture(s *Session, c *call, r *protocol.BeginCaptureReq) error {
	const op = "OpStreamBeginCapture"
	if isDefaultStream(r.Stream) {
		return device.Errorf(op, device.ErrCaptureUnsupported, "the default stream cannot be captured here: capture a stream the program created")
	}
	o, ok := s.st.streams[r.Stream]
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "stream %#x is not this session's", r.Stream)
	}
	if o.capturing {
		return device.Errorf(op, device.ErrIllegalState, "stream %#x is already capturing", r.Stream)
	}
	// Work queued before the capture still precedes the default stream's
	// next work; after this the stream leaves the legacy ordering until
	// the capture ends.
	if set := s.st.dirty[o.dev]; set != nil {
		if _, dirty := set[o]; dirty {
			if _, err := s.defaultStream(o.dev, false); err != nil {
				return err
			}
			if err := s.follow(s.st.defaults[o.dev], o); err != nil {
				return err
			}
			delete(set, o)
		}
	}
	// The device captures in relaxed mode whatever mode the guest asked
	// (its mode was checked): global and thread-local modes forbid
	// "unsafe" calls process-wide or per OS thread, and the backend's
	// threads and process are not the guest's — another stream's
	// synchronous copy, or another guest's in a shared context, would
	// break the capture or fail.
	if err := s.cfg.Devices[o.dev].StreamBeginCapture(o.h, device.CaptureModeRelaxed); err != nil {
		return err
	}
	o.capturing = true
	s.st.captures++
	s.st.capturesOn[o.dev]++
	return nil
}

// endCapture ends o's capture (the driver ends it even when it fails)
// and returns the regions its copies hold (the caller's now).
func (s *Session) endCapture(o *streamObj) (device.Graph, []*region, error) {
	g, err := s.cfg.Devices[o.dev].StreamEndCapture(o.h)
	if o.capturing {
		o.capturing = false
		s.st.captures--
		decrement(s.st.capturesOn, o.dev)
	}
	if o.capInvalid {
		o.capInvalid = false
		decrement(s.st.invalidOn, o.dev)
	}
	rs := o.capRegions
	o.capRegions = nil
	return g, rs, err
}

func streamEndCapture(s *Session, c *call, r *protocol.HandleReq) (protocol.HandleReply, error) {
	const op = "OpStreamEndCapture"
	o, ok := s.st.streams[r.Handle]
	if !ok {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrInvalidHandle, "stream %#x is not this session's", r.Handle)
	}
	if !o.capturing {
		return protocol.HandleReply{}, device.Errorf(op, device.ErrIllegalState, "stream %#x is not capturing", r.Handle)
	}
	invalid := o.capInvalid
	g, rs, err := s.endCapture(o)
	if invalid {
		// The device captured what the backend let through (or failed
		// the end itself, invalidated or unjoined): a graph lacking what
		// failed is nobody's.
		if err == nil {
			_ = s.cfg.Devices[o.dev].GraphDestroy(g)
		}
		err = errCaptureInvalidated(op, r.Handle)
	}
	if err != nil {
		s.unuseRegions(rs)
		return protocol.HandleReply{}, err
	}
	ctx := s.cfg.Devices[o.dev]
	if err := s.newObject(op, len(s.st.graphs)); err != nil {
		_ = ctx.GraphDestroy(g)
		s.unuseRegions(rs)
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	gr := &graphObj{dev: o.dev, h: g, regions: rs}
	s.st.graphs[id] = gr
	if s.st.externalWaits > 0 {
		s.holdCapturedEvents(gr)
		if s.st.captures == 0 {
			s.st.externalWaits = 0
		}
	}
	return protocol.HandleReply{Handle: id}, nil
}

func streamIsCapturing(s *Session, c *call, r *protocol.HandleReq) (protocol.CaptureStatusReply, error) {
	ctx, st, err := s.streamAny(r.Handle, 0, false)
	if err != nil {
		return protocol.CaptureStatusReply{}, err
	}
	status, err := ctx.StreamCaptureStatus(st)
	if o, ok := s.st.streams[r.Handle]; ok && err == nil && status == device.CaptureStatusActive &&
		(o.capInvalid || !o.capturing && s.allInvalid(o.dev)) {
		status = device.CaptureStatusInvalidated
	}
	return protocol.CaptureStatusReply{Status: uint32(status)}, err
}

// noteStream notes stream h as the one the running call orders its work
// on, while a capture is in progress (see the top of this file).
func (s *Session) noteStream(h uint64) {
	if s.st.captures == 0 || isDefaultStream(h) {
		return
	}
	if o, ok := s.st.streams[h]; ok {
		s.st.touched = o
	}
}

// captureFailed invalidates the capture that call op, ordered on stream
// o, failed in (err): o's own, or, where o joined a capture, the
// session's captures on o's device.
func (s *Session) captureFailed(o *streamObj, op protocol.Opcode, err error) {
	if o.capturing {
		s.invalidate(o, op, err)
		return
	}
	status, serr := s.cfg.Devices[o.dev].StreamCaptureStatus(o.h)
	if serr != nil || status == device.CaptureStatusNone {
		return
	}
	for _, c := range s.st.streams {
		if c.capturing && c.dev == o.dev {
			s.invalidate(c, op, err)
		}
	}
}

// invalidate marks o's capture invalidated.
func (s *Session) invalidate(o *streamObj, op protocol.Opcode, err error) {
	if o.capInvalid {
		return
	}
	s.log.Debug("a call failed in a capture: the capture is invalidated", "op", op, "err", err)
	o.capInvalid = true
	s.st.invalidOn[o.dev]++
}

// decrement counts one less of k in m, dropping a count that reaches 0.
func decrement(m map[int]int, k int) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// allInvalid reports whether the session has captures on device dev and
// every one is invalidated.
func (s *Session) allInvalid(dev int) bool {
	n := s.st.invalidOn[dev]
	return n > 0 && n == s.st.capturesOn[dev]
}

// joinedInvalid reports whether o joined a capture (by waiting for an
// event recorded in it) that is invalidated: the device says o is
// capturing, and every capture of the session on o's device is
// invalidated (the driver does not name o's capture here, so with a
// valid one beside it o's calls still go to the device).
func (s *Session) joinedInvalid(o *streamObj) bool {
	if o.capturing || !s.allInvalid(o.dev) {
		return false
	}
	status, err := s.cfg.Devices[o.dev].StreamCaptureStatus(o.h)
	return err == nil && status != device.CaptureStatusNone
}

// errCaptureInvalidated answers a call on a stream whose capture a failed
// call invalidated.
func errCaptureInvalidated(op string, h uint64) error {
	return device.Errorf(op, device.ErrCaptureInvalidated, "the capture of stream %#x was invalidated by a call in it that failed (its error was reported to that call, or to the next synchronizing call): end the capture (cuStreamEndCapture answers this error and no graph), then capture again without the failing call", h)
}

func graphInstantiate(s *Session, c *call, r *protocol.GraphInstantiateReq) (protocol.HandleReply, error) {
	const op = "OpGraphInstantiate"
	g, err := s.graph(op, r.Graph)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if retiredRegion(g.regions) {
		return protocol.HandleReply{}, errFreedPinned(op)
	}
	if err := s.newObject(op, len(s.st.execs)); err != nil {
		return protocol.HandleReply{}, err
	}
	e, err := s.cfg.Devices[g.dev].GraphInstantiate(g.h, r.Flags)
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	rs := append([]*region(nil), g.regions...)
	s.useRegions(rs)
	es := append([]*eventObj(nil), g.events...)
	s.useEvents(es)
	s.st.execs[id] = &execObj{dev: g.dev, h: e, regions: rs, events: es, graph: r.Graph, flags: r.Flags}
	return protocol.HandleReply{Handle: id}, nil
}

func graphLaunch(s *Session, c *call, r *protocol.GraphLaunchReq) error {
	e, err := s.exec("OpGraphLaunch", r.Exec)
	if err != nil {
		return err
	}
	if retiredRegion(e.regions) {
		return errFreedPinned("OpGraphLaunch")
	}
	st, err := s.stream(r.Stream, e.dev, true)
	if err != nil {
		return err
	}
	return s.cfg.Devices[e.dev].GraphLaunch(e.h, st)
}

func graphExecDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	e, err := s.exec("OpGraphExecDestroy", r.Handle)
	if err != nil {
		return err
	}
	delete(s.st.execs, r.Handle)
	s.dropObject()
	err = s.cfg.Devices[e.dev].GraphExecDestroy(e.h)
	s.releaseExecRegions(e)
	s.unuseEvents(e.events)
	e.events = nil
	return err
}

// releaseExecRegions lets go of the regions of a destroyed executable
// graph, once launches already queued are done with them.
func (s *Session) releaseExecRegions(e *execObj) {
	if len(e.regions) == 0 {
		return
	}
	for _, rg := range e.regions {
		if rg.users == 1 && rg.retired {
			_ = s.syncDevice(e.dev) // a queued launch may still copy
			break
		}
	}
	s.unuseRegions(e.regions)
	e.regions = nil
}

// errFreedPinned refuses a graph that copies to or from pinned memory
// the guest has unregistered.
func errFreedPinned(op string) error {
	return device.Errorf(op, device.ErrInvalidValue, "the graph copies to or from pinned host memory the program has freed (cudaFreeHost/cudaHostUnregister): destroy it, or free the memory after the graph")
}

func graphDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	g, err := s.graph("OpGraphDestroy", r.Handle)
	if err != nil {
		return err
	}
	if g.owner != 0 {
		return device.Errorf("OpGraphDestroy", device.ErrInvalidValue, "graph %#x is child graph node %#x's: it goes with the node (cuGraphDestroyNode) or the node's graph", r.Handle, g.owner)
	}
	delete(s.st.graphs, r.Handle)
	s.dropObject()
	err = s.cfg.Devices[g.dev].GraphDestroy(g.h)
	s.forgetGraph(g)
	return err
}

// refuseCaptured refuses what a capture cannot hold (see above) on a
// stream that is capturing, whether the guest began the capture on it or
// it joined one by waiting for an event recorded in it.
func (s *Session) refuseCaptured(op string, ctx device.Context, st device.Stream, what string) error {
	if s.st.captures == 0 {
		return nil
	}
	status, err := ctx.StreamCaptureStatus(st)
	if err != nil || status == device.CaptureStatusNone {
		return nil
	}
	return device.Errorf(op, device.ErrCaptureUnsupported, "%s cannot be captured into a graph (the stream is capturing)", what)
}

// releaseGraphs ends the captures of the session's streams on device dev
// (-1: all) and destroys its executable graphs and graphs.
func (s *Session) releaseGraphs(match func(int) bool) {
	st := &s.st
	for _, o := range st.streams {
		if o.capturing && match(o.dev) {
			g, rs, err := s.endCapture(o)
			if err == nil {
				_ = s.cfg.Devices[o.dev].GraphDestroy(g)
			}
			s.unuseRegions(rs)
		}
	}
	for id, e := range st.execs {
		if match(e.dev) {
			_ = s.cfg.Devices[e.dev].GraphExecDestroy(e.h)
			delete(st.execs, id)
			s.dropObject()
			s.releaseExecRegions(e)
			s.unuseEvents(e.events)
			e.events = nil
		}
	}
	for id, g := range st.graphs {
		if match(g.dev) && g.owner == 0 { // a child graph node's goes with its graph's
			_ = s.cfg.Devices[g.dev].GraphDestroy(g.h)
			delete(st.graphs, id)
			s.dropObject()
			s.forgetGraph(g)
		}
	}
}
