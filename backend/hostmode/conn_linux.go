package hostmode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
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

	// Rings (OpRingSetup): once ring is set, reads and writes use it and
	// the socket carries only fd carriers (under fdMu: carriers, partial).
	opt       Options
	ring      atomic.Pointer[shmring.Endpoint]
	ringMu    sync.Mutex // one setup
	wdeadline atomic.Int64
	carriers  []carrier
	partial   carrier // being received
	carSeen   uint64  // the ring's carrier count when the socket was last drained
	// tw writes without waiting on the socket (transport.TryWriter, the
	// session's fast path); nil if the socket cannot.
	tw *transport.SocketTryWriter
}

// carrier is an fd carrier on the socket in ring mode: the fds beside it
// belong to the frame at request-ring position pos.
type carrier struct {
	buf []byte // the 8-byte position as received so far
	pos uint64
	fds []int
}

// NewConn wraps an accepted (or handed-over) unix stream connection. With
// opt.NoShare the connection carries data inline only and never keeps an
// fd the client sends.
func NewConn(c *net.UnixConn, vm string, opt Options) transport.Conn {
	opt = opt.withDefaults()
	if opt.NoShare {
		return &plainConn{UnixConn: c, vm: vm}
	}
	hc := &Conn{UnixConn: c, vm: vm, shares: newShareSet(opt), oob: make([]byte, unix.CmsgSpace(4*maxPendingFDs)), opt: opt}
	hc.tw, _ = transport.NewSocketTryWriter(c)
	return hc
}

// Read reads bytes and collects the fds that come with them (recvmsg;
// close-on-exec); on rings, it reads the request ring.
func (c *Conn) Read(b []byte) (int, error) {
	if r := c.ring.Load(); r != nil {
		return r.Read(b)
	}
	n, oobn, flags, _, err := c.UnixConn.ReadMsgUnix(b, c.oob)
	if n <= 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		if r := c.ring.Load(); r != nil {
			// StartRing interrupted this read: the stream moved.
			_ = c.UnixConn.SetReadDeadline(time.Time{})
			return r.Read(b)
		}
	}
	if n < 0 {
		// recvmsg failed (ECONNRESET: the client closed with data
		// unread): ReadMsgUnix passes the syscall's -1 on, which an
		// io.Reader must never return (the session's reader sliced with
		// it: found by the field fuzzer).
		n = 0
	}
	if oobn < 0 {
		oobn = 0
	}
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

// TakeFDs returns the fds received since the last call; the caller owns
// them. On rings: those of the carriers that name a request-ring position
// already read.
func (c *Conn) TakeFDs() []int {
	if r := c.ring.Load(); r != nil {
		// The socket is read only when the library counted a carrier
		// since: no system call per frame otherwise.
		if n := r.Carriers(); n != c.carSeen {
			c.carSeen = n
			c.drainCarriers()
		}
		at := r.ReadPos()
		c.fdMu.Lock()
		defer c.fdMu.Unlock()
		var fds []int
		keep := c.carriers[:0]
		for _, k := range c.carriers {
			if k.pos < at {
				fds = append(fds, k.fds...)
			} else {
				keep = append(keep, k)
			}
		}
		c.carriers = keep
		return fds
	}
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	fds := c.fds
	c.fds = nil
	return fds
}

// Write writes to the socket, or on rings to the completion ring.
func (c *Conn) Write(b []byte) (int, error) {
	if r := c.ring.Load(); r != nil {
		return r.Write(b)
	}
	return c.UnixConn.Write(b)
}

// TryWrite writes what of b fits now without waiting: on the completion
// ring once on rings, else on the socket (transport.TryWriter).
func (c *Conn) TryWrite(b []byte) (int, error) {
	if r := c.ring.Load(); r != nil {
		return r.TryWrite(b)
	}
	if c.tw == nil {
		return 0, nil // the writer goroutine writes it
	}
	return c.tw.TryWrite(b)
}

// SetWriteDeadline bounds writes on the socket and on the completion ring.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if t.IsZero() {
		c.wdeadline.Store(0)
	} else {
		c.wdeadline.Store(t.UnixNano())
	}
	if r := c.ring.Load(); r != nil {
		r.SetWriteDeadline(t)
	}
	return c.UnixConn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines (the read side on the socket only).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.UnixConn.SetReadDeadline(t)
}

