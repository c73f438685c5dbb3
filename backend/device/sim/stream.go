package sim

import (
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
)

// cuStreamCreate / cuEventCreate flags (cuda.h).
const (
	streamNonBlocking   = 0x1
	eventDisableTiming  = 0x2
	eventValidFlags     = 0x1 | 0x2 | 0x4 // BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS
	streamValidFlags    = 0x1
	stateQueueCapHint   = 64
	defaultStreamHandle = device.DefaultStream
)

// maxQueued is how much work a stream holds not yet started: enqueueing
// more waits until the stream runs some, as the driver's launch waits when
// its push buffer is full. Without it a client launching faster than the
// stream ran (kernels cost the sim nothing, but a host function or an
// event wait can hold a stream) grew the backend without limit: 7.5 GB in
// a minute of BenchmarkHotPath's batched launches. A variable for tests.
var maxQueued = 1 << 16

// stream runs its work, in order, on one goroutine.
type stream struct {
	c       *Context
	flags   uint32
	mu      sync.Mutex
	cond    sync.Cond
	q       []func()
	seq     uint64 // work items enqueued
	done    uint64 // work items finished
	closed  bool
	stopped bool
	cap     *capture    // a capture in progress (graph.go)
	attrs   streamAttrs // streamattr.go; under c.mu
}

func newStream(c *Context, flags uint32) *stream {
	s := &stream{c: c, flags: flags, q: make([]func(), 0, stateQueueCapHint), attrs: defaultStreamAttrs()}
	s.cond.L = &s.mu
	go s.loop()
	return s
}

func (s *stream) loop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.q) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.q) == 0 {
			s.stopped = true
			s.cond.Broadcast()
			return
		}
		fn := s.q[0]
		s.q[0] = nil
		s.q = s.q[1:]
		if len(s.q)+1 >= maxQueued {
			s.cond.Broadcast() // room for an enqueue that waits
		}
		s.mu.Unlock()
		fn()
		s.mu.Lock()
		s.done++
		s.cond.Broadcast()
	}
}

// enqueue appends fn and returns its sequence number, waiting while the
// stream holds maxQueued items not yet started.
func (s *stream) enqueue(fn func()) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.q) >= maxQueued && !s.closed {
		s.cond.Wait()
	}
	s.q = append(s.q, fn)
	s.seq++
	s.cond.Broadcast()
	return s.seq
}

// waitFor blocks until work item n has finished.
func (s *stream) waitFor(n uint64) {
	s.mu.Lock()
	for s.done < n && !s.stopped {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (s *stream) mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

func (s *stream) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done == s.seq
}

// close lets the goroutine finish the queued work and exit.
func (s *stream) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (c *Context) closeStreams() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.streams {
		s.close()
	}
	c.nullStrm.close()
}

func (c *Context) stream(op string, h device.Stream) (*stream, error) {
	if h == defaultStreamHandle {
		return c.nullStrm, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.streams[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "stream %#x", uintptr(h))
	}
	return s, nil
}

// submit enqueues fn on stream h with the legacy default stream's implicit
// synchronisation: work on the NULL stream waits for earlier work on every
// blocking stream, and work on a blocking stream waits for earlier NULL-stream
// work. It returns the stream and fn's sequence number.
func (c *Context) submit(op string, h device.Stream, fn func()) (*stream, uint64, error) {
	return c.submitNode(op, h, fn, nil)
}

// submitNode is submit, with what a capture's node keeps of the work
// (its parameters, which GraphKernelNodeParams reads): tmpl, or nothing.
func (c *Context) submitNode(op string, h device.Stream, fn func(), tmpl *node) (*stream, uint64, error) {
	s, err := c.stream(op, h)
	if err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	if s.cap != nil { // recorded, not run (graph.go)
		s.cap.record(op, fn, tmpl)
		s.mu.Unlock()
		return s, 0, nil
	}
	s.mu.Unlock()
	type point struct {
		s *stream
		n uint64
	}
	var waits []point
	if s == c.nullStrm {
		c.mu.Lock()
		for _, o := range c.streams {
			if o.flags&streamNonBlocking == 0 && !o.idle() {
				waits = append(waits, point{o, o.mark()})
			}
		}
		c.mu.Unlock()
	} else if s.flags&streamNonBlocking == 0 && !c.nullStrm.idle() {
		waits = append(waits, point{c.nullStrm, c.nullStrm.mark()})
	}
	work := fn
	if len(waits) > 0 {
		work = func() {
			for _, w := range waits {
				w.s.waitFor(w.n)
			}
			fn()
		}
	}
	return s, s.enqueue(work), nil
}

