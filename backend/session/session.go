package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Session serves one guest connection. Create it with New and run Serve.
type Session struct {
	conn  transport.Conn
	cfg   Config
	log   hclog.Logger
	lim   protocol.Limits
	stats *Stats
	mods  ModuleStore
	eng   *engine.Engine
	mem   guestmem.Source // nil: no guest memory (a VM transport that cannot see it)
	// fdc is set when the peer can pass fds (host mode); sharer when it
	// can share memory with them (OpHostShare).
	fdc    transport.FDConn
	sharer transport.MemorySharer
	// segsOK: frames may carry guest-physical segments.
	segsOK    bool
	segsWhy   error
	guestLogs *rateLimiter
	// pool is this client's budget (its VM's and the process's above).
	pool *budget.Pool

	eq      execQueue     // frames read, not yet executed
	rq      replyQueue    // encoded frames not yet written
	closing chan struct{} // closed when the connection ends: releases host functions
	done    chan struct{} // closed when cleanup is over: the writer drains and exits

	// helloed: the guest said HELLO; nothing else is served before.
	helloed atomic.Bool
	// frameStart is when the frame being read began (unix ns; 0 between
	// frames): a frame not complete within FrameTimeout ends the
	// connection (the watchdog).
	frameStart atomic.Int64
	// cur is the call being executed, for Config.CallTimeout (stall.go).
	cur running

	// Executor-only state.
	st      state
	c       call // the executor's reusable call
	sub     call // the batch's reusable sub-call
	pending map[uint64]*pendingSegs
	// frameFDs are the fds that came with the frame being executed
	// (OpHostShare takes one); the executor closes what is left.
	frameFDs []int
	// writeFailed: a write to the stream failed; nothing more is written.
	writeFailed atomic.Bool
	// tw writes replies without waiting (the fast path); nil when the
	// connection cannot, and every reply goes through the writer.
	tw transport.TryWriter

	hfMu      sync.Mutex
	hostFuncs map[uint64]*hostFunc
	hfRunning atomic.Int64 // host functions the guest has been asked to run

	propCache []*device.Properties // validators' view of each device
	// proc is this session's entry in procs (the VM's process table).
	procs *ProcessTable
	proc  *processUse

	own        sessionStats
	traces     traceRing // Config.Trace: the latest records
	stickySeen bool
	// outputOn: the library asked for device output (FeatureDeviceOutput).
	outputOn atomic.Bool
	outMu    sync.Mutex // one flush of device output at a time
	// ringOn: HELLO negotiated FeatureShmRing.
	ringOn atomic.Bool
	// gring: a guest's rings in its RAM (guestring.go).
	gring guestRings
	// broken is set when the recover boundary caught a panic: the
	// session's state can no longer be trusted, so every later call fails
	// with this error (as a sticky CUDA error would) until the guest
	// process ends.
	broken atomic.Pointer[device.Error]
}

type inFrame struct {
	buf  *[]byte
	f    protocol.Frame
	recv time.Time // when its header arrived
	fds  []int     // OpHostShare: the fds that came with it
	size int64     // bytes it holds (budget.RequestBytes)
	// first and read: its first byte and its whole arrival (unix ns).
	first, read int64
	// sink takes its reply; nil: the stream (see Submit).
	sink ReplySink
}

// inFrames recycles inFrame records: the hot path allocates nothing per
// request.
var inFrames = sync.Pool{New: func() any { return new(inFrame) }}

func newInFrame() *inFrame { return inFrames.Get().(*inFrame) }

// free returns in's buffer and itself to their pools.
func (in *inFrame) free() {
	if in.buf != nil {
		putBuf(in.buf)
	}
	*in = inFrame{}
	inFrames.Put(in)
}

type pendingSegs struct {
	recv    time.Time
	h       protocol.Header
	payload []byte
	segs    []protocol.Segment
}

