package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Streams, and the guest's default stream.
//
// A session that owns its context (Config.ExclusiveContext: a worker
// process per guest process) gives the guest the context's own legacy NULL
// stream, as a native process has. Sessions that share a context must not:
// the NULL stream is the context's, so one guest's work on it (a host
// function it never answers, a wait for an event that never completes)
// would hold every other guest's synchronous calls (issue 20, item 2).
// There each session gets a default stream of its own per device, and the
// legacy stream's rules are kept among that session's streams only:
//
//   - the guest's streams are created non-blocking on the device (so they
//     never wait for the context's NULL stream, which nobody uses), and
//     the session remembers which ones the guest asked to be blocking;
//   - work queued on the default stream first waits for the work queued
//     so far on the session's blocking streams of that device, and work
//     queued on a blocking stream first waits for the default stream's
//     (an event recorded on one, waited for on the other, only when the
//     other has had work since the last such join);
//   - a synchronous call is issued on the session's stream and waited for
//     there (the driver's synchronous calls would use the NULL stream);
//   - DEVICE_SYNCHRONIZE waits for the session's own streams, not the
//     context (cuCtxSynchronize would wait for every guest).
//
// What stays shared: calls the driver itself synchronises (cuMemFree and
// cuModuleUnload may wait for the whole context, for example), so there a
// stalled stream of one guest can still delay another's call; the
// host-function deadline bounds that delay.

// cuStreamCreate and cuEventCreate flags (cuda.h).
const (
	streamNonBlocking  = 0x1
	eventDisableTiming = 0x2
)

// isDefaultStream: 0 (NULL), CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2).
func isDefaultStream(h uint64) bool { return h <= 2 }

// sharedContext reports sessions that emulate the default stream.
func (s *Session) sharedContext() bool { return !s.cfg.ExclusiveContext }

// stream resolves a stream handle for work on device dev; enqueue says the
// caller queues work on it next (the legacy ordering is applied first).
func (s *Session) stream(h uint64, dev int, enqueue bool) (device.Stream, error) {
	if isDefaultStream(h) {
		return s.defaultStream(dev, enqueue)
	}
	if enqueue {
		s.noteStream(h)
	}
	o, ok := s.st.streams[h]
	if !ok {
		return 0, device.Errorf("stream", device.ErrInvalidHandle, "stream %#x is not this session's", h)
	}
	if enqueue && (o.capInvalid || len(s.st.invalidOn) > 0 && s.joinedInvalid(o)) {
		return 0, errCaptureInvalidated("stream", h)
	}
	if o.dev != dev {
		return 0, device.Errorf("stream", device.ErrInvalidValue, "stream %#x belongs to device %d, the memory to device %d", h, o.dev, dev)
	}
	if enqueue {
		if err := s.joinDefault(o); err != nil {
			return 0, err
		}
	}
	return o.h, nil
}

// streamAny resolves a stream handle with its device; default streams are
// defDev's.
func (s *Session) streamAny(h uint64, defDev int, enqueue bool) (device.Context, device.Stream, error) {
	if isDefaultStream(h) {
		if defDev < 0 || defDev >= len(s.cfg.Devices) {
			return nil, 0, device.Errorf("stream", device.ErrNoDevice, "no device %d", defDev)
		}
		st, err := s.defaultStream(defDev, enqueue)
		return s.cfg.Devices[defDev], st, err
	}
	o, ok := s.st.streams[h]
	if !ok {
		return nil, 0, device.Errorf("stream", device.ErrInvalidHandle, "stream %#x is not this session's", h)
	}
	st, err := s.stream(h, o.dev, enqueue)
	return s.cfg.Devices[o.dev], st, err
}