// RingOK: rings are offered unless Options.NoRing.
func (c *Conn) RingOK() bool { return !c.opt.NoRing }

// StartRing moves the connection onto shared-memory rings; see
// transport.RingConn.
func (c *Conn) StartRing(ringBytes uint64, fds []int) error {
	c.ringMu.Lock()
	defer c.ringMu.Unlock()
	closeAll := func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
	if c.opt.NoRing {
		closeAll()
		return errors.New("hostmode: rings are turned off on this socket")
	}
	if c.ring.Load() != nil {
		closeAll()
		return errors.New("hostmode: the connection is on rings already")
	}
	sock := -1
	rc, err := c.UnixConn.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { sock, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		closeAll()
		return fmt.Errorf("hostmode: dup of the socket: %w", err)
	}
	r, err := shmring.NewServer(fds, ringBytes, shmring.Options{Spin: c.opt.RingSpin, Sock: sock, OnSock: c.drainCarriers})
	if err != nil {
		return err
	}
	if d := c.wdeadline.Load(); d != 0 {
		r.SetWriteDeadline(time.Unix(0, d))
	}
	c.fdMu.Lock()
	closed := c.closed
	if !closed {
		c.ring.Store(r)
		// fds that came on the socket before are the setup's or strays.
		for _, fd := range c.fds {
			_ = unix.Close(fd)
		}
		c.fds = nil
	}
	c.fdMu.Unlock()
	if closed {
		_ = r.Close()
		return net.ErrClosed
	}
	// The reader is (or will be) blocked reading the socket: interrupt it;
	// Read goes on with the ring.
	_ = c.UnixConn.SetReadDeadline(time.Unix(1, 0))
	return nil
}

// drainCarriers reads the fd carriers waiting on the socket (ring mode,
// without blocking) and reports whether the socket ended.
func (c *Conn) drainCarriers() (ended bool) {
	r := c.ring.Load()
	if r == nil {
		return false
	}
	rc, err := c.UnixConn.SyscallConn()
	if err != nil {
		return true
	}
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	cerr := rc.Control(func(fd uintptr) {
		for {
			var b [protocol.RingCarrierSize]byte
			want := protocol.RingCarrierSize - len(c.partial.buf)
			n, oobn, flags, _, err := unix.Recvmsg(int(fd), b[:want], c.oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return
			}
			if err != nil || n == 0 {
				ended = true
				return
			}
			if oobn > 0 {
				c.carrierFDs(c.oob[:oobn])
			}
			if flags&unix.MSG_CTRUNC != 0 {
				c.dropped++
			}
			c.partial.buf = append(c.partial.buf, b[:n]...)
			if len(c.partial.buf) == protocol.RingCarrierSize {
				c.partial.pos = binary.LittleEndian.Uint64(c.partial.buf)
				if len(c.partial.fds) > 0 { // one without fds carries nothing
					c.carriers = append(c.carriers, c.partial)
				}
				c.partial = carrier{}
			}
		}
	})
	if cerr != nil {
		return true
	}
	return ended
}

// carrierFDs attaches received fds to the carrier being read (under fdMu),
// within the bound on pending fds.
func (c *Conn) carrierFDs(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	pending := len(c.partial.fds)
	for _, k := range c.carriers {
		pending += len(k.fds)
	}
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if c.closed || pending >= maxPendingFDs {
				_ = unix.Close(fd)
				c.dropped++
				continue
			}
			c.partial.fds = append(c.partial.fds, fd)
			pending++
		}
	}
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
	for _, k := range append(c.carriers, c.partial) {
		fds = append(fds, k.fds...)
	}
	c.carriers, c.partial = nil, carrier{}
	c.closed = true
	c.fdMu.Unlock()
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	if r := c.ring.Load(); r != nil {
		_ = r.Close()
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

var (
	_ transport.MemorySharer = (*Conn)(nil)
	_ transport.RingConn     = (*Conn)(nil)
	_ transport.TryWriter    = (*Conn)(nil)
)

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
