// Package kvsock is the transport for hosts with the kernel's vhost-vsock
// (/dev/vhost-vsock, QEMU -device vhost-vsock-pci): it listens on a host
// AF_VSOCK port with github.com/mdlayher/vsock and hands out the same
// transport.Conns as the in-process vhost-user device (package vsock).
//
// The kernel does the virtio-vsock work here, so guest memory is not handed
// to us: the caller resolves it per guest CID (QMP: the memory backend's
// mem-path and the guest-physical layout) through Config.Memory, or leaves
// it nil, and then Conn.Memory returns nil and the session layer refuses
// frames that carry guest-physical segments.
//
// Trust: the peer CID and port come from the host kernel and are as
// trustworthy as the guest kernel is; a source port >= 1024 may be any guest
// process, so the vGPU port refuses it (RequirePrivileged). Refused
// connections are closed at once (the kernel sends RST) and logged with a
// rate limit.
package kvsock

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/mdlayher/vsock"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Config configures a Listener.
type Config struct {
	Port              uint32 // host port (default transport.DefaultPort)
	RequirePrivileged bool   // refuse guest source ports >= 1024
	// Memory returns the guest memory of the VM with this CID; nil (or a
	// nil result) means Conn.Memory returns nil.
	Memory func(cid uint32) guestmem.Source
	Logger hclog.Logger // nil: discard
}

// Listener accepts guest connections from the kernel's vsock.
type Listener struct {
	l       net.Listener
	cfg     Config
	log     hclog.Logger
	refused atomic.Uint64

	mu       sync.Mutex
	lastLog  time.Time
	suppress int
}

var _ transport.Listener = (*Listener)(nil)

// Listen listens on cfg.Port of the host's vsock (any CID).
func Listen(cfg Config) (*Listener, error) {
	if cfg.Port == 0 {
		cfg.Port = transport.DefaultPort
	}
	l, err := vsock.Listen(cfg.Port, nil)
	if err != nil {
		return nil, fmt.Errorf("kvsock: listen on vsock port %d (is vhost_vsock loaded and /dev/vsock present?): %w", cfg.Port, err)
	}
	return newListener(l, cfg), nil
}

func newListener(l net.Listener, cfg Config) *Listener {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Listener{l: l, cfg: cfg, log: log}
}

// Refused returns how many connections the port policy refused.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Accept returns the next guest connection that the port policy allows.
func (l *Listener) Accept() (transport.Conn, error) {
	for {
		c, err := l.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, net.ErrClosed
			}
			return nil, fmt.Errorf("kvsock: accept: %w", err)
		}
		cid, port, ok := peer(c.RemoteAddr())
		if !ok {
			c.Close()
			l.logRefusal("refused a connection with a non-vsock peer address", "addr", c.RemoteAddr().String())
			continue
		}
		if l.cfg.RequirePrivileged && !transport.PrivilegedPort(port) {
			c.Close()
			l.logRefusal("refused a guest connection from an unprivileged source port (only the guest kernel may connect)",
				"cid", cid, "guest_port", port, "port", l.cfg.Port)
			continue
		}
		var mem guestmem.Source
		if l.cfg.Memory != nil {
			mem = l.cfg.Memory(cid)
		}
		return &Conn{Conn: c, cid: cid, port: port, mem: mem}, nil
	}
}

func peer(a net.Addr) (cid, port uint32, ok bool) {
	if va, isVsock := a.(*vsock.Addr); isVsock && va != nil {
		return va.ContextID, va.Port, true
	}
	return 0, 0, false
}

func (l *Listener) logRefusal(msg string, args ...interface{}) {
	l.refused.Add(1)
	l.mu.Lock()
	if time.Since(l.lastLog) < time.Second {
		l.suppress++
		l.mu.Unlock()
		return
	}
	l.lastLog = time.Now()
	if l.suppress > 0 {
		args = append(args, "suppressed", l.suppress)
		l.suppress = 0
	}
	l.mu.Unlock()
	l.log.Warn(msg, args...)
}

// Close stops listening.
func (l *Listener) Close() error { return l.l.Close() }

// Addr is the host's vsock address.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }

// Conn is a kernel vsock stream from a guest.
type Conn struct {
	net.Conn
	cid, port uint32
	mem       guestmem.Source
}

var _ transport.Conn = (*Conn)(nil)

// PeerCID is the guest's CID.
func (c *Conn) PeerCID() uint32 { return c.cid }

// PeerPort is the guest's source port.
func (c *Conn) PeerPort() uint32 { return c.port }

// Memory returns the guest memory given by Config.Memory, or nil.
func (c *Conn) Memory() guestmem.Source {
	if c.mem == nil {
		return nil
	}
	return c.mem
}

// VM names the VM by CID.
func (c *Conn) VM() string { return fmt.Sprintf("cid:%d", c.cid) }