// defaultStream returns the guest's default stream on dev: the NULL stream
// of an exclusive context, else the session's own (created on first use).
func (s *Session) defaultStream(dev int, enqueue bool) (device.Stream, error) {
	if !s.sharedContext() {
		return device.DefaultStream, nil
	}
	d := s.st.defaults[dev]
	if d == nil {
		h, err := s.cfg.Devices[dev].StreamCreate(streamNonBlocking, 0)
		if err != nil {
			return 0, err
		}
		d = &streamObj{dev: dev, h: h}
		s.st.defaults[dev] = d
	}
	if !enqueue {
		return d.h, nil
	}
	// Legacy rule: the default stream's next work waits for what the
	// session's blocking streams of this device have queued since.
	for o := range s.st.dirty[dev] {
		if err := s.follow(d, o); err != nil {
			return 0, err
		}
	}
	clear(s.st.dirty[dev])
	d.work++
	return d.h, nil
}

// joinDefault applies the legacy rule before work is queued on o: a
// blocking stream waits for its default stream's work so far.
func (s *Session) joinDefault(o *streamObj) error {
	if !s.sharedContext() || !o.blocking || o.capturing {
		return nil
	}
	if d := s.st.defaults[o.dev]; d != nil && d.work != o.seen {
		if err := s.follow(o, d); err != nil {
			return err
		}
		o.seen = d.work
	}
	o.work++
	if s.st.dirty[o.dev] == nil {
		s.st.dirty[o.dev] = map[*streamObj]struct{}{}
	}
	s.st.dirty[o.dev][o] = struct{}{}
	return nil
}

// follow makes stream a wait for what stream b has queued so far.
func (s *Session) follow(a, b *streamObj) error {
	ctx := s.cfg.Devices[b.dev]
	if b.ev == 0 {
		ev, err := ctx.EventCreate(eventDisableTiming)
		if err != nil {
			return err
		}
		b.ev = ev
	}
	if err := ctx.EventRecord(b.ev, b.h); err != nil {
		return err
	}
	return ctx.StreamWaitEvent(a.h, b.ev, 0)
}

// deviceStreamFlags are the flags a guest's stream is created with.
func (s *Session) deviceStreamFlags(guest uint32) uint32 {
	if s.sharedContext() {
		return guest | streamNonBlocking
	}
	return guest
}

// ordered runs fn, which queues work on st: asynchronously when asked; a
// synchronous call on a stream other than the context's NULL stream is
// issued asynchronously and then waited for (the driver's synchronous
// calls would run on the shared NULL stream, out of order with st).
func ordered(ctx device.Context, st device.Stream, async bool, fn func(async bool) error) error {
	if async || st == device.DefaultStream {
		return fn(async)
	}
	if err := fn(true); err != nil {
		return err
	}
	return ctx.StreamSynchronize(st)
}

// syncDevice waits for the session's work on device dev: the whole
// context if the session owns it, else the session's own streams.
func (s *Session) syncDevice(dev int) error {
	ctx := s.cfg.Devices[dev]
	if !s.sharedContext() {
		return ctx.Synchronize()
	}
	var first error
	for _, o := range s.st.streams {
		if o.dev == dev {
			if err := ctx.StreamSynchronize(o.h); err != nil && first == nil {
				first = err
			}
		}
	}
	if d := s.st.defaults[dev]; d != nil {
		if err := ctx.StreamSynchronize(d.h); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// dropStream destroys a stream of the session (its join event too).
func (s *Session) dropStream(o *streamObj) error {
	ctx := s.cfg.Devices[o.dev]
	if o.capturing { // the capture ends with the stream; its graph is nobody's
		g, rs, err := s.endCapture(o)
		if err == nil {
			_ = ctx.GraphDestroy(g)
		}
		s.unuseRegions(rs)
	}
	if s.st.dirty[o.dev] != nil {
		if _, dirty := s.st.dirty[o.dev][o]; dirty {
			// Its work still precedes the default stream's next work.
			if _, err := s.defaultStream(o.dev, false); err == nil {
				_ = s.follow(s.st.defaults[o.dev], o)
			}
			delete(s.st.dirty[o.dev], o)
		}
	}
	if o.ev != 0 {
		_ = ctx.EventDestroy(o.ev)
		o.ev = 0
	}
	return ctx.StreamDestroy(o.h)
}
