package pattern

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// CUDA driver error numbers the server answers with (cuda.h, CUresult).
const (
	cudaSuccess             int32 = 0
	cudaErrorInvalidValue   int32 = 1
	cudaErrorInvalidHandle  int32 = 400
	cudaErrorNotPermitted   int32 = 800
	cudaErrorNotSupported   int32 = 801
	cudaErrorIllegalAddress int32 = 700
)

// StreamDelay as a copy's Stream makes the server answer after Options.Delay.
const StreamDelay = 0xde1a7

// StreamClose as a copy's Stream makes the server close the connection
// without answering (a host that goes away in the middle of a call).
const StreamClose = 0xc105e

// StreamGarbage as a copy's Stream makes the server answer with a header
// claiming a 4 GiB payload, then close: the guest driver must end the
// session (EPROTO) without trusting the size.
const StreamGarbage = 0x6a4ba6e

// DevPtrBase plus the segment count is the DevPtr of a mapped registration.
const DevPtrBase = 0x7f0000000000

// Options configure a Server.
type Options struct {
	// Limits announced in the HELLO reply and enforced on frames; zero
	// fields take protocol.DefaultLimits.
	Limits protocol.Limits
	// Delay is how long copies on StreamDelay wait (default 2s).
	Delay  time.Duration
	Logger hclog.Logger
}

// Stats count what a Server saw, over all its connections.
type Stats struct {
	Sessions, Closed      atomic.Int64
	Frames, ContFrames    atomic.Int64 // frames; OpSegments continuations among them
	Segments              atomic.Int64
	BytesChecked          atomic.Int64 // HtoD bytes that matched
	BytesFilled           atomic.Int64 // DtoH bytes written
	Mismatches            atomic.Int64 // HtoD copies that did not match
	Registers, Unregister atomic.Int64
	Refused               atomic.Int64 // segments from unprivileged ports
	DriverHellos          atomic.Int64
	Errors                atomic.Int64 // connections ended by a protocol error
}

// Server answers vgpu protocol frames in pattern mode.
type Server struct {
	opts  Options
	log   hclog.Logger
	Stats Stats

	mu       sync.Mutex
	nextSess uint64
	nextReg  uint64
}

// NewServer returns a pattern-mode server.
func NewServer(opts Options) *Server {
	if opts.Limits.MaxPayload == 0 {
		opts.Limits.MaxPayload = protocol.DefaultLimits.MaxPayload
	}
	if opts.Limits.MaxSegments == 0 {
		opts.Limits.MaxSegments = protocol.DefaultLimits.MaxSegments
	}
	if opts.Delay == 0 {
		opts.Delay = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{opts: opts, log: log.Named("pattern")}
}

// ServeListener accepts connections until l is closed and serves each.
func (s *Server) ServeListener(l transport.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() { _ = s.Serve(c) }()
	}
}

var errClosedOnRequest = errors.New("pattern: connection closed on request (StreamClose)")

type conn struct {
	s       *Server
	c       transport.Conn
	log     hclog.Logger
	id      uint64
	wmu     sync.Mutex
	regions map[uint64]bool
	wg      sync.WaitGroup
}

// Serve answers frames on c until the guest closes it or breaks the
// protocol; it closes c. It returns nil on a clean close.
func (s *Server) Serve(c transport.Conn) error {
	s.mu.Lock()
	s.nextSess++
	id := s.nextSess
	s.mu.Unlock()
	s.Stats.Sessions.Add(1)
	k := &conn{s: s, c: c, id: id, regions: map[uint64]bool{},
		log: s.log.With("session", id, "port", c.PeerPort())}
	err := k.loop()
	k.wg.Wait()
	_ = c.Close()
	s.Stats.Closed.Add(1)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errClosedOnRequest) {
		s.Stats.Errors.Add(1)
		k.log.Warn("connection ended", "error", err)
		return err
	}
	return nil
}

