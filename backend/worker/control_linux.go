package worker

import (
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Control messages (JSON, one per SOCK_SEQPACKET record, fds attached).
const (
	msgMemory   = "memory"   // manager -> worker: guest RAM regions, one fd each
	msgSession  = "session"  // manager -> worker: one guest stream, one fd
	msgPoisoned = "poisoned" // worker -> manager: sticky error; send no more sessions
)

// Region is one guest RAM region as sent to a worker (the fd travels
// alongside).
type Region struct {
	GPA        uint64 `json:"gpa"`
	Size       uint64 `json:"size"`
	UserAddr   uint64 `json:"uaddr"`
	MmapOffset uint64 `json:"offset"`
}

type message struct {
	Op      string   `json:"op"`
	Session uint64   `json:"session,omitempty"`
	CID     uint32   `json:"cid,omitempty"`
	Port    uint32   `json:"port,omitempty"`
	VM      string   `json:"vm,omitempty"`
	Memory  uint64   `json:"memory,omitempty"` // generation of the memory table the session uses
	Regions []Region `json:"regions,omitempty"`
	Error   string   `json:"error,omitempty"`
}

const maxMsg = 64 << 10
const maxFDs = 64

// socketpair returns a connected pair of the given type, close-on-exec.
func socketpair(typ int) (a, b *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "vgpu-a"), os.NewFile(uintptr(fds[1]), "vgpu-b"), nil
}

// send writes one message with fds.
func send(f *os.File, m *message, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMsg || len(fds) > maxFDs {
		return fmt.Errorf("worker: control message too large (%d bytes, %d fds)", len(b), len(fds))
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

// recv reads one message and the fds attached to it (which the caller owns).
func recv(f *os.File) (*message, []int, error) {
	b := make([]byte, maxMsg)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, nil, err
	}
	if rerr != nil {
		return nil, nil, rerr
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("worker: control message: %w", err)
		}
		for _, c := range cmsgs {
			r, err := unix.ParseUnixRights(&c)
			if err == nil {
				fds = append(fds, r...)
			}
		}
	}
	if n == 0 {
		closeFDs(fds)
		return nil, nil, errEOF
	}
	var m message
	if err := json.Unmarshal(b[:n], &m); err != nil {
		closeFDs(fds)
		return nil, nil, fmt.Errorf("worker: malformed control message: %w", err)
	}
	return &m, fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

var errEOF = fmt.Errorf("worker: control socket closed")

// hangup shuts a socket down (waking a reader blocked on it, and telling
// the peer) and closes it.
func hangup(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	_ = f.Close()
}