// run submits fn, a copy or memset that has no effect once the process has
// a sticky error; a synchronous call waits for it and reports that error.
func (c *Context) run(op string, h device.Stream, async bool, fn func()) error {
	if err := c.broken(op); err != nil {
		return err
	}
	if !async {
		if s, err := c.stream(op, h); err == nil && s.invalidate() {
			return errCapturing(op)
		}
	}
	s, n, err := c.submit(op, h, func() {
		if c.healthy() {
			fn()
		}
	})
	if err != nil {
		return err
	}
	if !async {
		s.waitFor(n)
		return c.broken(op)
	}
	return nil
}

// StreamCreate creates a stream; its priority (clamped to the device's
// range) is an attribute it keeps, the simulated device schedules every
// stream alike.
func (c *Context) StreamCreate(flags uint32, priority int32) (device.Stream, error) {
	if err := c.broken("cuStreamCreate"); err != nil {
		return 0, err
	}
	if flags&^streamValidFlags != 0 {
		return 0, device.Errorf("cuStreamCreate", device.ErrInvalidValue, "flags %#x", flags)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := device.Stream(c.newHandle())
	st := newStream(c, flags)
	st.attrs.priority = clampPriority(priority)
	c.streams[h] = st
	return h, nil
}

// StreamDestroy destroys a stream; queued work still completes.
func (c *Context) StreamDestroy(h device.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.streams[h]
	if !ok {
		return device.Errorf("cuStreamDestroy", device.ErrInvalidHandle, "stream %#x", uintptr(h))
	}
	delete(c.streams, h)
	s.close()
	return c.broken("cuStreamDestroy")
}

// StreamSynchronize waits for the stream's work.
func (c *Context) StreamSynchronize(h device.Stream) error {
	s, err := c.stream("cuStreamSynchronize", h)
	if err != nil {
		return err
	}
	if s.invalidate() {
		return errCapturing("cuStreamSynchronize")
	}
	s.waitFor(s.mark())
	return c.broken("cuStreamSynchronize")
}

// StreamQuery reports whether the stream is idle.
func (c *Context) StreamQuery(h device.Stream) error {
	s, err := c.stream("cuStreamQuery", h)
	if err != nil {
		return err
	}
	if s.invalidate() {
		return errCapturing("cuStreamQuery")
	}
	if err := c.broken("cuStreamQuery"); err != nil {
		return err
	}
	if !s.idle() {
		return &device.Error{Op: "cuStreamQuery", Result: device.ErrNotReady}
	}
	return nil
}

// StreamWaitEvent makes the stream wait for the event's latest record.
func (c *Context) StreamWaitEvent(h device.Stream, e device.Event, flags uint32) error {
	if err := c.broken("cuStreamWaitEvent"); err != nil {
		return err
	}
	ev, err := c.event("cuStreamWaitEvent", e)
	if err != nil {
		return err
	}
	done := ev.current()
	var tmpl *node
	if flags&waitExternal != 0 { // captured: a wait node of ev, waiting for it at each launch
		tmpl = &node{ev: ev, evH: e}
	}
	_, _, err = c.submitNode("cuStreamWaitEvent", h, func() { <-done }, tmpl)
	return err
}

// LaunchHostFunc runs fn in stream order.
func (c *Context) LaunchHostFunc(h device.Stream, fn func()) error {
	if err := c.broken("cuLaunchHostFunc"); err != nil {
		return err
	}
	_, _, err := c.submit("cuLaunchHostFunc", h, fn)
	return err
}

// Synchronize waits for every stream.
func (c *Context) Synchronize() error {
	c.mu.Lock()
	ss := []*stream{c.nullStrm}
	for _, s := range c.streams {
		ss = append(ss, s)
	}
	c.mu.Unlock()
	for _, s := range ss {
		s.waitFor(s.mark())
	}
	return c.broken("cuCtxSynchronize")
}

// event is a point in a stream; done is closed when the latest record
// completes (initially closed: an unrecorded event counts as complete).
type event struct {
	flags    uint32
	mu       sync.Mutex
	done     chan struct{}
	at       time.Time
	recorded bool
}

func (e *event) current() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

func (c *Context) event(op string, h device.Event) (*event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.events[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "event %#x", uintptr(h))
	}
	return e, nil
}

