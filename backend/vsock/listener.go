package vsock

import (
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/vgpu-project/vgpu/backend/transport"
)

// ListenOptions are a listener's policy.
type ListenOptions struct {
	// RequirePrivileged accepts only guest source ports below 1024 (bound by
	// the guest kernel); others are refused with RST and a rate-limited log
	// line. The vGPU port sets it; tests may not.
	RequirePrivileged bool
	// Backlog is how many connections may wait for Accept (default 64);
	// beyond it requests are refused with RST.
	Backlog int
}

// Listener accepts guest connections to one port of one device. It
// implements transport.Listener.
type Listener struct {
	d      *Device
	port   uint32
	opts   ListenOptions
	accept chan *Conn
	done   chan struct{}
	once   sync.Once
}

var _ transport.Listener = (*Listener)(nil)

// Accept waits for the next guest connection.
func (l *Listener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening; connections not yet accepted are reset.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		err = nil
		l.d.mu.Lock()
		if l.d.listeners[l.port] == l {
			delete(l.d.listeners, l.port)
		}
		l.d.mu.Unlock()
		close(l.done)
		for {
			select {
			case c := <-l.accept:
				c.mu.Lock()
				c.reset(fmt.Errorf("vsock: listener closed: %w", syscall.ECONNREFUSED))
				c.mu.Unlock()
			default:
				return
			}
		}
	})
	return err
}

// Addr is the host's address for this port.
func (l *Listener) Addr() net.Addr { return Addr{CID: transport.HostCID, Port: l.port} }
