// Package hostmode serves the vgpu protocol on a unix socket, so a CUDA
// program on the host itself (or a test) can use the backend through the
// guest library without a VM: VGPU_TRANSPORT=unix:PATH.
//
// There is no guest memory in host mode: Conn.Memory is nil, so sessions
// refuse guest-physical segments and all data travels inline. PeerCID and
// PeerPort are 0.
//
// Trust: anyone who can connect to the socket can use the GPU; the socket
// is created with mode 0660 by default (see Options).
package hostmode

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Options tune the listener.
type Options struct {
	// Mode is the socket file's permission bits (default 0660).
	Mode os.FileMode
}

// Listener is a transport.Listener on a unix stream socket.
type Listener struct {
	ln   *net.UnixListener
	path string
}

// Listen creates the socket at path, replacing a stale socket file (but
// never a regular file).
func Listen(path string, opt Options) (*Listener, error) {
	if opt.Mode == 0 {
		opt.Mode = 0o660
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("hostmode: %s exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("hostmode: another backend is serving %s", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("hostmode: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, opt.Mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hostmode: chmod %s: %w", path, err)
	}
	return &Listener{ln: ln, path: path}, nil
}

// Accept waits for a client.
func (l *Listener) Accept() (transport.Conn, error) {
	c, err := l.ln.AcceptUnix()
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, net.ErrClosed
		}
		return nil, err
	}
	return &Conn{UnixConn: c, vm: "unix:" + l.path}, nil
}

// Close stops listening and removes the socket file.
func (l *Listener) Close() error { return l.ln.Close() }

// Addr is the socket's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Conn is one host-mode client.
type Conn struct {
	*net.UnixConn
	vm string
}

// PeerCID is 0: the host itself.
func (c *Conn) PeerCID() uint32 { return 0 }

// PeerPort is 0.
func (c *Conn) PeerPort() uint32 { return 0 }

// Memory is nil: host mode has no guest memory.
func (c *Conn) Memory() guestmem.Source { return nil }

// VM is "unix:PATH".
func (c *Conn) VM() string { return c.vm }

var _ transport.Listener = (*Listener)(nil)
