package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

// Config configures a front.
type Config struct {
	SocketPath string // the VM's vhost-user socket (QEMU connects to it)
	Backend    string // the backend's front socket (vgpu serve --front-socket)
	GuestCID   uint64 // the guest's CID (default 3)
	Port       uint32 // vGPU service port (default transport.DefaultPort)
	// VM names the VM to the backend (logs, per-VM quota); default
	// SocketPath, as "vgpu serve --vhost-user-socket" names it.
	VM string
	// AllowUnprivileged accepts guest source ports >= 1024 (tests only).
	AllowUnprivileged bool
	// MinBackoff and MaxBackoff bound the wait between dials while no
	// backend answers (defaults 100 ms and 2 s).
	MinBackoff, MaxBackoff time.Duration
	Logger                 hclog.Logger // nil: discard
}

// Front serves one VM's vhost-user-vsock socket and forwards its guest
// connections to whichever backend is up.
type Front struct {
	vm  *vhostuser.Server
	fwd *forwarder
	wg  sync.WaitGroup
	err error // vhost-user Serve's error
}

// Start creates the vhost-user socket and serves QEMU and the backend in
// the background until ctx ends or Close.
func Start(ctx context.Context, cfg Config) (*Front, error) {
	cfg = cfg.withDefaults()
	if cfg.Backend == "" {
		return nil, errors.New("front: no backend socket")
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dev, err := vsock.NewDevice(vsock.Config{GuestCID: cfg.GuestCID, VM: cfg.SocketPath, Logger: log.Named("vsock")})
	if err != nil {
		return nil, err
	}
	srv, err := vhostuser.Listen(cfg.SocketPath, dev, log.Named("vhost-user"))
	if err != nil {
		return nil, fmt.Errorf("front for CID %d: %w", cfg.GuestCID, err)
	}
	opts := vsock.ListenOptions{RequirePrivileged: !cfg.AllowUnprivileged}
	fwd := newForwarder(cfg, log, func() (transport.Listener, error) { return dev.Listen(cfg.Port, opts) })
	fwd.mem = srv
	ctx, cancel := context.WithCancel(ctx)
	fwd.cancel = cancel
	f := &Front{vm: srv, fwd: fwd}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		f.err = srv.Serve(ctx)
		cancel()
	}()
	go func() {
		defer f.wg.Done()
		fwd.run(ctx)
	}()
	return f, nil
}

// Close stops serving QEMU and the backend; forwarded connections end.
func (f *Front) Close() error {
	f.fwd.cancel()
	return f.Wait()
}

// Wait blocks until the front has stopped (ctx ended, Close, or the
// vhost-user socket failed) and returns the vhost-user server's error.
func (f *Front) Wait() error {
	f.wg.Wait()
	return f.err
}

// Status is what a front is doing.
type Status struct {
	Connected bool   // a backend is connected
	Streams   int    // guest connections being forwarded
	Connects  uint64 // backend connections made so far
}

// Status returns the front's state.
func (f *Front) Status() Status { return f.fwd.status() }

// forwarder dials the backend and forwards the guest connections that a
// listener (the vsock device's vGPU port) accepts while it is connected.
type forwarder struct {
	cfg    Config
	log    hclog.Logger
	listen func() (transport.Listener, error) // opened per backend connection
	mem    guestmem.Source                    // the VM's memory now (nil: none)
	cancel context.CancelFunc

	connected atomic.Bool
	connects  atomic.Uint64
	streams   atomic.Int64
	nextID    atomic.Uint64
	memGen    atomic.Uint64
}