// New returns a session for conn.
func New(conn transport.Conn, cfg Config) *Session {
	if cfg.Limits == (protocol.Limits{}) {
		cfg.Limits = protocol.DefaultLimits
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = protocol.DefaultMaxBatch
	}
	if cfg.MaxCallSegments == 0 {
		cfg.MaxCallSegments = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Modules == nil {
		cfg.Modules = NewModuleCache(0)
	}
	if cfg.Engine == nil {
		cfg.Engine = engine.New(engine.Auto, nil)
	}
	if cfg.DeviceKind == "" {
		cfg.DeviceKind = "unknown"
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = DefaultFrameTimeout
	}
	if cfg.HostFuncTimeout <= 0 {
		cfg.HostFuncTimeout = DefaultHostFuncTimeout
	}
	if cfg.Budget == nil {
		cfg.Budget = PrivateBudget(cfg.Limits)
	}
	if cfg.LimitTable == nil {
		cfg.LimitTable = NewLimitTable()
	}
	s := &Session{
		conn: conn, cfg: cfg, lim: cfg.Limits, stats: cfg.Stats, mods: cfg.Modules, eng: cfg.Engine,
		log:       cfg.Logger.With("vm", conn.VM(), "session", cfg.ID, "cid", conn.PeerCID(), "port", conn.PeerPort()),
		guestLogs: newRateLimiter(10, 20),
		pool:      cfg.Budget,
		closing:   make(chan struct{}),
		done:      make(chan struct{}),
		pending:   map[uint64]*pendingSegs{},
		hostFuncs: map[uint64]*hostFunc{},
	}
	s.st.init()
	s.procs = cfg.Processes
	if s.procs == nil {
		s.procs = NewProcessTable()
	}
	s.proc = newProcessUse(len(cfg.Devices))
	s.mem = conn.Memory()
	s.fdc, _ = conn.(transport.FDConn)
	if tw, ok := conn.(transport.TryWriter); ok {
		s.tw = tw
	} else if sc, ok := conn.(transport.SocketConn); ok && sc.Socket() != nil {
		if tw, err := transport.NewSocketTryWriter(sc.Socket()); err == nil {
			s.tw = tw
		}
	}
	if sh, ok := conn.(transport.MemorySharer); ok && s.mem != nil {
		s.sharer = sh
		// A share's memory may have been registered with the device
		// (engine.Registry, shared by the VM's sessions): forget it before
		// it is unmapped, or a later mapping at its address would find it.
		if reg := cfg.Engine.Registry(); reg != nil {
			sh.OnUnmap(reg.Forget)
		}
		// Each share held one fd and one mapping of this client's budget
		// (hostShare); they come back when it is unmapped.
		sh.OnUnmap(func([]byte) {
			s.pool.Give(budget.FDs, 1)
			s.pool.Give(budget.Mappings, 1)
		})
	}
	switch {
	case s.mem == nil:
		s.segsWhy = device.Errorf("segments", device.ErrNotSupported, "this connection has no guest memory (host mode without shared memory): send data inline")
	case !cfg.AllowUnprivilegedSegments && !transport.PrivilegedPort(conn.PeerPort()):
		s.segsWhy = device.Errorf("segments", device.ErrNotPermitted, "guest-physical segments from unprivileged source port %d: only the guest kernel driver may send them", conn.PeerPort())
	default:
		s.segsOK = true
	}
	return s
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf(n int) *[]byte {
	bp := bufPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = make([]byte, n, max(n, 4096))
	}
	*bp = (*bp)[:n]
	return bp
}

// putBuf returns a frame buffer to the pool. Buffers up to 4 MiB are kept:
// a 256 MiB copy of scattered 4 KiB pages arrives as a frame of just over
// 1 MiB (its segment list), and allocating and faulting in a fresh one for
// every such call cost ~0.2 ms of the copy's ~5 ms on the H100.
func putBuf(bp *[]byte) {
	if cap(*bp) <= 4<<20 {
		bufPool.Put(bp)
	}
}

// Serve runs the session until the connection ends or ctx is done, then
// releases everything the session created. It returns why the connection
// ended (nil for a clean end: EOF or GOODBYE).
func (s *Session) Serve(ctx context.Context) error {
	s.stats.sessions.Add(1)
	s.stats.total.Add(1)
	defer s.stats.sessions.Add(-1)
	s.procs.add(s.proc)
	defer s.procs.remove(s.proc)
	s.log.Info("session started", "device_kind", s.cfg.DeviceKind, "devices", len(s.cfg.Devices), "segments", s.segsOK)

	writerDone := make(chan struct{})
	go s.writer(writerDone)
	execDone := make(chan struct{})
	go s.executor(execDone)
	go s.watchdog()
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Close() })
	defer stop()

	err := s.guardedReadLoop()
	s.endGuestRings()
	s.closeFDs(s.takeFDs()) // those of a frame that never arrived whole
	close(s.closing)        // host functions waiting for the guest give up
	s.closeExec()
	<-execDone
	s.releaseAll(-1)
	s.cfg.LimitTable.drop(s.cfg.Devices, s, -1)
	s.eng.Close()
	// The writer drains what is queued; a client that reads nothing more
	// does not hold the session open past the frame timeout.
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.cfg.FrameTimeout))
	close(s.done)
	<-writerDone
	_ = s.conn.Close()
	if held := s.pool.Close(); held != (budget.Limits{}) {
		s.log.Warn("session ended still holding budget; handed back", "held", held)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, errGoodbye) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	s.log.Info("session ended", "err", err)
	return err
}