func (k *conn) loop() error {
	lim := k.s.opts.Limits
	for {
		f, err := protocol.ReadFrame(k.c, lim)
		if err != nil {
			return err
		}
		k.s.Stats.Frames.Add(1)
		segs := f.Segs
		// Gather the OpSegments continuations of this call.
		for more := f.Flags&protocol.FlagMoreSegments != 0; more; {
			cf, err := protocol.ReadFrame(k.c, lim)
			if err != nil {
				return err
			}
			k.s.Stats.Frames.Add(1)
			k.s.Stats.ContFrames.Add(1)
			if cf.Opcode != protocol.OpSegments || cf.RequestID != f.RequestID {
				return fmt.Errorf("pattern: want OpSegments for request %d, got %#x for %d",
					f.RequestID, uint16(cf.Opcode), cf.RequestID)
			}
			segs = append(segs, cf.Segs...)
			more = cf.Flags&protocol.FlagMoreSegments != 0
		}
		k.s.Stats.Segments.Add(int64(len(segs)))
		if f.Flags&protocol.FlagReply != 0 || f.Opcode == protocol.OpSegments {
			return fmt.Errorf("pattern: unexpected frame op %#x flags %#x", uint16(f.Opcode), uint32(f.Flags))
		}
		if len(segs) > 0 && !transport.PrivilegedPort(k.c.PeerPort()) {
			k.s.Stats.Refused.Add(1)
			if err := k.answer(&f.Header, cudaErrorNotPermitted, nil); err != nil {
				return err
			}
			continue
		}
		if err := k.handle(f, segs); err != nil {
			return err
		}
	}
}

func (k *conn) write(b []byte) error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_, err := k.c.Write(b)
	return err
}

// answer replies to req (or, for FlagNoReply, notifies a failure).
func (k *conn) answer(req *protocol.Header, status int32, payload []byte) error {
	if req.Flags&protocol.FlagNoReply != 0 {
		if status == cudaSuccess {
			return nil
		}
		n := protocol.ErrorNotify{RequestID: req.RequestID, Error: status, Opcode: uint16(req.Opcode)}
		h := protocol.NewHeader(protocol.OpNotifyError, 0)
		h.Flags = protocol.FlagNotify
		return k.write(protocol.AppendFrame(nil, h, protocol.Bytes(&n), nil))
	}
	if status != cudaSuccess {
		payload = nil
	}
	return k.write(protocol.AppendFrame(nil, protocol.Reply(req, status), payload, nil))
}

func (k *conn) handle(f protocol.Frame, segs []protocol.Segment) error {
	switch f.Opcode {
	case protocol.OpHello:
		return k.hello(f)
	case protocol.OpPing, protocol.OpGoodbye:
		return k.answer(&f.Header, cudaSuccess, nil)
	case protocol.OpMemcpyHtoD:
		req, _, err := protocol.Decode[protocol.MemcpyHtoDReq](f.Payload)
		if err != nil {
			return err
		}
		return k.copy(f.Header, req.Src, segs, req.Dst, req.Stream, true)
	case protocol.OpMemcpyDtoH:
		req, _, err := protocol.Decode[protocol.MemcpyDtoHReq](f.Payload)
		if err != nil {
			return err
		}
		return k.copy(f.Header, req.Dst, segs, req.Src, req.Stream, false)
	case protocol.OpGuestRegister:
		return k.register(f, segs)
	case protocol.OpGuestUnregister:
		req, _, err := protocol.Decode[protocol.HandleReq](f.Payload)
		if err != nil {
			return err
		}
		st := cudaErrorInvalidHandle
		if k.regions[req.Handle] {
			delete(k.regions, req.Handle)
			k.s.Stats.Unregister.Add(1)
			st = cudaSuccess
		}
		return k.answer(&f.Header, st, nil)
	default:
		return k.answer(&f.Header, cudaErrorNotSupported, nil)
	}
}

func (k *conn) hello(f protocol.Frame) error {
	req, _, err := protocol.Decode[protocol.HelloReq](f.Payload)
	if err != nil {
		return err
	}
	if req.Role == protocol.RoleDriver {
		k.s.Stats.DriverHellos.Add(1)
	}
	lim := k.s.opts.Limits
	rep := protocol.HelloReply{
		Major: uint16(protocol.Major), Minor: uint16(protocol.Minor),
		DeviceCount: 1,
		Features:    req.Features & protocol.FeatureSegments,
		MaxPayload:  lim.MaxPayload, MaxSegments: lim.MaxSegments,
		MaxBatch:  protocol.DefaultMaxBatch,
		SessionID: k.id,
	}
	protocol.SetString(rep.BackendVersion[:], "pattern")
	protocol.SetString(rep.DeviceKind[:], "pattern")
	k.log.Debug("hello", "role", req.Role, "client", protocol.GetString(req.ClientVersion[:]), "pid", req.PID)
	return k.answer(&f.Header, cudaSuccess, protocol.Bytes(&rep))
}

