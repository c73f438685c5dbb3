package sim

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Stream capture and graphs, simulated. A capturing stream records the
// work queued on it (the same closures it would run) instead of running
// it; ending the capture makes a graph of that list, and launching an
// instantiated graph runs the list, in order, as one work item of the
// stream it is launched on. What the simulation leaves out: streams that
// join a capture by waiting for an event recorded in it (they just run),
// and the rules of the legacy NULL stream against capturing streams.

// capture is a capture in progress on one stream.
type capture struct {
	mode    int
	work    []func()
	invalid bool // a call the capture cannot hold was made: ending it fails
}

// graph is a captured or instantiated list of work, shared by its
// instantiations (a graph is immutable once captured here).
type graph struct {
	work []func()
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
	c.graphs[g] = &graph{work: cp.work}
	return g, nil
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
	c.execs[e] = &graph{work: gr.work}
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
	c.mu.Unlock()
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "graph exec %#x", uintptr(e))
	}
	work := gr.work
	_, _, err := c.submit(op, h, func() {
		for _, fn := range work {
			fn()
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
	if _, ok := c.graphs[g]; !ok {
		return device.Errorf("cuGraphDestroy", device.ErrInvalidHandle, "graph %#x", uintptr(g))
	}
	delete(c.graphs, g)
	return nil
}