func (cfg Config) withDefaults() Config {
	if cfg.GuestCID == 0 {
		cfg.GuestCID = 3
	}
	if cfg.Port == 0 {
		cfg.Port = transport.DefaultPort
	}
	if cfg.VM == "" {
		cfg.VM = cfg.SocketPath
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	return cfg
}

func newForwarder(cfg Config, log hclog.Logger, listen func() (transport.Listener, error)) *forwarder {
	cfg = cfg.withDefaults()
	return &forwarder{cfg: cfg, log: log.With("vm", cfg.VM, "backend", cfg.Backend), listen: listen, cancel: func() {}}
}

func (f *forwarder) status() Status {
	return Status{Connected: f.connected.Load(), Streams: int(f.streams.Load()), Connects: f.connects.Load()}
}

// run dials the backend until ctx ends, serving each connection until the
// backend goes away.
func (f *forwarder) run(ctx context.Context) {
	backoff := f.cfg.MinBackoff
	warned := false
	for ctx.Err() == nil {
		ctrl, err := dial(ctx, f.cfg.Backend)
		if err == nil {
			warned = false
			start := time.Now()
			f.serve(ctx, ctrl)
			if time.Since(start) > f.cfg.MaxBackoff {
				// It worked for a while: dial again at once. A backend
				// that hangs up at once (it refused us) is retried with
				// backoff.
				backoff = f.cfg.MinBackoff
				continue
			}
		} else if !warned {
			f.log.Warn("backend not reachable; guest connections are refused until it is; retrying", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > f.cfg.MaxBackoff {
			backoff = f.cfg.MaxBackoff
		}
	}
}

// dial connects to the backend's front socket (SOCK_SEQPACKET).
func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// link is one connection to a backend.
type link struct {
	ctrl   *net.UnixConn
	sendMu sync.Mutex
	mem    handoff.SentMemory // guarded by sendMu

	mu      sync.Mutex
	closed  bool
	streams map[uint64]func() // closes a forwarded stream (both sides)
	wg      sync.WaitGroup
}

// serve runs one backend connection: hello, then forward guest
// connections until the backend hangs up (or sends something a backend
// never sends) or ctx ends.
func (f *forwarder) serve(ctx context.Context, ctrl *net.UnixConn) {
	l := &link{ctrl: ctrl, streams: map[uint64]func(){}}
	defer handoff.Hangup(ctrl)
	if err := handoff.Send(ctrl, &handoff.Message{Op: handoff.OpHello, VM: f.cfg.VM, CID: uint32(f.cfg.GuestCID)}, nil); err != nil {
		f.log.Warn("backend hung up at hello", "err", err)
		return
	}
	ln, err := f.listen()
	if err != nil {
		f.log.Error("cannot listen for guest connections", "err", err)
		return
	}
	f.connected.Store(true)
	n := f.connects.Add(1)
	f.log.Info("backend connected; forwarding guest connections", "connection", n)

	gone := make(chan error, 1)
	go func() {
		for {
			m, fds, err := handoff.Recv(ctrl)
			handoff.CloseFDs(fds) // a backend sends no fds
			if err != nil {
				gone <- err
				return
			}
			f.log.Warn("unexpected message from the backend; ignored", "op", m.Op, "error", m.Error)
		}
	}()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				f.forward(ctx, l, c)
			}()
		}
	}()
	var why error
	tick := time.NewTicker(staleCheck)
	defer tick.Stop()
wait:
	for {
		select {
		case why = <-gone:
			break wait
		case <-ctx.Done():
			why = ctx.Err()
			break wait
		case <-tick.C:
			f.forget(l)
		}
	}
	f.connected.Store(false)
	ln.Close() // new guest connections are reset from now on
	<-accepted
	l.mu.Lock()
	l.closed = true
	closers := make([]func(), 0, len(l.streams))
	for _, c := range l.streams {
		closers = append(closers, c)
	}
	l.mu.Unlock()
	for _, c := range closers {
		c()
	}
	l.wg.Wait()
	l.sendMu.Lock()
	l.mem.Release()
	l.sendMu.Unlock()
	if errors.Is(why, handoff.ErrClosed) {
		f.log.Warn("backend gone; its guest connections were closed; reconnecting", "still_open", len(closers))
	} else if ctx.Err() == nil {
		f.log.Warn("backend connection failed; its guest connections were closed; reconnecting", "err", why, "still_open", len(closers))
	}
}

// forward hands one guest connection to the backend and copies bytes
// between them until either side ends, or the link closes.
func (f *forwarder) forward(ctx context.Context, l *link, c transport.Conn) {
	defer c.Close()
	mine, theirs, err := handoff.Socketpair(unix.SOCK_STREAM)
	if err != nil {
		f.log.Error("guest connection refused", "err", err)
		return
	}
	defer theirs.Close()
	local, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		f.log.Error("guest connection refused", "err", err)
		return
	}
	defer local.Close()
	id := f.nextID.Add(1)
	closeBoth := func() { local.Close(); c.Close() }
	// The stream is registered before it is sent, under sendMu, so that
	// forget never releases the memory a stream just named.
	l.sendMu.Lock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.sendMu.Unlock()
		return
	}
	l.streams[id] = closeBoth
	l.mu.Unlock()
	f.streams.Add(1)
	defer func() {
		l.mu.Lock()
		delete(l.streams, id)
		l.mu.Unlock()
		f.streams.Add(-1)
		f.forget(l)
	}()
	msg := &handoff.Message{Op: handoff.OpSession, Session: id, CID: c.PeerCID(), Port: c.PeerPort(), VM: f.cfg.VM}
	if src := c.Memory(); src != nil {
		gen, err := l.mem.Send(l.ctrl, src, func() uint64 { return f.memGen.Add(1) })
		if err != nil {
			f.log.Warn("guest memory not handed to the backend; this connection may not name guest memory", "err", err)
		}
		msg.Memory = gen
	}
	err = handoff.Send(l.ctrl, msg, []int{int(theirs.Fd())})
	l.sendMu.Unlock()
	theirs.Close()
	if err != nil {
		f.log.Warn("guest connection not handed to the backend; closing it", "session", id, "err", err)
		return
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(local, c); _ = local.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, local); c.Close(); done <- struct{}{} }()
	<-done
	<-done
}

// staleCheck is how often an idle link checks whether the guest memory it
// last sent is still the VM's.
const staleCheck = 2 * time.Second

// forget drops the guest memory table last sent, here and (with an empty
// memory message) at the backend, once no stream is forwarded and the table
// is no longer the VM's (QEMU exited, or changed it): the RAM of a VM that
// is gone must not stay mapped on its behalf. A table still current is
// kept, so the backend's mappings (and the GPU's registration of them) last
// from one guest program to the next.
func (f *forwarder) forget(l *link) {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.mu.Lock()
	idle := len(l.streams) == 0 && !l.closed
	l.mu.Unlock()
	if !idle || !l.mem.Held() || f.current(&l.mem) {
		return
	}
	l.mem.Release()
	if err := handoff.Send(l.ctrl, &handoff.Message{Op: handoff.OpMemory}, nil); err != nil {
		f.log.Debug("backend gone before it heard that guest memory is unused", "err", err)
	}
}

// current reports whether sent holds the VM's memory table now.
func (f *forwarder) current(sent *handoff.SentMemory) bool {
	if f.mem == nil {
		return false
	}
	t, err := f.mem.Acquire()
	if err != nil {
		return false
	}
	defer t.Release()
	return sent.Is(t)
}
