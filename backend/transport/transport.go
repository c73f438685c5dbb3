// Package transport defines how guest connections reach the session layer.
//
// A Listener hands out Conns: byte streams from one guest (virtio-vsock), each
// tagged with the guest's CID and source port and with the guest memory of the
// VM it came from. The session layer cannot tell whether a Conn came from the
// in-process vhost-user-vsock device (package vsock) or from the host kernel's
// vhost-vsock (package kvsock); both implement Listener.
//
// Trust: nothing read from a Conn is trusted. PeerPort is trusted only as far
// as the guest kernel is: a port below 1024 can only be bound by the guest
// kernel or a privileged guest process (see PrivilegedPort).
package transport

import (
	"errors"
	"net"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/protocol"
)

// HostCID is the vsock CID of the host, as guests address it.
const HostCID = 2

// DefaultPort is the vsock port the vGPU service listens on.
const DefaultPort = protocol.DefaultPort

// PrivilegedPortLimit is the first unprivileged vsock port: a guest source
// port below it was bound by the guest kernel (or guest root).
const PrivilegedPortLimit = 1024

// Conn is one guest stream connection.
type Conn interface {
	net.Conn
	// PeerCID is the guest's context id.
	PeerCID() uint32
	// PeerPort is the guest-side (source) port of the connection.
	PeerPort() uint32
	// Memory returns the guest memory of the VM this connection belongs to.
	// It may return nil when the transport cannot see guest memory (host
	// mode over a unix socket); then frames that carry guest-physical
	// segments must be refused.
	Memory() guestmem.Source
	// VM names the VM (for logs and per-VM accounting), e.g. the
	// vhost-user socket path or "cid:3".
	VM() string
}

// Listener accepts guest connections for one service port.
type Listener interface {
	// Accept blocks until a guest connects, or the listener is closed
	// (then it returns net.ErrClosed).
	Accept() (Conn, error)
	Close() error
	Addr() net.Addr
}

// PrivilegedPort reports whether a guest source port could only have been
// bound by the guest kernel or guest root.
func PrivilegedPort(port uint32) bool { return port < PrivilegedPortLimit }

// FDConn is a Conn whose peer can pass file descriptors beside its bytes
// (host mode's unix socket, SCM_RIGHTS).
type FDConn interface {
	Conn
	// TakeFDs returns the file descriptors that arrived with the bytes
	// read since the previous call, in order, and hands them over: the
	// caller must close them. A reader that reads exactly one frame at a
	// time learns which frame each fd came with.
	TakeFDs() []int
}

// MemorySharer is an FDConn whose peer can share memory with the backend
// (host mode, OpHostShare): Memory then serves the shared memfds at the
// pseudo guest-physical ranges the peer chose.
type MemorySharer interface {
	FDConn
	// Share maps fd (whose ownership it takes, closing it on error) at
	// [base, base+size) of Memory. Errors wrap ErrBadShare or
	// ErrShareLimit.
	Share(base guestmem.GPA, size uint64, fd int) error
	// Unshare removes the share at base from Memory; its mapping lasts
	// while tables taken before still use it.
	Unshare(base guestmem.GPA) error
	// OnUnmap registers f to run with each share's mapping just before it
	// is unmapped (to drop device registrations of that memory).
	OnUnmap(f func(host []byte))
}

// RingConn is an FDConn that can move onto shared-memory rings (host mode,
// OpRingSetup; protocol/ring.go).
type RingConn interface {
	FDConn
	// RingOK reports whether the connection may move onto rings.
	RingOK() bool
	// StartRing takes the setup's fds (closing them on error) and moves the
	// connection onto rings of ringBytes each: the next frame read comes
	// from the request ring and every write after StartRing returns goes
	// to the completion ring.
	StartRing(ringBytes uint64, fds []int) error
}

// Share errors.
var (
	// ErrBadShare: the fd or range of a share is not acceptable (not a
	// sealed memfd, too short, misaligned, overlapping, unknown base).
	ErrBadShare = errors.New("transport: bad memory share")
	// ErrShareLimit: the connection's cap on shares or shared bytes.
	ErrShareLimit = errors.New("transport: memory share limit reached")
)
