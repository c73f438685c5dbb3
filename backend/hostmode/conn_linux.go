package hostmode

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// maxPendingFDs bounds the fds a connection holds before a frame claims
// them; more are closed at once (a client cannot pile up descriptors).
const maxPendingFDs = 16

// Conn is one host-mode client. It implements transport.MemorySharer.
type Conn struct {
	*net.UnixConn
	vm     string
	shares *shareSet
	oob    []byte // the reader's control-message buffer

	fdMu    sync.Mutex
	fds     []int // received, not yet taken
	closed  bool
	dropped int // fds closed because too many were pending
}

// NewConn wraps an accepted (or handed-over) unix stream connection. With
// opt.NoShare the connection carries data inline only and never keeps an
// fd the client sends.
func NewConn(c *net.UnixConn, vm string, opt Options) transport.Conn {
	opt = opt.withDefaults()
	if opt.NoShare {
		return &plainConn{UnixConn: c, vm: vm}
	}
	return &Conn{UnixConn: c, vm: vm, shares: newShareSet(opt), oob: make([]byte, unix.CmsgSpace(4*maxPendingFDs))}
}

// Read reads bytes and collects the fds that come with them (recvmsg;
// close-on-exec).
func (c *Conn) Read(b []byte) (int, error) {
	n, oobn, flags, _, err := c.UnixConn.ReadMsgUnix(b, c.oob)
	if oobn > 0 {
		c.collect(c.oob[:oobn])
	}
	if flags&unix.MSG_CTRUNC != 0 {
		// The kernel closed the fds that did not fit: count them as dropped.
		c.fdMu.Lock()
		c.dropped++
		c.fdMu.Unlock()
	}
	return n, err
}

func (c *Conn) collect(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	var got []int
	for i := range msgs {
		if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			got = append(got, fds...)
		}
	}
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	for _, fd := range got {
		if c.closed || len(c.fds) >= maxPendingFDs {
			_ = unix.Close(fd)
			c.dropped++
			continue
		}
		c.fds = append(c.fds, fd)
	}
}

// TakeFDs returns the fds received since the last call; the caller owns them.
func (c *Conn) TakeFDs() []int {
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	fds := c.fds
	c.fds = nil
	return fds
}

// DroppedFDs counts fds closed unclaimed because too many arrived at once.
func (c *Conn) DroppedFDs() int {
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	return c.dropped
}

// Close closes the socket and the fds nobody took, and drops the
// connection's hold on its shares: each is unmapped once nothing uses it.
func (c *Conn) Close() error {
	err := c.UnixConn.Close()
	c.fdMu.Lock()
	fds := c.fds
	c.fds = nil
	c.closed = true
	c.fdMu.Unlock()
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	c.shares.close()
	return err
}

// Socket returns the client's socket (a worker process can serve it
// itself: "vgpu serve" hands it over instead of copying its bytes).
func (c *Conn) Socket() *net.UnixConn { return c.UnixConn }

// PeerCID is 0: the host itself.
func (c *Conn) PeerCID() uint32 { return 0 }

// PeerPort is 0.
func (c *Conn) PeerPort() uint32 { return 0 }

// Memory serves the client's shared memory (an empty table before the
// first share).
func (c *Conn) Memory() guestmem.Source { return c.shares }

// VM is "unix:PATH".
func (c *Conn) VM() string { return c.vm }

// Share maps fd at [base, base+size) of Memory; see transport.MemorySharer.
func (c *Conn) Share(base guestmem.GPA, size uint64, fd int) error {
	return c.shares.share(base, size, fd)
}

// Unshare ends the share at base.
func (c *Conn) Unshare(base guestmem.GPA) error { return c.shares.unshare(base) }

// OnUnmap registers f to run before each share's mapping is unmapped.
func (c *Conn) OnUnmap(f func(host []byte)) { c.shares.onUnmap(f) }

// ShareOptions returns the connection's share caps (a worker's copy of the
// connection gets the same).
func (c *Conn) ShareOptions() Options { return c.shares.opt }

// ShareStats reports the connection's mapped shares (ended ones still in
// use included) and their bytes.
func (c *Conn) ShareStats() (n int, bytes uint64) { return c.shares.stats() }

var _ transport.MemorySharer = (*Conn)(nil)

// plainConn is a connection that carries data inline only (Options.NoShare):
// a plain read drops any fd the client sends (the kernel closes it).
type plainConn struct {
	*net.UnixConn
	vm string
}

func (c *plainConn) PeerCID() uint32         { return 0 }
func (c *plainConn) PeerPort() uint32        { return 0 }
func (c *plainConn) Memory() guestmem.Source { return nil }
func (c *plainConn) Socket() *net.UnixConn   { return c.UnixConn }
func (c *plainConn) VM() string              { return c.vm }
