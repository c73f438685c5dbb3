package handoff

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Conn is a guest stream handed over on a control socket. It implements
// transport.Conn.
type Conn struct {
	net.Conn
	CID, Port uint32
	Name      string
	Mem       guestmem.Source // nil: the stream may not name guest memory
}

var _ transport.Conn = (*Conn)(nil)

// Socket returns the stream's unix socket, or nil if it is not one (a
// process can then hand the socket itself to another).
func (c *Conn) Socket() *net.UnixConn {
	uc, _ := c.Conn.(*net.UnixConn)
	return uc
}

// PeerCID is the guest's CID.
func (c *Conn) PeerCID() uint32 { return c.CID }

// PeerPort is the guest's source port.
func (c *Conn) PeerPort() uint32 { return c.Port }

// VM names the VM.
func (c *Conn) VM() string { return c.Name }

// Memory returns the VM's guest memory, or nil.
func (c *Conn) Memory() guestmem.Source {
	if c.Mem == nil {
		return nil
	}
	return c.Mem
}

// NewConn wraps a session message's fd, which must be a unix stream
// socket; it takes ownership of fd (closed on error).
func NewConn(fd int, cid, port uint32, vm string, mem guestmem.Source) (*Conn, error) {
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err1 != nil || err2 != nil || dom != unix.AF_UNIX || typ != unix.SOCK_STREAM {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("handoff: session fd is not a unix stream socket (domain %d, type %d, %v %v)", dom, typ, err1, err2)
	}
	f := os.NewFile(uintptr(fd), "vgpu-session")
	nc, err := net.FileConn(f) // dups the fd
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("handoff: session stream: %w", err)
	}
	return &Conn{Conn: nc, CID: cid, Port: port, Name: vm, Mem: mem}, nil
}
