package front

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// ListenOptions configure the backend's front socket.
type ListenOptions struct {
	// Mode is the socket file's mode (default 0600: fronts run as the
	// backend's user).
	Mode os.FileMode
	// AllowUnsealed accepts guest RAM memfds that are not sealed against
	// shrinking (tests only: a front could then truncate the file under
	// the backend's mapping, which faults the backend).
	AllowUnsealed bool
	// MaxStreams caps one front's open guest streams (default 1024; the
	// vsock device itself holds at most 256 per VM).
	MaxStreams int
	// HelloTimeout bounds the wait for a new front's hello (default 5 s).
	HelloTimeout time.Duration
	Logger       hclog.Logger // nil: discard
}

// Listener is the backend's front socket ("vgpu serve --front-socket"):
// it accepts fronts and hands out the guest streams they forward, each
// with the memory table its front sent. It implements transport.Listener.
type Listener struct {
	ln     *net.UnixListener
	path   string
	opts   ListenOptions
	log    hclog.Logger
	accept chan transport.Conn
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu     sync.Mutex
	fronts map[*peer]struct{}
	names  map[string]*peer

	dropped atomic.Uint64
}

var _ transport.Listener = (*Listener)(nil)

// Listen creates the front socket at path (replacing a stale socket file
// that nobody serves) and accepts fronts in the background.
func Listen(path string, opts ListenOptions) (*Listener, error) {
	if opts.Mode == 0 {
		opts.Mode = 0o600
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 1024
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("front: %s exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("front: another backend is serving %s", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("front: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, opts.Mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("front: chmod %s: %w", path, err)
	}
	l := &Listener{
		ln: ln, path: path, opts: opts, log: log.With("front_socket", path),
		accept: make(chan transport.Conn), done: make(chan struct{}),
		fronts: map[*peer]struct{}{}, names: map[string]*peer{},
	}
	l.wg.Add(1)
	go l.acceptFronts()
	return l, nil
}

// Accept waits for the next guest stream of any front.
func (l *Listener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting fronts and drops every front (their streams end).
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		err = nil
		close(l.done)
		l.ln.Close()
		l.mu.Lock()
		for p := range l.fronts {
			handoff.Hangup(p.ctrl) // wakes its reader, which cleans up
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return err
}

// Addr is the socket's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// FrontStatus is one connected front.
type FrontStatus struct {
	VM      string `json:"vm"`
	CID     uint32 `json:"cid"`
	PID     int32  `json:"pid"`
	Streams int    `json:"streams"`
	Memory  bool   `json:"memory"` // a memory table was received
}

// Fronts lists the connected fronts (those past their hello).
func (l *Listener) Fronts() []FrontStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []FrontStatus{}
	for _, p := range l.names {
		p.mu.Lock()
		out = append(out, FrontStatus{VM: p.vm, CID: p.cid, PID: p.pid, Streams: len(p.streams), Memory: p.gen != 0})
		p.mu.Unlock()
	}
	return out
}

// Dropped counts fronts dropped for a protocol violation.
func (l *Listener) Dropped() uint64 { return l.dropped.Load() }

func (l *Listener) acceptFronts() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.Warn("accepting a front failed; retrying", "err", err)
			select {
			case <-l.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		p := &peer{l: l, ctrl: c, pid: -1, streams: map[*stream]struct{}{}, mem: guestmem.Latest{Missing: handoff.ErrNoMemory}}
		if cred, err := peerCred(c); err == nil {
			p.pid, p.uid = cred.Pid, cred.Uid
		}
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			c.Close()
			return
		default:
		}
		l.fronts[p] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go p.serve()
	}
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// peer is one connected front.
type peer struct {
	l       *Listener
	ctrl    *net.UnixConn
	pid     int32
	uid     uint32
	vm      string
	cid     uint32
	mem     guestmem.Latest
	mu      sync.Mutex
	gen     uint64 // generation of the table in mem (0: none)
	streams map[*stream]struct{}
}

// errProtocol marks a front's protocol violation (the front is dropped).
var errProtocol = errors.New("front protocol violation")