// EventCreate creates an event.
func (c *Context) EventCreate(flags uint32) (device.Event, error) {
	if err := c.broken("cuEventCreate"); err != nil {
		return 0, err
	}
	if flags&^eventValidFlags != 0 {
		return 0, device.Errorf("cuEventCreate", device.ErrInvalidValue, "flags %#x", flags)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := device.Event(c.newHandle())
	done := make(chan struct{})
	close(done)
	c.events[h] = &event{flags: flags, done: done}
	return h, nil
}

// EventDestroy destroys an event.
func (c *Context) EventDestroy(h device.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.events[h]; !ok {
		return device.Errorf("cuEventDestroy", device.ErrInvalidHandle, "event %#x", uintptr(h))
	}
	delete(c.events, h)
	return c.broken("cuEventDestroy")
}

// EventRecord records the event on a stream: it completes, with a
// timestamp, when the stream reaches it.
func (c *Context) EventRecord(h device.Event, s device.Stream) error {
	if err := c.broken("cuEventRecord"); err != nil {
		return err
	}
	e, err := c.event("cuEventRecord", h)
	if err != nil {
		return err
	}
	if st, err := c.stream("cuEventRecord", s); err == nil && st.capturing() != nil {
		// A record node: each launch of the graph stamps the event; the
		// event's completion is not tied to the capture (no joins here).
		_, _, err = c.submit("cuEventRecord", s, func() {
			e.mu.Lock()
			e.at = time.Now()
			e.recorded = true
			e.mu.Unlock()
		})
		return err
	}
	done := make(chan struct{})
	e.mu.Lock()
	e.done = done
	e.mu.Unlock()
	_, _, err = c.submit("cuEventRecord", s, func() {
		e.mu.Lock()
		e.at = time.Now()
		e.recorded = true
		e.mu.Unlock()
		close(done)
	})
	return err
}

// EventSynchronize waits for the event's latest record.
func (c *Context) EventSynchronize(h device.Event) error {
	e, err := c.event("cuEventSynchronize", h)
	if err != nil {
		return err
	}
	<-e.current()
	return c.broken("cuEventSynchronize")
}

// EventQuery reports whether the event's latest record has completed.
func (c *Context) EventQuery(h device.Event) error {
	e, err := c.event("cuEventQuery", h)
	if err != nil {
		return err
	}
	if err := c.broken("cuEventQuery"); err != nil {
		return err
	}
	select {
	case <-e.current():
		return nil
	default:
		return &device.Error{Op: "cuEventQuery", Result: device.ErrNotReady}
	}
}

// EventElapsed returns the milliseconds between two completed records.
func (c *Context) EventElapsed(start, end device.Event) (float32, error) {
	if err := c.broken("cuEventElapsedTime"); err != nil {
		return 0, err
	}
	a, err := c.event("cuEventElapsedTime", start)
	if err != nil {
		return 0, err
	}
	b, err := c.event("cuEventElapsedTime", end)
	if err != nil {
		return 0, err
	}
	if a.flags&eventDisableTiming != 0 || b.flags&eventDisableTiming != 0 {
		return 0, device.Errorf("cuEventElapsedTime", device.ErrInvalidHandle, "event created with CU_EVENT_DISABLE_TIMING")
	}
	for _, e := range []*event{a, b} {
		select {
		case <-e.current():
		default:
			return 0, &device.Error{Op: "cuEventElapsedTime", Result: device.ErrNotReady}
		}
	}
	a.mu.Lock()
	ta, ra := a.at, a.recorded
	a.mu.Unlock()
	b.mu.Lock()
	tb, rb := b.at, b.recorded
	b.mu.Unlock()
	if !ra || !rb {
		return 0, device.Errorf("cuEventElapsedTime", device.ErrInvalidHandle, "event never recorded")
	}
	return float32(tb.Sub(ta).Seconds() * 1000), nil
}