var errGoodbye = errors.New("session: guest said goodbye")

func (s *Session) writer(done chan struct{}) {
	defer close(done)
	for {
		bp, ok := s.nextReply()
		if !ok {
			return
		}
		if bp == nil { // GOODBYE: everything before is written; hang up
			_ = s.conn.Close()
			s.written(0)
			continue
		}
		n := int64(len(*bp))
		s.writeOut(*bp)
		putBuf(bp)
		s.written(n)
	}
}

// writeOut writes one encoded frame to the stream in one call; after a
// failed write nothing more is written and the connection is closed. Only
// the holder of the reply queue's writing token calls it.
func (s *Session) writeOut(b []byte) {
	if s.writeFailed.Load() {
		return
	}
	if _, err := s.conn.Write(b); err != nil {
		s.writeFailed.Store(true)
		s.log.Debug("write failed; closing", "err", err)
		_ = s.conn.Close()
	}
}

// hangUp asks the writer to close the connection after what is queued.
func (s *Session) hangUp() { s.send(nil) }

// readHeader reads a frame header: it waits as long as the connection is
// idle, and starts the frame's clock at its first byte.
func (s *Session) readHeader(hb []byte) error {
	var n int
	for n == 0 {
		m, err := s.conn.Read(hb)
		n = max(m, 0)
		if err != nil && n == 0 {
			return err
		}
	}
	s.frameStart.Store(time.Now().UnixNano())
	if _, err := io.ReadFull(s.conn, hb[n:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("session: connection ended inside a frame header: %w", io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

// readLoop reads frames and hands them to the executor; it answers
// OpHostFuncDone and OpRingBell itself.
func (s *Session) readLoop() error {
	var hb [protocol.HeaderSize]byte
	for {
		s.frameStart.Store(0)
		if err := s.readHeader(hb[:]); err != nil {
			return err
		}
		h, err := protocol.DecodeHeader(hb[:], s.lim)
		if err != nil {
			s.stats.badFrames.Add(1)
			s.guestWarn("bad frame header", "op", h.Opcode, "req", h.RequestID, "err", err)
			s.replyStatus(&h, device.ErrInvalidValue)
			if errors.Is(err, protocol.ErrMagic) || errors.Is(err, protocol.ErrVersion) || errors.Is(err, protocol.ErrShort) {
				// The length fields cannot be trusted: the stream is lost.
				return fmt.Errorf("session: %w", err)
			}
			// Sizes are known: skip the body and keep serving.
			if _, err := io.CopyN(io.Discard, s.conn, int64(h.FrameLen()-protocol.HeaderSize)); err != nil {
				return err
			}
			s.strayFDs(&h, s.takeFDs())
			continue
		}
		// The frame's receipt is its first byte (one clock read per
		// frame, as the ring delivers a header whole).
		first := s.frameStart.Load()
		var recv time.Time
		if first != 0 {
			recv = time.Unix(0, first)
		} else { // the watchdog reset it
			recv = time.Now()
		}
		n := int(h.FrameLen())
		in := newInFrame()
		in.buf = getBuf(n)
		copy(*in.buf, hb[:])
		if _, err := io.ReadFull(s.conn, (*in.buf)[protocol.HeaderSize:]); err != nil {
			in.free()
			return fmt.Errorf("session: frame %v (request %d) truncated: %w", h.Opcode, h.RequestID, err)
		}
		s.frameStart.Store(0)
		if s.cfg.Trace {
			in.first, in.read = first, time.Now().UnixNano()
		}
		// The frame was read exactly, so the fds that came with its bytes
		// are its own.
		fds := s.takeFDs()
		in.f, _, err = protocol.ParseFrame(*in.buf, s.lim)
		if err != nil { // cannot happen after DecodeHeader and a full read
			in.free()
			s.closeFDs(fds)
			return fmt.Errorf("session: %w", err)
		}
		f := &in.f
		if len(fds) > 0 && f.Opcode != protocol.OpHostShare && f.Opcode != protocol.OpRingSetup {
			s.strayFDs(&f.Header, fds)
			fds = nil
		}
		if (f.Opcode == protocol.OpHostFuncDone || f.Opcode == protocol.OpRingBell) && f.NumSegs == 0 {
			// Never behind a call: a doorbell wakes the ring the call
			// may wait on.
			s.hostFuncDoneNow(f, recv, nil)
			in.free()
			continue
		}
		in.recv, in.fds, in.size = recv, fds, int64(n)
		if !s.dispatch(in) {
			return net.ErrClosed
		}
	}
}

// hostFuncDoneNow answers OpHostFuncDone on the caller's goroutine: the
// executor may be waiting on the stream that runs the host function.
func (s *Session) hostFuncDoneNow(f *protocol.Frame, recv time.Time, sink ReplySink) {
	c := call{sink: sink}
	s.execute(&c, f, recv)
}

// dispatch runs in at once on the caller's goroutine when nothing of the
// session is queued or executing (the fast path: no goroutine hop), else
// queues it for the executor. It reports false, having freed in, when the
// session is over.
func (s *Session) dispatch(in *inFrame) bool {
	if s.tryInline(in) {
		return true
	}
	if !s.push(in) {
		s.closeFDs(in.fds)
		in.free()
		return false
	}
	return true
}

// runFrame executes one frame with the executor's call (the caller holds
// the execution token) and frees it.
func (s *Session) runFrame(in *inFrame, inline bool) {
	s.frameFDs = in.fds
	s.c.sink = in.sink
	s.c.first, s.c.read = in.first, in.read
	s.c.inline = inline
	s.guardedHandleFrame(&in.f, in.recv)
	s.c.sink = nil
	s.c.first, s.c.read = 0, 0
	s.c.inline = false
	s.closeFDs(s.frameFDs) // unclaimed (a refused or continued frame)
	s.frameFDs = nil
}

func (s *Session) executor(done chan struct{}) {
	defer close(done)
	for {
		in := s.pop()
		if in == nil {
			return
		}
		s.runFrame(in, false)
		s.executed(in)
		in.free()
	}
}

// handleFrame runs one frame, assembling continued segment lists first.
func (s *Session) handleFrame(f *protocol.Frame, recv time.Time) {
	if f.Opcode != protocol.OpHello && !s.helloed.Load() {
		s.finish(&s.c, f, errNoHello)
		s.stats.count(f.Opcode, true, 0)
		return
	}
	switch {
	case f.Opcode == protocol.OpSegments:
		s.continueSegments(f, recv)
	case f.Flags&protocol.FlagMoreSegments != 0:
		s.startSegments(f, recv)
	default:
		s.execute(&s.c, f, recv)
	}
}

func (s *Session) startSegments(f *protocol.Frame, recv time.Time) {
	fail := func(err error) {
		s.finish(&s.c, f, err)
	}
	if !s.segsOK {
		fail(s.segsWhy)
		return
	}
	if _, dup := s.pending[f.RequestID]; dup || len(s.pending) >= 4 {
		fail(device.Errorf("segments", device.ErrInvalidValue, "request %d: a continued segment list is already open for it, or too many are open", f.RequestID))
		return
	}
	s.pending[f.RequestID] = &pendingSegs{
		recv:    recv,
		h:       f.Header,
		payload: append([]byte(nil), f.Payload...),
		segs:    append(make([]protocol.Segment, 0, len(f.Segs)*2), f.Segs...),
	}
}

func (s *Session) continueSegments(f *protocol.Frame, _ time.Time) {
	p, ok := s.pending[f.RequestID]
	if !ok {
		s.finish(&s.c, f, device.Errorf("OpSegments", device.ErrInvalidValue, "request %d has no open segment list", f.RequestID))
		return
	}
	if len(p.segs)+len(f.Segs) > s.cfg.MaxCallSegments {
		delete(s.pending, f.RequestID)
		ff := protocol.Frame{Header: p.h}
		s.finish(&s.c, &ff, device.Errorf("OpSegments", device.ErrInvalidValue, "call has more than %d segments", s.cfg.MaxCallSegments))
		return
	}
	p.segs = append(p.segs, f.Segs...)
	if f.Flags&protocol.FlagMoreSegments != 0 {
		return
	}
	delete(s.pending, f.RequestID)
	full := protocol.Frame{Header: p.h, Payload: p.payload, Segs: p.segs}
	full.Flags &^= protocol.FlagMoreSegments
	full.NumSegs = uint32(len(p.segs))
	s.c.inline = false // p.recv is its first frame's: execute reads the clock
	s.execute(&s.c, &full, p.recv)
}

// execute runs one request and answers it.
func (s *Session) execute(c *call, f *protocol.Frame, recv time.Time) {
	start := recv // a frame run inline waited for nothing (one clock read a call counts)
	if !c.inline || s.cfg.Trace {
		start = time.Now()
	}
	if c == &s.c {
		s.startCall(f, start) // the executor's call (not one the reader answers)
	}
	c.reset(f)
	err := s.guardedRun(c)
	c.release()
	var handled time.Time
	if s.cfg.Trace {
		handled = time.Now()
	}
	s.finish(c, f, err)
	end := time.Now()
	if s.cfg.Trace {
		s.trace(c, f, recv, start, handled, end)
	}
	s.stats.count(f.Opcode, err != nil || c.status != 0, end.Sub(start).Nanoseconds())
	s.account(f.Opcode, err == nil, end.Sub(recv).Nanoseconds())
	if f.Opcode == protocol.OpGoodbye && err == nil {
		s.hangUp()
	}
}

// finish sends the reply (or, for FlagNoReply, a deferred-error notification).
func (s *Session) finish(c *call, f *protocol.Frame, err error) {
	status := c.status
	if err != nil {
		status = device.ResultOf(err)
		if status == device.Success {
			status = device.ErrUnknown
		}
		if routine(f.Opcode, status) {
			s.log.Debug("call failed", "op", f.Opcode, "req", f.RequestID, "status", status, "err", err)
		} else {
			s.guestWarn("call failed", "op", f.Opcode, "req", f.RequestID, "status", status, "err", err)
		}
	}
	if device.Sticky(status) && !s.stickySeen {
		s.stickySeen = true
		s.log.Error("the CUDA context is broken (sticky error); its work cannot continue", "op", f.Opcode, "status", status, "err", err)
		if s.cfg.OnStickyError != nil {
			s.cfg.OnStickyError(err)
		}
	}
	if f.Flags&protocol.FlagNoReply != 0 {
		if status != device.Success {
			s.notifyError(f.RequestID, f.Opcode, status)
		}
		return
	}
	var flags protocol.Flags
	if s.flushOutput(f.RequestID) {
		flags = protocol.FlagOutput
	}
	if status == device.Success && c.frame != nil {
		// The payload is already in place: fill in the header and send.
		bp := c.frame
		c.frame = nil
		h := protocol.Reply(&f.Header, int32(status))
		h.Flags |= flags
		h.PayloadLen = uint32(c.frameN)
		protocol.PutHeader(*bp, &h)
		clear((*bp)[protocol.HeaderSize+c.frameN:]) // padding
		s.replyOn(c.sink, bp)
		return
	}
	var payload []byte
	if status == device.Success {
		payload = c.out // a reply with a non-zero status has no payload
	}
	h := protocol.Reply(&f.Header, int32(status))
	h.Flags |= flags
	s.replyOn(c.sink, encodeFrame(h, payload))
}

func (s *Session) reply(req *protocol.Header, status device.Result, payload []byte) {
	h := protocol.Reply(req, int32(status))
	s.sendFrame(h, payload)
}

// sendFrame encodes a frame into a pooled buffer and queues it.
func (s *Session) sendFrame(h protocol.Header, payload []byte) {
	s.send(encodeFrame(h, payload))
}

// replyOn sends an encoded reply to sink, or to the stream when sink is
// nil, and recycles bp. A sink that fails ends the connection: its
// guest can no longer be answered.
func (s *Session) replyOn(sink ReplySink, bp *[]byte) {
	if sink == nil {
		s.send(bp)
		return
	}
	err := sink.WriteReply(*bp)
	putBuf(bp)
	if err != nil {
		s.log.Warn("reply sink failed; closing the connection", "err", err)
		_ = s.conn.Close()
	}
}

func encodeFrame(h protocol.Header, payload []byte) *[]byte {
	bp := getBuf(protocol.HeaderSize + len(payload) + protocol.Align)
	*bp = protocol.AppendFrame((*bp)[:0], h, payload, nil)
	return bp
}

func (s *Session) replyStatus(req *protocol.Header, status device.Result) {
	s.reply(req, status, nil)
}

// notify queues a notification; forced ones never wait (see sendForced).
func (s *Session) notify(op protocol.Opcode, payload []byte, forced bool) {
	h := protocol.NewHeader(op, 0)
	h.Flags = protocol.FlagNotify
	s.enqueueReply(encodeFrame(h, payload), forced)
}

func (s *Session) notifyError(reqID uint64, op protocol.Opcode, r device.Result) {
	s.stats.deferred.Add(1)
	n := protocol.ErrorNotify{RequestID: reqID, Error: int32(r), Opcode: uint16(op)}
	s.notify(protocol.OpNotifyError, protocol.Bytes(&n), false)
}

// guestWarn logs a line a guest can trigger, rate-limited.
func (s *Session) guestWarn(msg string, args ...any) {
	if ok, dropped := s.guestLogs.allow(); ok {
		if dropped > 0 {
			args = append(args, "suppressed", dropped)
		}
		s.log.Warn(msg, args...)
	}
}

// account adds a call to the session's own counters (OpGetStats): time
// from the request's receipt to its completion.
func (s *Session) account(op protocol.Opcode, ok bool, nanos int64) {
	s.own.calls.Add(1)
	s.own.nanosInCall.Add(uint64(nanos))
	switch op {
	case protocol.OpMemcpyHtoD:
		s.own.nanosHtoD.Add(uint64(nanos))
	case protocol.OpMemcpyDtoH:
		s.own.nanosDtoH.Add(uint64(nanos))
	case protocol.OpLaunchKernel, protocol.OpLaunchKernelEx, protocol.OpLaunchKernelAttrs:
		if ok {
			s.own.launches.Add(1)
		}
	}
}

// routine reports failures that are part of normal operation (polling a
// busy stream, loading a module by hash the first time).
func routine(op protocol.Opcode, r device.Result) bool {
	return r == device.ErrNotReady || (op == protocol.OpModuleLoad && r == device.ErrNotFound)
}
