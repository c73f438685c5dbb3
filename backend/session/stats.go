package session

import (
	"sync"
	"sync/atomic"

	"github.com/vgpu-project/vgpu/protocol"
)

// Stats are counters shared by the sessions of a server; all methods are
// safe for concurrent use. Every opcode of protocol.Ops has its counters at
// its index in the table (protocol.Slot); an opcode outside the table is
// counted in unknownOps only (0x1101 is not DEVICE_GET_COUNT).
type Stats struct {
	calls            []atomic.Uint64
	errs             []atomic.Uint64
	nanos            []atomic.Uint64
	once             sync.Once
	unknownOps       atomic.Uint64
	badFrames        atomic.Uint64
	panics           atomic.Uint64
	strayFDs         atomic.Uint64
	sessions         atomic.Int64
	total            atomic.Uint64
	deferred         atomic.Uint64
	bytesHtoD        atomic.Uint64
	bytesDtoH        atomic.Uint64
	engines          [4]atomic.Uint64
	hostFuncTimeouts atomic.Uint64
	frameTimeouts    atomic.Uint64
	callTimeouts     atomic.Uint64
}

func (s *Stats) init() {
	s.once.Do(func() {
		s.calls = make([]atomic.Uint64, len(protocol.Ops))
		s.errs = make([]atomic.Uint64, len(protocol.Ops))
		s.nanos = make([]atomic.Uint64, len(protocol.Ops))
	})
}

func (s *Stats) count(op protocol.Opcode, failed bool, nanos int64) {
	i := protocol.Slot(op)
	if i < 0 {
		return
	}
	s.init()
	s.calls[i].Add(1)
	s.nanos[i].Add(uint64(nanos))
	if failed {
		s.errs[i].Add(1)
	}
}

// OpStats are one opcode's counters.
type OpStats struct {
	Calls  uint64 `json:"calls"`
	Errors uint64 `json:"errors"`
	// Nanos is the backend's own time in the handler, summed.
	Nanos uint64 `json:"nanos"`
}

// Snapshot is a copy of the counters.
type Snapshot struct {
	Ops        map[string]OpStats `json:"ops"`
	UnknownOps uint64             `json:"unknown_ops"`
	BadFrames  uint64             `json:"bad_frames"`
	// Panics counts internal errors caught at a session's recover boundary
	// (each ended that session's work; the process kept serving the others).
	Panics uint64 `json:"panics"`
	// HostFuncTimeouts counts host functions the guest did not answer in
	// time (the stream went on; the guest got CUDA_ERROR_TIMEOUT).
	HostFuncTimeouts uint64 `json:"host_func_timeouts,omitempty"`
	// FrameTimeouts counts connections closed because a frame stopped
	// half-way.
	FrameTimeouts uint64 `json:"frame_timeouts,omitempty"`
	// CallTimeouts counts connections closed because a call waited past
	// the call deadline (a kernel that did not end).
	CallTimeouts   uint64            `json:"call_timeouts,omitempty"`
	StrayFDs       uint64            `json:"stray_fds,omitempty"` // host mode: fds sent with frames that take none (closed)
	ActiveSessions int64             `json:"active_sessions"`
	TotalSessions  uint64            `json:"total_sessions"`
	DeferredErrors uint64            `json:"deferred_errors"`
	BytesHtoD      uint64            `json:"bytes_htod"`
	BytesDtoH      uint64            `json:"bytes_dtoh"`
	EngineCopies   map[string]uint64 `json:"engine_copies"`
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	out := Snapshot{Ops: map[string]OpStats{}, EngineCopies: map[string]uint64{}}
	s.init()
	for i, info := range protocol.Ops {
		if c := s.calls[i].Load(); c > 0 {
			out.Ops[info.Name] = OpStats{Calls: c, Errors: s.errs[i].Load(), Nanos: s.nanos[i].Load()}
		}
	}
	out.UnknownOps = s.unknownOps.Load()
	out.BadFrames = s.badFrames.Load()
	out.Panics = s.panics.Load()
	out.HostFuncTimeouts = s.hostFuncTimeouts.Load()
	out.FrameTimeouts = s.frameTimeouts.Load()
	out.CallTimeouts = s.callTimeouts.Load()
	out.StrayFDs = s.strayFDs.Load()
	out.ActiveSessions = s.sessions.Load()
	out.TotalSessions = s.total.Load()
	out.DeferredErrors = s.deferred.Load()
	out.BytesHtoD = s.bytesHtoD.Load()
	out.BytesDtoH = s.bytesDtoH.Load()
	for i, n := range []string{"auto", "direct", "gather", "staging"} {
		if c := s.engines[i].Load(); c > 0 {
			out.EngineCopies[n] = c
		}
	}
	return out
}

// Add adds o's counters to s: the counters of sessions served in other
// processes (worker processes report theirs to the manager).
func (s *Snapshot) Add(o Snapshot) {
	if s.Ops == nil {
		s.Ops = map[string]OpStats{}
	}
	for n, v := range o.Ops {
		a := s.Ops[n]
		a.Calls += v.Calls
		a.Errors += v.Errors
		a.Nanos += v.Nanos
		s.Ops[n] = a
	}
	s.UnknownOps += o.UnknownOps
	s.BadFrames += o.BadFrames
	s.Panics += o.Panics
	s.HostFuncTimeouts += o.HostFuncTimeouts
	s.FrameTimeouts += o.FrameTimeouts
	s.CallTimeouts += o.CallTimeouts
	s.StrayFDs += o.StrayFDs
	s.ActiveSessions += o.ActiveSessions
	s.TotalSessions += o.TotalSessions
	s.DeferredErrors += o.DeferredErrors
	s.BytesHtoD += o.BytesHtoD
	s.BytesDtoH += o.BytesDtoH
	if s.EngineCopies == nil {
		s.EngineCopies = map[string]uint64{}
	}
	for n, v := range o.EngineCopies {
		s.EngineCopies[n] += v
	}
}

// sessionStats are one session's own counters (OpGetStats).
type sessionStats struct {
	calls, bytesHtoD, bytesDtoH, nanosHtoD, nanosDtoH, nanosInCall, launches atomic.Uint64
	traced, nanosRead, nanosQueued, nanosValidate, nanosHandler, nanosReply  atomic.Uint64
}

func (s *sessionStats) snapshot() protocol.SessionStats {
	return protocol.SessionStats{
		Calls: s.calls.Load(), BytesHtoD: s.bytesHtoD.Load(), BytesDtoH: s.bytesDtoH.Load(),
		NanosHtoD: s.nanosHtoD.Load(), NanosDtoH: s.nanosDtoH.Load(), NanosInCall: s.nanosInCall.Load(),
		Launches: s.launches.Load(),
		Traced:   s.traced.Load(), NanosRead: s.nanosRead.Load(), NanosQueued: s.nanosQueued.Load(),
		NanosValidate: s.nanosValidate.Load(), NanosHandler: s.nanosHandler.Load(), NanosReply: s.nanosReply.Load(),
	}
}
