package handoff

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/protocol"
)

// Control messages (Message.Op).
const (
	OpHello    = "hello"    // front -> backend: who the front serves (VM, CID); no fds
	OpMemory   = "memory"   // guest RAM regions, one fd each; none (and generation 0): forget the table
	OpSession  = "session"  // one guest stream, one fd
	OpPoisoned = "poisoned" // worker -> manager: sticky error; send no more sessions

	// Between "vgpu serve" (the manager) and its workers only:
	OpReady      = "ready"       // worker -> manager: driver open, contexts created; ready for a session
	OpSessionEnd = "session-end" // worker -> manager: session Session has ended
	OpReport     = "report"      // worker -> manager: its counters (Report); ID answers a report-now
	OpReportNow  = "report-now"  // manager -> worker: ID; send a report now
	OpLease      = "lease"       // worker -> manager: ID, Bytes more of its VM's memory cap; the answer (same ID): Bytes granted, Error if refused
	OpLeased     = "leased"      // worker -> manager: ID; the answer: Bytes leased by all the VM's workers
	OpUnlease    = "unlease"     // worker -> manager: Bytes of its lease back
	OpModuleGet  = "module-get"  // worker -> manager: ID, Hash; the answer (same ID): the image as a sealed memfd, or none
	OpModulePut  = "module-put"  // worker -> manager: Hash; the image as a sealed memfd
	// A VM's budgets (backend/budget) across its workers, kept by the manager:
	OpBudgetLease   = "budget-lease"   // worker -> manager: ID, Resource, Units (at least) to UnitsMax more; the answer (same ID): Units granted, or Exhausted. With Force: Units past the bound, no answer
	OpBudgetUnlease = "budget-unlease" // worker -> manager: Units of Resource back
	OpStop          = "stop"           // manager -> worker (one guest process's): no more sessions come; exit once those served have ended
	// The VM's process list (NVML) across its workers:
	OpListProcesses = "list-processes" // worker -> manager: ID, Device; the answer (same op and ID): Processes, those the VM's other workers serve
	OpOwnProcesses  = "own-processes"  // manager -> worker: ID, VM, Device; the answer (same op and ID): Processes, the worker's own
)

// Region is one guest RAM region as sent over a control socket (its fd
// travels alongside, in the same order).
type Region struct {
	GPA        uint64 `json:"gpa"`
	Size       uint64 `json:"size"`
	UserAddr   uint64 `json:"uaddr"`
	MmapOffset uint64 `json:"offset"`
}

// Message is one control message.
type Message struct {
	Op      string   `json:"op"`
	Session uint64   `json:"session,omitempty"`
	CID     uint32   `json:"cid,omitempty"`
	Port    uint32   `json:"port,omitempty"`
	VM      string   `json:"vm,omitempty"`
	Memory  uint64   `json:"memory,omitempty"` // generation of the memory table (a session: the one it uses)
	Regions []Region `json:"regions,omitempty"`
	// A host-mode session (ShareMax > 0): its stream carries fds beside
	// frames (OpHostShare), which the worker maps itself, within these caps.
	ShareMax      int    `json:"share_max,omitempty"`
	ShareMaxBytes uint64 `json:"share_max_bytes,omitempty"`
	// And its shared-memory rings (OpRingSetup): refused, or how long
	// their sides spin before sleeping (0: the default).
	NoRing     bool  `json:"no_ring,omitempty"`
	RingSpinNs int64 `json:"ring_spin_ns,omitempty"`
	// Prefix is what the manager already read of a session's stream (the
	// guest's HELLO, read to learn which guest process it belongs to): the
	// worker serves these bytes before the stream's own.
	Prefix []byte `json:"prefix,omitempty"`
	Error  string `json:"error,omitempty"`
	// Requests and their answers (worker <-> manager).
	ID     uint64          `json:"id,omitempty"`
	Bytes  uint64          `json:"bytes,omitempty"`
	Hash   string          `json:"hash,omitempty"` // hex SHA-256
	Report json.RawMessage `json:"report,omitempty"`
	// Device is a guest device ordinal (list-processes, own-processes);
	// Processes are the guest processes on it (at most
	// protocol.MaxProcesses), sorted by PID.
	Device    int                    `json:"device,omitempty"`
	Processes []protocol.ProcessInfo `json:"processes,omitempty"`
	// A lease of the VM's budget (budget-lease, budget-unlease).
	Resource  budget.Resource   `json:"resource,omitempty"`
	Units     int64             `json:"units,omitempty"`
	UnitsMax  int64             `json:"units_max,omitempty"`
	Force     bool              `json:"force,omitempty"`
	Exhausted *budget.Exhausted `json:"exhausted,omitempty"`
}

// MaxMsg and MaxFDs bound one control message.
const (
	MaxMsg = 64 << 10
	MaxFDs = 64
)

// ErrClosed is Recv's error when the peer has closed the control socket.
var ErrClosed = errors.New("handoff: control socket closed")

// ErrMalformed wraps every framing or decoding error of Recv.
var ErrMalformed = errors.New("handoff: malformed control message")

// Socketpair returns a connected pair of the given type, close-on-exec.
func Socketpair(typ int) (a, b *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("handoff: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "vgpu-a"), os.NewFile(uintptr(fds[1]), "vgpu-b"), nil
}

// Socket is a control socket: an *os.File or a *net.UnixConn.
type Socket interface {
	syscall.Conn
	Close() error
}

// Send writes one message with fds (which stay the caller's).
func Send(f Socket, m *Message, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxMsg || len(fds) > MaxFDs {
		return fmt.Errorf("handoff: control message too large (%d bytes, %d fds)", len(b), len(fds))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

// Recv reads one message and the fds attached to it, which the caller owns
// (on error none are left open). A record longer than MaxMsg, or with more
// than MaxFDs fds, is refused with ErrMalformed.
func Recv(f Socket) (*Message, []int, error) {
	b := make([]byte, MaxMsg+1)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), b, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, nil, err
	}
	if rerr != nil {
		if rerr == unix.ECONNRESET {
			return nil, nil, ErrClosed
		}
		return nil, nil, rerr
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: control data: %v", ErrMalformed, err)
		}
		for _, c := range cmsgs {
			r, err := unix.ParseUnixRights(&c)
			if err == nil {
				fds = append(fds, r...)
			}
		}
	}
	switch {
	case flags&unix.MSG_CTRUNC != 0:
		CloseFDs(fds)
		return nil, nil, fmt.Errorf("%w: more than %d fds", ErrMalformed, MaxFDs)
	case flags&unix.MSG_TRUNC != 0 || n > MaxMsg:
		CloseFDs(fds)
		return nil, nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxMsg)
	case n == 0:
		CloseFDs(fds)
		return nil, nil, ErrClosed
	}
	var m Message
	if err := json.Unmarshal(b[:n], &m); err != nil {
		CloseFDs(fds)
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &m, fds, nil
}

// CloseFDs closes fds.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Hangup shuts a socket down (waking a reader blocked on it, and telling
// the peer) and closes it.
func Hangup(f Socket) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	_ = f.Close()
}
