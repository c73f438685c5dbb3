// Package hostmode serves the vgpu protocol on a unix socket, so a CUDA
// program on the host itself (or a test) can use the backend through the
// guest library without a VM: VGPU_TRANSPORT=unix:PATH.
//
// There is no guest RAM in host mode. Data travels inline, except in
// memory the client shared: the library allocates pinned memory
// (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc) from a sealed memfd and
// sends the fd beside an OpHostShare frame (SCM_RIGHTS). Conn reads with
// recvmsg and keeps the fds that arrive, in order (TakeFDs); the session
// hands the one that came with an OpHostShare frame to Conn.Share, which
// maps it at the pseudo guest-physical range the client chose. Conn.Memory
// serves those shares as a guestmem.Source, so segments, registered
// regions and device-mapped (zero-copy) registration work as they do for
// a VM's RAM. PeerCID and PeerPort are 0.
//
// A connection may move onto shared-memory rings (OpRingSetup,
// protocol/ring.go): StartRing maps them (backend/shmring), interrupts the
// reader's socket read, and from then on Read and Write use the rings and
// the socket carries only fd carriers (TakeFDs hands out those whose ring
// position has been read) and the connection's end.
//
// Trust: anyone who can connect to the socket can use the GPU; the socket
// is created with mode 0660 by default (see Options). Nothing the client
// sends is trusted: a shared fd must be a memfd sealed against shrinking
// (a file the client could truncate would fault the backend on its next
// access), hold the whole range, and the range must be page-aligned,
// non-wrapping and disjoint from the other shares; shares are capped in
// number and bytes per connection (Options); fds that come with any other
// frame, extra fds, and every mapping when the connection ends are closed
// and released.
package hostmode

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vgpu-project/vgpu/backend/transport"
)

// Defaults for Options.
const (
	DefaultMaxShares     = 1024
	DefaultMaxShareBytes = 256 << 30
)

// Options tune the listener.
type Options struct {
	// Mode is the socket file's permission bits (default 0660).
	Mode os.FileMode
	// MaxShares caps one connection's shared memfds, counting shares
	// that were ended but are still in use (default DefaultMaxShares).
	MaxShares int
	// MaxShareBytes caps their total size (default DefaultMaxShareBytes).
	MaxShareBytes uint64
	// NoShare refuses OpHostShare: every connection carries data inline.
	NoShare bool
	// NoRing refuses OpRingSetup: every connection stays on the socket.
	NoRing bool
	// RingSpin is how long a ring's reader or writer polls before it
	// sleeps on its eventfd (0: protocol.RingDefaultSpinNs; negative: no
	// spinning).
	RingSpin time.Duration
}

func (o Options) withDefaults() Options {
	if o.Mode == 0 {
		o.Mode = 0o660
	}
	if o.MaxShares <= 0 {
		o.MaxShares = DefaultMaxShares
	}
	if o.MaxShareBytes == 0 {
		o.MaxShareBytes = DefaultMaxShareBytes
	}
	return o
}

// Listener is a transport.Listener on a unix stream socket.
type Listener struct {
	ln   *net.UnixListener
	path string
	opt  Options
}

// Listen creates the socket at path, replacing a stale socket file (but
// never a regular file).
func Listen(path string, opt Options) (*Listener, error) {
	opt = opt.withDefaults()
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
	return &Listener{ln: ln, path: path, opt: opt}, nil
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
	return NewConn(c, "unix:"+l.path, l.opt), nil
}

// Close stops listening and removes the socket file.
func (l *Listener) Close() error { return l.ln.Close() }

// Addr is the socket's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

var _ transport.Listener = (*Listener)(nil)