// bufSegs returns the segments of buffer ref.Index: the list is split by
// buffer lengths, and this server only sees calls with one buffer per
// BufRef, so buffer 0 is the whole list.
func bufSegs(ref protocol.BufRef, segs []protocol.Segment) ([]protocol.Segment, error) {
	if ref.Kind != protocol.BufSegments || ref.Index != 0 {
		return nil, fmt.Errorf("buffer kind %d index %d", ref.Kind, ref.Index)
	}
	var sum uint64
	var out []protocol.Segment
	for _, s := range segs {
		if sum >= ref.Len {
			break
		}
		out = append(out, s)
		sum += s.Len
	}
	if sum != ref.Len {
		return nil, fmt.Errorf("segments cover %d bytes, buffer has %d", sum, ref.Len)
	}
	return out, nil
}

func (k *conn) copy(h protocol.Header, ref protocol.BufRef, all []protocol.Segment, seed, stream uint64, htod bool) error {
	segs, err := bufSegs(ref, all)
	if err != nil {
		k.log.Warn("bad copy", "error", err)
		return k.answer(&h, cudaErrorInvalidValue, nil)
	}
	if stream == StreamClose {
		return errClosedOnRequest
	}
	if stream == StreamGarbage {
		b := protocol.AppendFrame(nil, protocol.Reply(&h, 0), nil, nil)
		binary.LittleEndian.PutUint32(b[24:], 0xffffffff)
		if err := k.write(b); err != nil {
			return err
		}
		return errClosedOnRequest
	}
	do := func() error {
		st := k.touch(segs, seed, htod)
		return k.answer(&h, st, nil)
	}
	if stream != StreamDelay {
		return do()
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		time.Sleep(k.s.opts.Delay)
		_ = do()
	}()
	return nil
}

// touch checks (htod) or fills the guest memory behind segs.
func (k *conn) touch(segs []protocol.Segment, seed uint64, htod bool) int32 {
	src := k.c.Memory()
	if src == nil {
		return cudaErrorNotPermitted
	}
	t, err := src.Acquire()
	if err != nil {
		return cudaErrorIllegalAddress
	}
	defer t.Release()
	var off uint64
	for _, s := range segs {
		b, err := t.Slice(guestmem.GPA(s.GPA), s.Len)
		if err != nil {
			k.log.Warn("segment outside guest RAM", "gpa", s.GPA, "len", s.Len)
			return cudaErrorIllegalAddress
		}
		if htod {
			if i := Check(b, seed, off); i >= 0 {
				k.s.Stats.Mismatches.Add(1)
				k.log.Debug("pattern mismatch", "seed", seed, "offset", off+uint64(i))
				return cudaErrorInvalidValue
			}
		} else {
			Fill(b, seed, off)
		}
		off += s.Len
	}
	if htod {
		k.s.Stats.BytesChecked.Add(int64(off))
	} else {
		k.s.Stats.BytesFilled.Add(int64(off))
	}
	return cudaSuccess
}

func (k *conn) register(f protocol.Frame, segs []protocol.Segment) error {
	req, _, err := protocol.Decode[protocol.GuestRegisterReq](f.Payload)
	if err != nil {
		return err
	}
	var sum uint64
	for _, s := range segs {
		sum += s.Len
	}
	if len(segs) == 0 || sum != req.Size {
		return k.answer(&f.Header, cudaErrorInvalidValue, nil)
	}
	if src := k.c.Memory(); src != nil {
		t, err := src.Acquire()
		if err != nil {
			return k.answer(&f.Header, cudaErrorIllegalAddress, nil)
		}
		for _, s := range segs {
			if _, err := t.Slice(guestmem.GPA(s.GPA), s.Len); err != nil {
				t.Release()
				return k.answer(&f.Header, cudaErrorIllegalAddress, nil)
			}
		}
		t.Release()
	}
	k.s.mu.Lock()
	k.s.nextReg++
	id := k.s.nextReg
	k.s.mu.Unlock()
	k.regions[id] = true
	k.s.Stats.Registers.Add(1)
	rep := protocol.GuestRegisterReply{Region: id}
	if req.Flags&protocol.RegisterMapped != 0 {
		rep.DevPtr = DevPtrBase + uint64(len(segs))
	}
	return k.answer(&f.Header, cudaSuccess, protocol.Bytes(&rep))
}
