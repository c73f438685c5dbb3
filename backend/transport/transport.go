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