func violation(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// serve reads one front's messages until it hangs up or breaks the
// protocol; then its streams end and its memory is released.
func (p *peer) serve() {
	l := p.l
	defer l.wg.Done()
	err := p.run()
	handoff.Hangup(p.ctrl)
	p.mu.Lock()
	streams := make([]*stream, 0, len(p.streams))
	for s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	for _, s := range streams {
		s.Conn.Close() // its session reads an error and ends
	}
	p.mem.Set(nil)
	l.mu.Lock()
	delete(l.fronts, p)
	if p.vm != "" && l.names[p.vm] == p {
		delete(l.names, p.vm)
	}
	l.mu.Unlock()
	log := l.log.With("vm", p.vm, "front_pid", p.pid)
	switch {
	case errors.Is(err, errProtocol) || errors.Is(err, handoff.ErrMalformed) || errors.Is(err, handoff.ErrBadMemory):
		l.dropped.Add(1)
		log.Error("front dropped: it sent something a front must not; its guest connections end", "err", err, "streams", len(streams))
	case errors.Is(err, handoff.ErrClosed) || errors.Is(err, net.ErrClosed):
		log.Info("front disconnected", "streams", len(streams))
	default:
		log.Warn("front connection failed", "err", err, "streams", len(streams))
	}
}

func (p *peer) run() error {
	l := p.l
	_ = p.ctrl.SetReadDeadline(time.Now().Add(l.opts.HelloTimeout))
	m, fds, err := handoff.Recv(p.ctrl)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return violation("no hello within %v", l.opts.HelloTimeout)
		}
		return err
	}
	_ = p.ctrl.SetReadDeadline(time.Time{})
	if err := p.hello(m, fds); err != nil {
		return err
	}
	l.log.Info("front connected", "vm", p.vm, "cid", p.cid, "front_pid", p.pid, "front_uid", p.uid)
	for {
		m, fds, err := handoff.Recv(p.ctrl)
		if err != nil {
			return err
		}
		switch m.Op {
		case handoff.OpMemory:
			err = p.memory(m, fds)
		case handoff.OpSession:
			err = p.session(m, fds)
		default:
			handoff.CloseFDs(fds)
			err = violation("unexpected %q message", m.Op)
		}
		if err != nil {
			return err
		}
	}
}

// maxVMName bounds the VM name a front gives.
const maxVMName = 256

func (p *peer) hello(m *handoff.Message, fds []int) error {
	l := p.l
	if len(fds) != 0 {
		handoff.CloseFDs(fds)
		return violation("hello with %d fds", len(fds))
	}
	if m.Op != handoff.OpHello {
		return violation("first message is %q, want hello", m.Op)
	}
	if err := checkName(m.VM); err != nil {
		return err
	}
	if m.CID <= transport.HostCID || m.CID == 0xffffffff {
		return violation("guest CID %d is reserved", m.CID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, ok := l.names[m.VM]; ok {
		return violation("VM %q is already served by another front (pid %d)", m.VM, other.pid)
	}
	p.vm, p.cid = m.VM, m.CID
	l.names[m.VM] = p
	return nil
}

func checkName(s string) error {
	if s == "" || len(s) > maxVMName || !utf8.ValidString(s) {
		return violation("VM name must be 1..%d bytes of UTF-8", maxVMName)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return violation("VM name %q has unprintable characters", s)
		}
	}
	return nil
}

func (p *peer) memory(m *handoff.Message, fds []int) error {
	if m.Memory == 0 && len(m.Regions) == 0 && len(fds) == 0 {
		// The front forwards no stream: the VM may be gone; unmap its RAM.
		p.mem.Set(nil)
		p.mu.Lock()
		p.gen = 0
		p.mu.Unlock()
		return nil
	}
	if m.Memory == 0 {
		handoff.CloseFDs(fds)
		return violation("memory message without a generation")
	}
	t, err := handoff.Map(m, fds, handoff.MapOptions{RequireSealed: !p.l.opts.AllowUnsealed})
	if err != nil {
		return err
	}
	p.mem.Set(t)
	p.mu.Lock()
	p.gen = m.Memory
	p.mu.Unlock()
	p.l.log.Info("guest memory mapped", "vm", p.vm, "regions", len(m.Regions), "generation", m.Memory)
	return nil
}

func (p *peer) session(m *handoff.Message, fds []int) error {
	if len(fds) != 1 {
		handoff.CloseFDs(fds)
		return violation("session message with %d fds", len(fds))
	}
	if (m.VM != "" && m.VM != p.vm) || (m.CID != 0 && m.CID != p.cid) || len(m.Regions) != 0 {
		handoff.CloseFDs(fds)
		return violation("session message for VM %q CID %d (the front said %q CID %d)", m.VM, m.CID, p.vm, p.cid)
	}
	p.mu.Lock()
	gen, full := p.gen, len(p.streams) >= p.l.opts.MaxStreams
	p.mu.Unlock()
	if m.Memory != 0 && m.Memory != gen {
		handoff.CloseFDs(fds)
		return violation("session uses memory generation %d, the front sent %d", m.Memory, gen)
	}
	if full {
		// Not a violation: the guest opened many connections. Refuse
		// this one (the front sees its end close).
		handoff.CloseFDs(fds)
		p.l.log.Warn("guest stream refused: too many open streams for this front", "vm", p.vm, "max", p.l.opts.MaxStreams)
		return nil
	}
	c, err := handoff.NewConn(fds[0], p.cid, m.Port, p.vm, nil)
	if err != nil {
		return violation("%v", err)
	}
	if m.Memory != 0 {
		c.Mem = &p.mem
	}
	s := &stream{Conn: c, p: p}
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	select {
	case p.l.accept <- s:
		return nil
	case <-p.l.done:
		s.Close()
		return net.ErrClosed
	}
}

// stream is a guest stream from a front; closing it forgets it.
type stream struct {
	*handoff.Conn
	p    *peer
	once sync.Once
}

func (s *stream) Close() error {
	err := s.Conn.Close()
	s.once.Do(func() {
		s.p.mu.Lock()
		delete(s.p.streams, s)
		s.p.mu.Unlock()
	})
	return err
}
